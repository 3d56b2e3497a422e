// Collective matmuls for tensor parallelism, with the communication cut into one chunk per rank
// so that each chunk's GEMM (the HAL GEMM, on the caller's compute stream) runs while the next
// chunk moves (on the engine's communication stream):
//
//   allgather_matmul:       Y = allgather_rows(X_r) W        (sequence-parallel input, column-
//                           parallel weight); chunk s is rank s's rows of X, moved by a
//                           broadcast from rank s; Y's rows of chunk s are multiplied as soon as
//                           it arrives (this rank's own chunk first, before anything moved).
//                           Bit for bit what allgather + one GEMM gives.
//   matmul_reduce_scatter:  Y_r = rows r of sum_q X_q W_q    (row-parallel weight, reduce-
//                           scattered output); chunk d is the partial product of rank d's rows,
//                           reduced to rank d while the next chunk's GEMM runs. Equal to GEMM +
//                           reduce_scatter within f32 summation-order tolerance.
//
// Matrices are row-major f32. The chunks move as broadcasts/reduces in rank order (the
// communicator runs queued operations one at a time, so a ring of paired send/recv would
// serialise the same way); the volume per rank is that of a ring all-gather/reduce-scatter.
// Like GradSync, one thread uses an object, and buffers must be host-addressable.
#pragma once

#include <chrono>
#include <cstdint>
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
  Status allgather_matmul(const float* x_shard, int64_t m_shard, int64_t k, const float* w,
                          int64_t n, float* x_full, float* y, const hal::Stream& compute);

  // x_local: m x k_local (this rank's columns of X); w_local: k_local x n (its rows of W);
  // y_shard: (m / ranks) x n, rows [rank * m / ranks, ...) of the sum. m must divide evenly.
  Status matmul_reduce_scatter(const float* x_local, int64_t m, int64_t k_local,
                               const float* w_local, int64_t n, float* y_shard,
                               const hal::Stream& compute);

  // Waits (bounded) for the collectives of the last call and returns their first failure.
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(300000));

 private:
  CollectiveMatmul() = default;
  Status ensure_events(size_t count);
  std::shared_ptr<coll::Communicator> comm_;
  std::optional<hal::Device> device_;
  hal::Stream comm_stream_;
  std::vector<hal::Event> events_;
  hal::Event done_;
  hal::DeviceBuffer workspace_;
  std::vector<coll::Work> works_;
};

}  // namespace tessera::overlap
