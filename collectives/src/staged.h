// The staged route: operations on device buffers that the CPU cannot address run on pinned host
// buffers that the communicator owns, with the device's own copies moving the bytes.
//
// allreduce, reduce and broadcast are cut into chunks (chunk_plan below; every rank cuts the same
// way, each chunk is an operation of its own with its own sequence number) and pipelined over
// three pinned slots and two internal streams: while chunk i travels between the ranks, the
// device→host copy of chunk i+1 and the host→device copy of chunk i−1 run on the device. The
// other operations stage their whole buffers (correct first; their per-peer blocks are a later
// refinement). The CPU never dereferences a device pointer here: only the HAL's copies do.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "algo/algo.h"
#include "tessera/hal/platform.h"

namespace tessera::coll {

// How an operation of `count` elements of `dtype` is cut into chunk operations of at most
// `chunk_bytes` (at least one element; one chunk when count is 0). Pure: every rank of a
// communicator computes the same plan from the same arguments.
struct ChunkPlan {
  size_t per_chunk = 0;  // elements
  size_t chunks = 1;
};
ChunkPlan chunk_plan(size_t count, DType dtype, size_t chunk_bytes);
// The operations that are cut into chunks (the others are staged whole).
bool chunked_op(OpKind kind);
// Chunk `i` of `d` (pointers advanced, count cut); the pointers stay as `d`'s kind of memory.
OpDesc chunk_of(const OpDesc& d, const ChunkPlan& plan, size_t i);

class Stager {
 public:
  // Runs one operation on host buffers (the caller's algorithm step, under its lock).
  using RunHost = std::function<Status(const OpDesc&)>;

  // Streams and events on `device`; pinned buffers are allocated on first use and kept.
  static Result<std::unique_ptr<Stager>> create(const hal::Device& device, size_t chunk_bytes);
  ~Stager();

  // Runs `d` (device buffers of this stager's device) through pinned buffers. Returns when the
  // results are in device memory. Not thread-safe (the communicator runs one operation at a time).
  Status run(const OpDesc& d, int rank, int size, const RunHost& run_host);

 private:
  static constexpr size_t kSlots = 3;
  Stager() = default;
  Status run_chunked(const OpDesc& d, int rank, const RunHost& run_host);
  Status run_whole(const OpDesc& d, int rank, int size, const RunHost& run_host);
  Status reserve(hal::HostBuffer& buffer, size_t bytes, const char* what);
  // Waits for both internal streams, keeping the first error (after a failure too: a copy in
  // flight must not outlive the operation that owns its buffers).
  Status settle(Status first);

  std::unique_ptr<hal::Device> device_;
  size_t chunk_bytes_ = 0;
  hal::Stream d2h_, h2d_;
  std::array<hal::HostBuffer, kSlots> slots_;
  std::array<hal::Event, kSlots> d2h_done_, h2d_done_;
  hal::HostBuffer whole_send_, whole_recv_;
  std::vector<hal::HostBuffer> retired_;  // outgrown buffers, freed with the stager (reserve())
};

}  // namespace tessera::coll
