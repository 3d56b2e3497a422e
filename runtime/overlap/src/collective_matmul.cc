#include "tessera/overlap/collective_matmul.h"

#include "tessera/common/log.h"

namespace tessera::overlap {
namespace {

// Row-major C (rows x n) = A (rows x k, lda) B (k x n) as the column-major GEMM C^T = B^T A^T:
// B^T is B read column-major (n x k, ld n), A^T is A read column-major (k x rows, ld lda).
tsr_gemm_desc row_major_gemm(const float* a, int64_t rows, int64_t k, int64_t lda, const float* b,
                             int64_t n, float* c, int64_t ldc) {
  tsr_gemm_desc d{};
  d.struct_size = sizeof d;
  d.trans_a = 0;
  d.trans_b = 0;
  d.m = n;
  d.n = rows;
  d.k = k;
  d.alpha = 1.0;
  d.beta = 0.0;
  d.a = b;
  d.lda = n;
  d.b = a;
  d.ldb = lda;
  d.c = c;
  d.ldc = ldc;
  d.dtype_ab = TSR_DTYPE_F32;
  d.dtype_c = TSR_DTYPE_F32;
  return d;
}

}  // namespace

Result<std::unique_ptr<CollectiveMatmul>> CollectiveMatmul::create(
    std::shared_ptr<coll::Communicator> comm, const hal::Device& device) {
  if (comm == nullptr) return invalid_argument("CollectiveMatmul: communicator is null");
  if (device.backend()->api().gemm_async == nullptr) {
    return unimplemented("CollectiveMatmul: backend '" + device.backend_name() +
                         "' has no GEMM (gemm_async is NULL)");
  }
  std::unique_ptr<CollectiveMatmul> cm(new CollectiveMatmul());
  cm->comm_ = std::move(comm);
  cm->device_ = device;
  TSR_ASSIGN_OR_RETURN(cm->comm_stream_, device.create_stream(-1));
  TSR_ASSIGN_OR_RETURN(cm->done_, device.create_event(false));
  return cm;
}

CollectiveMatmul::~CollectiveMatmul() {
  if (comm_stream_.handle() != nullptr) {
    if (Status s = comm_stream_.synchronize(); !s.ok()) {
      TSR_LOG(kWarn, "overlap") << "CollectiveMatmul teardown: " << s.to_string();
    }
  }
}

Status CollectiveMatmul::ensure_events(size_t count) {
  while (events_.size() < count) {
    TSR_ASSIGN_OR_RETURN(hal::Event e, device_->create_event(false));
    events_.push_back(std::move(e));
  }
  return Status();
}

Status CollectiveMatmul::allgather_matmul(const float* x_shard, int64_t m_shard, int64_t k,
                                          const float* w, int64_t n, float* x_full, float* y,
                                          const hal::Stream& compute) {
  if (m_shard <= 0 || k <= 0 || n <= 0) {
    return invalid_argument("allgather_matmul: m_shard, k and n must be positive");
  }
  if (!x_shard || !w || !x_full || !y) return invalid_argument("allgather_matmul: null buffer");
  const int ranks = comm_->size(), rank = comm_->rank();
  const size_t chunk = size_t(m_shard * k);
  TSR_RETURN_IF_ERROR(ensure_events(size_t(ranks) + 1));
  works_.clear();
  // The communication stream starts once x_shard is written.
  hal::Event& inputs = events_[size_t(ranks)];
  TSR_RETURN_IF_ERROR(inputs.record(compute));
  TSR_RETURN_IF_ERROR(comm_stream_.wait(inputs));
  for (int s = 0; s < ranks; ++s) {
    float* slot = x_full + size_t(s) * chunk;
    const float* send = s == rank ? x_shard : slot;
    TSR_ASSIGN_OR_RETURN(coll::Work work,
                         comm_->broadcast(send, slot, chunk, hal::DType::kF32, s, comm_stream_));
    works_.push_back(std::move(work));
    TSR_RETURN_IF_ERROR(events_[size_t(s)].record(comm_stream_));
  }
  // This rank's rows first (nothing to wait for), then each chunk as it arrives.
  TSR_RETURN_IF_ERROR(compute.gemm(
      row_major_gemm(x_shard, m_shard, k, k, w, n, y + size_t(rank) * size_t(m_shard * n), n)));
  for (int s = 0; s < ranks; ++s) {
    if (s == rank) continue;
    TSR_RETURN_IF_ERROR(compute.wait(events_[size_t(s)]));
    TSR_RETURN_IF_ERROR(compute.gemm(row_major_gemm(x_full + size_t(s) * chunk, m_shard, k, k, w, n,
                                                    y + size_t(s) * size_t(m_shard * n), n)));
  }
  return Status();
}

Status CollectiveMatmul::matmul_reduce_scatter(const float* x_local, int64_t m, int64_t k_local,
                                               const float* w_local, int64_t n, float* y_shard,
                                               const hal::Stream& compute) {
  const int ranks = comm_->size(), rank = comm_->rank();
  if (m <= 0 || k_local <= 0 || n <= 0) {
    return invalid_argument("matmul_reduce_scatter: m, k_local and n must be positive");
  }
  if (m % ranks != 0) {
    return invalid_argument("matmul_reduce_scatter: m = " + std::to_string(m) +
                            " does not divide over " + std::to_string(ranks) + " ranks");
  }
  if (!x_local || !w_local || !y_shard) {
    return invalid_argument("matmul_reduce_scatter: null buffer");
  }
  const int64_t rows = m / ranks;
  const size_t chunk = size_t(rows * n);
  if (workspace_.size() < size_t(m * n) * sizeof(float)) {
    TSR_RETURN_IF_ERROR(comm_stream_.synchronize());  // the old workspace may still be read
    TSR_ASSIGN_OR_RETURN(workspace_, device_->allocate(size_t(m * n) * sizeof(float)));
  }
  float* ws = static_cast<float*>(workspace_.data());
  TSR_RETURN_IF_ERROR(ensure_events(size_t(ranks)));
  works_.clear();
  for (int d = 0; d < ranks; ++d) {
    // Rank d's rows of this rank's partial product, then their reduction to rank d.
    TSR_RETURN_IF_ERROR(
        compute.gemm(row_major_gemm(x_local + size_t(d * rows * k_local), rows, k_local, k_local,
                                    w_local, n, ws + size_t(d) * chunk, n)));
    TSR_RETURN_IF_ERROR(events_[size_t(d)].record(compute));
    TSR_RETURN_IF_ERROR(comm_stream_.wait(events_[size_t(d)]));
    float* recv = d == rank ? y_shard : ws + size_t(d) * chunk;
    TSR_ASSIGN_OR_RETURN(coll::Work work,
                         comm_->reduce(ws + size_t(d) * chunk, recv, chunk, hal::DType::kF32,
                                       hal::ReduceOp::kSum, d, comm_stream_));
    works_.push_back(std::move(work));
  }
  TSR_RETURN_IF_ERROR(done_.record(comm_stream_));
  return compute.wait(done_);
}

Status CollectiveMatmul::wait(std::chrono::milliseconds timeout) {
  for (auto& work : works_) {
    if (Status s = work.wait(timeout); !s.ok()) return s.with_context("collective matmul");
  }
  return comm_stream_.synchronize();
}

}  // namespace tessera::overlap
