// Communicators: a group of ranks (one device each) that run collective operations together.
//
// Every rank of a communicator must issue the same operations in the same order (as with MPI and
// NCCL); a cheap header sent with every message checks it, and a mismatch (other operation, dtype
// or count) fails on the rank that sees it with an error naming both ranks, and aborts the
// communicator everywhere it can reach. A communicator is used by one thread at a time.
//
// Memory: host memory (pageable or pinned), or device memory of the communicator's device, even
// when the CPU cannot address it (a GPU; the host backend's discrete mode). Each call's buffers
// are classified through the HAL (pointer_attributes): device memory moves through the backend's
// collective library where it has one (native route) or through the communicator's pinned buffers
// in a pipeline of chunks (staged route); host memory is read by the CPU (host route). Device
// memory of another device, host memory under memory=device, device memory the CPU cannot address
// under memory=host, and a call mixing host and device memory are refused with an error naming
// the operation, the argument and the device. Blocking calls on device memory expect the device
// work that produced it to be complete (synchronize it first, or use the stream form). Any element
// count, any alignment. docs/COLLECTIVES.md, "Memory".
//
// Two ways to call each operation:
//   - blocking: `comm.allreduce(send, recv, n, DType::kF32, ReduceOp::kSum)` runs it now, on the
//     calling thread, and returns when it is complete;
//   - on a stream: the same arguments plus a `hal::Stream&`; the operation starts when the work
//     queued before it on that stream is done, later work on the stream waits for it, and the
//     returned Work can be waited on with a timeout or turned into an event. With host signals
//     (ABI 1.2) the stream waits on a signal the communicator's proxy thread raises, and no backend
//     thread is held; without them a stream callback holds the stream until the operation is done
//     (the fallback; on a backend that runs every callback on one thread, two communicators'
//     stream operations then serialize).
//
// Faults: every wait is bounded by the timeout (TESSERA_COLL_TIMEOUT_MS, CommOptions::timeout). A
// rank that dies is detected (local ranks through pidfds, remote ones through the transport), and
// the pending and later operations of every survivor fail with an error naming the dead rank and
// the operation. abort() unblocks everything; after a failure or an abort the communicator only
// returns errors; re-form one after a restart with Bootstrap::next_generation and create()
// (docs/COLLECTIVES.md, "Elastic recovery"). Destroying an aborted communicator never blocks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::coll {

using hal::DType;
using hal::ReduceOp;

enum class OpKind : uint8_t {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,
  kAllGatherV,
  kReduceScatter,
  kAllToAll,
  kAllToAllV,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr int kNumOpKinds = 11;
std::string_view op_name(OpKind op);  // "allreduce", "reduce_scatter", ...

struct CommOptions {
  // Bound on every wait. Default: TESSERA_COLL_TIMEOUT_MS, else 300000 (5 minutes).
  std::chrono::milliseconds timeout{0};
  // Forced algorithms, "allreduce:ring,broadcast:tree". Default: TESSERA_COLL_ALGO.
  std::string algorithms;
  // Transport between ranks: "auto" (shared memory inside a host, UCX across), "shm", "ucx".
  // Default: TESSERA_COLL_TRANSPORT, else "auto".
  std::string transport;
  // Which memory calls pass: "auto" (classify each buffer), "host" (refuse device memory the CPU
  // cannot address), "device" (refuse host memory). Default: TESSERA_COLL_MEMORY, else "auto".
  std::string memory;
  // How device buffers move: "auto" (native when the backend has a collective library, else
  // staged), "native" (creation fails naming the backend when it has none), "staged" (always
  // through pinned host buffers, even for memory the CPU could address). Default:
  // TESSERA_COLL_DEVICE_PATH, else "auto".
  std::string device_path;
  // Staged route: bytes per chunk of allreduce/reduce/broadcast (every rank must use the same).
  // Default: TESSERA_COLL_STAGE_CHUNK, else 4 MiB.
  size_t stage_chunk_bytes = 0;
};

class WorkState;  // internal

// Handle of an operation queued on a stream. Copyable; all copies refer to the same operation.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}

