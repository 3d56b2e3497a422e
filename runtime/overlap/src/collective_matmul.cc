// The ring collective matmuls (see the header for the schedule and why duplicate communicators).
#include "tessera/overlap/collective_matmul.h"

#include "device_memory.h"
#include "tessera/common/log.h"
#include "tessera/hal/gemm_desc.h"

namespace tessera::overlap {
namespace {

// Row-major C (rows x n) = A (rows x k, lda) B (k x n) as the column-major GEMM C^T = B^T A^T:
// B^T is B read column-major (n x k, ld n), A^T is A read column-major (k x rows, ld lda).
// b_transposed: b holds B^T (n x k row-major), which read column-major is B (k x n, ld k): op = T.
tsr_gemm_desc row_major_gemm(const float* a, int64_t rows, int64_t k, int64_t lda, const float* b,
                             int64_t n, float* c, int64_t ldc, bool b_transposed) {
  return hal::f32_gemm_desc(b_transposed, false, n, rows, k, b, b_transposed ? k : n, a, lda, c,
                            ldc);
}

}  // namespace

Result<std::unique_ptr<CollectiveMatmul>> CollectiveMatmul::create(
    std::shared_ptr<coll::Communicator> comm, const hal::Device& device) {
  if (comm == nullptr) return invalid_argument("CollectiveMatmul: communicator is null");
  if (device.backend()->api().gemm_async == nullptr) {
    return unimplemented("CollectiveMatmul: backend '" + device.backend_name() +
                         "' has no GEMM (gemm_async is NULL)");
  }
  if (device.backend()->api().reduce_async == nullptr) {
    return unimplemented("CollectiveMatmul: backend '" + device.backend_name() +
                         "' has no reduce (reduce_async is NULL)");
  }
  std::unique_ptr<CollectiveMatmul> cm(new CollectiveMatmul());
  cm->comm_ = std::move(comm);
  cm->device_ = device;
  const int n = cm->comm_->size(), rank = cm->comm_->rank();
  if (n > 1) {
    // Edge r -> r+1 has colour r % 2; in an odd ring the closing edge n-1 -> 0 needs a third.
    const int colours = n % 2 == 0 ? 2 : 3;
    for (int c = 0; c < colours; ++c) {  // collective: every rank makes the same duplicates
      auto dup = cm->comm_->split(0, rank);
      if (!dup.ok()) return dup.status().with_context("CollectiveMatmul: ring communicator");
      cm->edges_.push_back(std::move(dup.value()));
    }
    auto colour = [n](int r) { return n % 2 == 1 && r == n - 1 ? 2 : r % 2; };
    cm->send_comm_ = cm->edges_[size_t(colour(rank))].get();
    cm->recv_comm_ = cm->edges_[size_t(colour((rank + n - 1) % n))].get();
  }
  TSR_ASSIGN_OR_RETURN(cm->send_stream_, device.create_stream(-1));
  TSR_ASSIGN_OR_RETURN(cm->recv_stream_, device.create_stream(-1));
  TSR_ASSIGN_OR_RETURN(cm->inputs_, device.create_event(false));
  TSR_ASSIGN_OR_RETURN(cm->done_, device.create_event(false));
  return cm;
}

CollectiveMatmul::~CollectiveMatmul() {
  for (hal::Stream* s : {&send_stream_, &recv_stream_}) {
    if (s->handle() == nullptr) continue;
    if (Status st = s->synchronize(); !st.ok()) {
      TSR_LOG(kWarn, "overlap") << "CollectiveMatmul teardown: " << st.to_string();
    }
  }
}

Status CollectiveMatmul::check_buffers(const char* operation,
                                       std::initializer_list<BufferArg> buffers) const {
  for (const BufferArg& b : buffers) {
    TSR_RETURN_IF_ERROR(check_device_range(
        *device_, b.ptr, b.bytes,
        std::string(operation) + ": " + b.name + " (rank " + std::to_string(comm_->rank()) + ")"));
  }
  return Status();
}

Status CollectiveMatmul::ensure_events(std::vector<hal::Event>& events, size_t count) {
  while (events.size() < count) {
    TSR_ASSIGN_OR_RETURN(hal::Event e, device_->create_event(false));
    events.push_back(std::move(e));
  }
  return Status();
}

Status CollectiveMatmul::allgather_matmul(const float* x_shard, int64_t m_shard, int64_t k,
                                          const float* w, int64_t n, float* x_full, float* y,
                                          const hal::Stream& compute, bool w_transposed) {
  if (m_shard <= 0 || k <= 0 || n <= 0) {
    return invalid_argument("allgather_matmul: m_shard, k and n must be positive");
  }
  if (!x_shard || !w || !x_full || !y) return invalid_argument("allgather_matmul: null buffer");
  const int ranks = comm_->size(), rank = comm_->rank();
  const size_t f = sizeof(float);
  TSR_RETURN_IF_ERROR(
      check_buffers("allgather_matmul", {{x_shard, size_t(m_shard * k) * f, "x_shard"},
                                         {w, size_t(k * n) * f, "w"},
                                         {x_full, size_t(m_shard * ranks * k) * f, "x_full"},
                                         {y, size_t(m_shard * ranks * n) * f, "y"}}));
  const size_t chunk = size_t(m_shard * k);
  const size_t out_chunk = size_t(m_shard * n);
  const int next = (rank + 1) % ranks, prev = (rank + ranks - 1) % ranks;
  TSR_RETURN_IF_ERROR(ensure_events(arrived_, size_t(ranks)));
  works_.clear();
  // The sends start once x_shard is written; this rank's block goes into the gathered X (as the
  // all-gather would put it) and is multiplied before anything moved.
  TSR_RETURN_IF_ERROR(inputs_.record(compute));
  TSR_RETURN_IF_ERROR(send_stream_.wait(inputs_));
  // Receives overwrite x_full: after the compute work before this call (an earlier call's GEMMs).
  TSR_RETURN_IF_ERROR(recv_stream_.wait(inputs_));
  TSR_RETURN_IF_ERROR(compute.copy(x_full + size_t(rank) * chunk, x_shard, chunk * sizeof(float)));
  TSR_RETURN_IF_ERROR(compute.gemm(
      row_major_gemm(x_shard, m_shard, k, k, w, n, y + size_t(rank) * out_chunk, n, w_transposed)));
  for (int s = 0; s + 1 < ranks; ++s) {
    const int give = (rank - s + ranks) % ranks;      // own block, then the one received last
    const int take = (rank - s - 1 + ranks) % ranks;  // arrives from the previous rank
    const float* src = s == 0 ? x_shard : x_full + size_t(give) * chunk;
    if (s > 0) TSR_RETURN_IF_ERROR(send_stream_.wait(arrived_[size_t(s - 1)]));
    TSR_ASSIGN_OR_RETURN(coll::Work sent,
                         send_comm_->send(src, chunk, hal::DType::kF32, next, send_stream_));
    works_.push_back(std::move(sent));
    float* slot = x_full + size_t(take) * chunk;
    TSR_ASSIGN_OR_RETURN(coll::Work got,
                         recv_comm_->recv(slot, chunk, hal::DType::kF32, prev, recv_stream_));
    works_.push_back(std::move(got));
    TSR_RETURN_IF_ERROR(arrived_[size_t(s)].record(recv_stream_));
    // This block's GEMM runs while the next block moves.
    TSR_RETURN_IF_ERROR(compute.wait(arrived_[size_t(s)]));
    TSR_RETURN_IF_ERROR(compute.gemm(
        row_major_gemm(slot, m_shard, k, k, w, n, y + size_t(take) * out_chunk, n, w_transposed)));
  }
  // The last send still reads x_full: the caller may reuse it once compute is done.
  TSR_RETURN_IF_ERROR(done_.record(send_stream_));
  return compute.wait(done_);
}

Status CollectiveMatmul::matmul_reduce_scatter(const float* x_local, int64_t m, int64_t k_local,
                                               const float* w_local, int64_t n, float* y_shard,
                                               const hal::Stream& compute, bool w_transposed) {
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
  const size_t f = sizeof(float);
  TSR_RETURN_IF_ERROR(
      check_buffers("matmul_reduce_scatter", {{x_local, size_t(m * k_local) * f, "x_local"},
                                              {w_local, size_t(k_local * n) * f, "w_local"},
                                              {y_shard, size_t(rows * n) * f, "y_shard"}}));
  const size_t chunk = size_t(rows * n);
  const int next = (rank + 1) % ranks, prev = (rank + ranks - 1) % ranks;
  if (ranks == 1)
    return compute.gemm(
        row_major_gemm(x_local, rows, k_local, k_local, w_local, n, y_shard, n, w_transposed));
  // Partial products (ranks chunks) and the sums received (ranks - 1 chunks).
  const size_t bytes = (2 * size_t(ranks) - 1) * chunk * sizeof(float);
  if (workspace_.size() < bytes) {
    TSR_RETURN_IF_ERROR(send_stream_.synchronize());  // the old workspace may still be read
    TSR_RETURN_IF_ERROR(recv_stream_.synchronize());
    TSR_ASSIGN_OR_RETURN(workspace_, device_->allocate(bytes));
  }
  float* partial = static_cast<float*>(workspace_.data());
  float* received = partial + size_t(ranks) * chunk;
  TSR_RETURN_IF_ERROR(ensure_events(arrived_, size_t(ranks)));
  TSR_RETURN_IF_ERROR(ensure_events(computed_, size_t(ranks)));
  works_.clear();
  // Receives overwrite the workspace: after an earlier call's adds (compute waited for them).
  TSR_RETURN_IF_ERROR(inputs_.record(compute));
  TSR_RETURN_IF_ERROR(recv_stream_.wait(inputs_));
  for (int s = 0; s < ranks; ++s) {
    // Block d's running sum starts on rank d+1 and ends, after ranks-1 hops, on rank d.
    const int d = (rank - s - 1 + ranks) % ranks;
    float* mine = partial + size_t(d) * chunk;
    TSR_RETURN_IF_ERROR(
        compute.gemm(row_major_gemm(x_local + size_t(d * rows * k_local), rows, k_local, k_local,
                                    w_local, n, mine, n, w_transposed)));
    TSR_RETURN_IF_ERROR(computed_[size_t(s)].record(compute));
    TSR_RETURN_IF_ERROR(send_stream_.wait(computed_[size_t(s)]));
    if (s > 0) {
      float* in = received + size_t(s - 1) * chunk;
      TSR_ASSIGN_OR_RETURN(coll::Work got,
                           recv_comm_->recv(in, chunk, hal::DType::kF32, prev, recv_stream_));
      works_.push_back(std::move(got));
      TSR_RETURN_IF_ERROR(arrived_[size_t(s)].record(recv_stream_));
      TSR_RETURN_IF_ERROR(send_stream_.wait(arrived_[size_t(s)]));
      const void* const sources[] = {mine, in};
      float* out = s + 1 == ranks ? y_shard : mine;
      TSR_RETURN_IF_ERROR(
          send_stream_.reduce(out, sources, chunk, hal::DType::kF32, hal::ReduceOp::kSum));
    }
    if (s + 1 < ranks) {
      TSR_ASSIGN_OR_RETURN(coll::Work sent,
                           send_comm_->send(mine, chunk, hal::DType::kF32, next, send_stream_));
      works_.push_back(std::move(sent));
    }
  }
  TSR_RETURN_IF_ERROR(done_.record(send_stream_));
  return compute.wait(done_);
}

Status CollectiveMatmul::wait(std::chrono::milliseconds timeout) {
  for (auto& work : works_) {
    if (Status s = work.wait(timeout); !s.ok()) return s.with_context("collective matmul");
  }
  TSR_RETURN_IF_ERROR(send_stream_.synchronize());
  return recv_stream_.synchronize();
}

}  // namespace tessera::overlap
