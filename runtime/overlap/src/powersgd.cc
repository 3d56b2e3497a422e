// PowerSGD (Vogels et al., 2019) for one bucket, viewed as a rows x cols matrix M (row-major,
// zero-padded): M += error; P = M Q; P = mean(P); orthonormalise P; Q = M^T P; Q = mean(Q);
// approximation = P Q^T; error = M - approximation. Q is kept (warm start) and starts as the
// same pseudo-random matrix on every rank. Two allreduces of (rows + cols) * r floats replace one
// of rows * cols. The three products run as HAL GEMMs on the communication stream; the
// orthonormalisation and the error update are host steps. Both are deterministic and see
// identical P and Q on every rank, so every rank ends with the same bits.
#include <algorithm>
#include <cmath>
#include <random>

#include "codec.h"
#include "tessera/hal/gemm_desc.h"

namespace tessera::overlap {
namespace {

struct Shape {
  size_t rows, cols, rank;
};

Shape shape_for(size_t count, int rank) {
  const size_t cols = std::max<size_t>(1, size_t(std::ceil(std::sqrt(double(count)))));
  const size_t rows = (count + cols - 1) / cols;
  return {rows, cols, std::min({size_t(std::max(rank, 1)), rows, cols})};
}

// Column-major GEMM descriptor C (m x n) = op(A) (m x k) op(B) (k x n), f32.
tsr_gemm_desc gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, int trans_a,
                   const float* b, int64_t ldb, int trans_b, float* c, int64_t ldc) {
  return hal::f32_gemm_desc(trans_a != 0, trans_b != 0, m, n, k, a, lda, b, ldb, c, ldc);
}

class PowerSgdCodec final : public Codec {
 public:
  PowerSgdCodec(const CodecOptions& options, size_t count, int world, int bucket)
      : count_(count),
        shape_(shape_for(count, options.powersgd_rank)),
        world_(world),
        error_feedback_(options.error_feedback),
        m_(shape_.rows * shape_.cols, 0.0f),
        error_(error_feedback_ ? count : 0, 0.0f),
        p_(shape_.rows * shape_.rank),
        q_(shape_.cols * shape_.rank),
        approx_(shape_.rows * shape_.cols) {
    std::mt19937_64 rng(options.seed * 1000003u + uint64_t(bucket));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : q_) x = normal(rng);
  }

  std::string_view name() const override { return "powersgd"; }
  size_t wire_bytes() const override { return (p_.size() + q_.size()) * sizeof(float); }
  size_t wire_message_bytes() const override { return p_.size() * sizeof(float); }

  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    // Row-major matrices read as column-major ones are their transposes: M is M^T (cols x rows,
    // ld cols), P is P^T (r x rows, ld r), Q is Q^T (r x cols, ld r).
    const int64_t rows = int64_t(shape_.rows), cols = int64_t(shape_.cols);
    const int64_t r = int64_t(shape_.rank);
    float* g = static_cast<float*>(data);
    TSR_RETURN_IF_ERROR(ctx.host([this, g] { load_matrix(g); }));
    // P = M Q  <=>  P^T (r x rows) = Q^T (r x cols) M^T (cols x rows).
    TSR_RETURN_IF_ERROR(
        ctx.stream.gemm(gemm(r, rows, cols, q_.data(), r, 0, m_.data(), cols, 0, p_.data(), r)));
    coll::Communicator& comm = ctx.comm;
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&comm, this] {
          return comm.allreduce(p_.data(), p_.data(), p_.size(), DType::kF32, hal::ReduceOp::kAvg);
        },
        &times.encoded, nullptr));
    TSR_RETURN_IF_ERROR(ctx.host([this] { orthonormalise_p(); }));
    // Q = M^T P  <=>  Q^T (r x cols) = P^T (r x rows) M (rows x cols), M = (M^T)^T.
    TSR_RETURN_IF_ERROR(
        ctx.stream.gemm(gemm(r, cols, rows, p_.data(), r, 0, m_.data(), cols, 1, q_.data(), r)));
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&comm, this] {
          return comm.allreduce(q_.data(), q_.data(), q_.size(), DType::kF32, hal::ReduceOp::kAvg);
        },
        nullptr, &times.communicated));
    // approx = P Q^T  <=>  approx^T (cols x rows) = Q (cols x r) P^T (r x rows), Q = (Q^T)^T.
    TSR_RETURN_IF_ERROR(ctx.stream.gemm(
        gemm(cols, rows, r, q_.data(), r, 1, p_.data(), r, 0, approx_.data(), cols)));
    const float scale = ctx.reduction == Reduction::kSum ? float(world_) : 1.0f;
    return ctx.host([this, g, scale] { reconstruct(g, scale); });
  }

  void save(ByteWriter& out) const override {
    out.u64(error_.size());
    out.floats(error_);
    out.u64(q_.size());
    out.floats(q_);
  }
  Status load(ByteReader& in, const std::string& where) override {
    uint64_t n = 0;
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " error size"));
    if (n != error_.size()) {
      return invalid_argument(where + ": error of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(error_.size()));
    }
    TSR_RETURN_IF_ERROR(in.floats(error_, where + " error"));
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " Q size"));
    if (n != q_.size()) {
      return invalid_argument(where + ": Q of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(q_.size()));
    }
    return in.floats(q_, where + " Q");
  }

 private:
  void load_matrix(const float* g) {
    for (size_t i = 0; i < count_; ++i) m_[i] = g[i] + (error_feedback_ ? error_[i] : 0.0f);
  }
  // Modified Gram-Schmidt on the columns of P; a vanishing column becomes zero.
  void orthonormalise_p() {
    const size_t r = shape_.rank;
    for (size_t j = 0; j < r; ++j) {
      for (size_t prev = 0; prev < j; ++prev) {
        double dot = 0;
        for (size_t i = 0; i < shape_.rows; ++i) dot += double(p_[i * r + j]) * p_[i * r + prev];
        for (size_t i = 0; i < shape_.rows; ++i) p_[i * r + j] -= float(dot) * p_[i * r + prev];
      }
      double norm = 0;
      for (size_t i = 0; i < shape_.rows; ++i) norm += double(p_[i * r + j]) * p_[i * r + j];
      norm = std::sqrt(norm);
      const float inv = norm > 1e-30 ? float(1.0 / norm) : 0.0f;
      for (size_t i = 0; i < shape_.rows; ++i) p_[i * r + j] *= inv;
    }
  }
  // g = scale * P Q^T (the ranks' mean of M, approximately); error = M - P Q^T.
  void reconstruct(float* g, float scale) {
    for (size_t i = 0; i < count_; ++i) {
      if (error_feedback_) error_[i] = m_[i] - approx_[i];
      g[i] = approx_[i] * scale;
    }
  }

  size_t count_;
  Shape shape_;
  int world_;
  bool error_feedback_;
  std::vector<float> m_;
  std::vector<float> error_;
  std::vector<float> p_;
  std::vector<float> q_;
  std::vector<float> approx_;
};

}  // namespace

bool powersgd_compresses(size_t count, int rank) {
  const Shape s = shape_for(count, rank);
  return (s.rows + s.cols) * s.rank < count;
}

std::unique_ptr<Codec> make_powersgd_codec(const CodecOptions& options, size_t count, int world,
                                           int bucket) {
  return std::make_unique<PowerSgdCodec>(options, count, world, bucket);
}

}  // namespace tessera::overlap