  // Waits until the operation finished, up to `timeout`; its status, or DEADLINE_EXCEEDED (the
  // operation is still running then).
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  bool done() const;
  // An event recorded on the operation's stream after it: other streams can wait on it.
  const hal::Event& event() const;

 private:
  std::shared_ptr<WorkState> state_;
};

class CommImpl;  // internal

class Communicator {
 public:
  // The world communicator of a bootstrap: every rank of the job calls it. `device`, when given,
  // is the device this rank uses (streams passed to operations must belong to it).
  static Result<std::shared_ptr<Communicator>> create(std::shared_ptr<Bootstrap> bootstrap,
                                                      CommOptions options = {});
  static Result<std::shared_ptr<Communicator>> create(std::shared_ptr<Bootstrap> bootstrap,
                                                      const hal::Device& device,
                                                      CommOptions options = {});
  ~Communicator();

  int rank() const;
  int size() const;
  int local_rank() const;  // among the ranks of this communicator on the same host
  int local_size() const;
  int num_hosts() const;
  int world_rank(int rank) const;  // the rank in the bootstrap's job

  // Collective over this communicator. Ranks with the same color form a new communicator, ordered
  // by (key, rank); a negative color returns nullptr (not a member).
  Result<std::shared_ptr<Communicator>> split(int color, int key);
  // Collective over this communicator: every rank passes the same list (ranks of this
  // communicator); members get the new communicator (rank = position in the list), others nullptr.
  Result<std::shared_ptr<Communicator>> group(std::span<const int> ranks);

  // ---- blocking operations -------------------------------------------------------------------
  // In place: send == recv (allgather: send == recv + rank * count elements; reduce_scatter:
  // recv == send + rank * recv_count elements). Counts are in elements of `dtype`.
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  Status reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  Status broadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, DType dtype);
  // Rank r contributes counts[r] elements, placed at recv + displs[r] elements.
  Status allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                    std::span<const size_t> displs, DType dtype);
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  Status alltoall(const void* send, void* recv, size_t count, DType dtype);
  Status alltoallv(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_displs, void* recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                   DType dtype);
  Status send(const void* buf, size_t count, DType dtype, int peer);
  Status recv(void* buf, size_t count, DType dtype, int peer);
  Status barrier();

  // ---- the same operations queued on a stream ------------------------------------------------
  Result<Work> allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         const hal::Stream& stream);
  Result<Work> reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      int root, const hal::Stream& stream);
  Result<Work> broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                         const hal::Stream& stream);
  Result<Work> allgather(const void* send, void* recv, size_t count, DType dtype,
                         const hal::Stream& stream);
  Result<Work> reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op, const hal::Stream& stream);
  Result<Work> alltoall(const void* send, void* recv, size_t count, DType dtype,
                        const hal::Stream& stream);
  Result<Work> send(const void* buf, size_t count, DType dtype, int peer,
                    const hal::Stream& stream);
  Result<Work> recv(void* buf, size_t count, DType dtype, int peer, const hal::Stream& stream);

  // Makes every pending and later operation of this communicator fail with ABORTED and `reason`;
  // reaches the other local ranks through shared memory. Safe from any thread.
  void abort(std::string reason);
  bool aborted() const;

  // The last operations of this rank (sequence number, op, dtype, count, peer, algorithm, state,
  // timestamps), one per line; also logged on a timeout or failure.
  std::string flight_record() const;

  // The algorithm the tuner picks for `op` of `bytes` on this communicator ("ring", "tree", ...).
  std::string_view algorithm_for(OpKind op, size_t bytes) const;
  // The route `op` takes on device memory of this communicator's device (or on host memory):
  // "host", "staged" or "native" (docs/COLLECTIVES.md, "Memory").
  std::string_view route_for(OpKind op, bool device_memory) const;

  CommImpl& impl() { return *impl_; }
  // Internal: communicators are made by create(), split() and group().
  explicit Communicator(std::unique_ptr<CommImpl> impl);

 private:
  std::unique_ptr<CommImpl> impl_;
};

}  // namespace tessera::coll
