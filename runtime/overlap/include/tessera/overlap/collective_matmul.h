// Collective matmuls for tensor parallelism, run as a ring: the communication is cut into one
// chunk per rank, and at every step each rank sends one chunk to the next rank and receives one
// from the previous (send/recv on the communicator, queued on the object's send and receive
// streams) while the GEMM of a chunk already present runs on the caller's compute stream, so each
// chunk's GEMM overlaps the next chunk's transfer:
//
//   allgather_matmul:       Y = allgather_rows(X_r) W        (sequence-parallel input, column-
//                           parallel weight). Step s passes on the block received at step s-1
//                           (this rank's own at step 0) and receives block rank-s-1; this
//                           rank's rows are multiplied before anything moved, every other block
//                           as soon as it arrived. Equal to allgather + one GEMM within the
//                           f32 dot-product bound (BLAS promises no bits across shapes).
//   matmul_reduce_scatter:  Y_r = rows r of sum_q X_q W_q    (row-parallel weight, reduce-
//                           scattered output). Step s computes the partial product of block
//                           rank-s-1, adds the running sum received from the previous rank (on
//                           the send stream, HAL reduce) and passes it on; after ranks-1 steps
//                           block r holds the whole sum on rank r. The GEMMs run back to back on
//                           the compute stream while the sums travel. Equal to GEMM +
//                           reduce_scatter within f32 summation-order tolerance.
//
// Why duplicate communicators: a communicator runs its queued operations one at a time, so a
// send to the next rank and a receive from the previous one would serialise (and deadlock once a
// message outgrows the transport's buffering). Each ring edge r -> r+1 gets its own duplicate of
// the communicator (edges coloured so that no rank sends and receives on the same one: two
// colours for an even ring, three for an odd one), so both directions move at once.
//
// Matrices are row-major f32 in device memory of the object's device (host memory only where
// that device's memory is host-accessible; anything else is refused, naming the argument): the
// GEMMs and adds are the backend's stream operations, the chunks move through the communicator's
// stream API, and nothing runs in a stream callback. Like GradSync, one thread uses an object.
// Needs a backend with GEMM and reduce.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::overlap {

class CollectiveMatmul {
 public:
  // Fails when the device's backend has no GEMM (gemm_async NULL).
  static Result<std::unique_ptr<CollectiveMatmul>> create(std::shared_ptr<coll::Communicator> comm,
                                                          const hal::Device& device);
  ~CollectiveMatmul();  // waits for queued work

  // x_shard: this rank's m_shard x k rows of X (ready after the work queued so far on
  // `compute`); w: k x n; x_full: m x k, receives the gathered X (m = m_shard x ranks); y: m x n.
  // Returns once everything is queued; y is complete after the work then queued on `compute`.
  // w_transposed: w holds W^T, n x k row-major (a linear layer's [out, in] weight).
  Status allgather_matmul(const float* x_shard, int64_t m_shard, int64_t k, const float* w,
                          int64_t n, float* x_full, float* y, const hal::Stream& compute,
                          bool w_transposed = false);

  // x_local: m x k_local (this rank's columns of X); w_local: k_local x n (its rows of W);
  // y_shard: (m / ranks) x n, rows [rank * m / ranks, ...) of the sum. m must divide evenly.
  // w_transposed: w_local holds its W^T, n x k_local row-major.
  Status matmul_reduce_scatter(const float* x_local, int64_t m, int64_t k_local,
                               const float* w_local, int64_t n, float* y_shard,
                               const hal::Stream& compute, bool w_transposed = false);

  int ranks() const { return comm_->size(); }  // of the communicator given to create()

  // Waits (bounded) for the collectives of the last call and returns their first failure.
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(300000));

 private:
  CollectiveMatmul() = default;
  struct BufferArg {
    const void* ptr;
    size_t bytes;
    const char* name;
  };
  // Each buffer is memory of the device (device_memory.h), large enough for its matrix.
  Status check_buffers(const char* operation, std::initializer_list<BufferArg> buffers) const;
  Status ensure_events(std::vector<hal::Event>& events, size_t count);
  std::shared_ptr<coll::Communicator> comm_;
  std::vector<std::shared_ptr<coll::Communicator>> edges_;  // one per ring edge colour
  coll::Communicator* send_comm_ = nullptr;                 // this rank -> next
  coll::Communicator* recv_comm_ = nullptr;                 // previous -> this rank
  std::optional<hal::Device> device_;
  hal::Stream send_stream_;
  hal::Stream recv_stream_;
  std::vector<hal::Event> arrived_;   // per step: the chunk received at that step is in place
  std::vector<hal::Event> computed_;  // per step: that step's GEMM is done
  hal::Event inputs_;
  hal::Event done_;
  hal::DeviceBuffer workspace_;  // matmul_reduce_scatter: partial products, then received sums
  std::vector<coll::Work> works_;
};

}  // namespace tessera::overlap
