// PowerSGD (Vogels et al., 2019) for one bucket, viewed as a rows x cols matrix M (row-major,
// zero-padded): M += error; P = M Q; P = mean(P); orthonormalise P; Q = M^T P; Q = mean(Q);
// approximation = P Q^T; error = M - approximation. Q is kept (warm start) and starts as the
// same pseudo-random matrix on every rank. Two allreduces of (rows + cols) * r floats replace one
// of rows * cols. Everything lives in device memory and runs as the backend's stream operations
// (reduce for M = g + error, GEMMs for the three products and for error = M - P Q^T), except
// the orthonormalisation of the small P (rows x r), which is a host step on a pinned copy. Both
// are deterministic and see identical P and Q on every rank, so every rank ends with the same
// bits.
#include <algorithm>

#include "codec.h"
#include "device_memory.h"
#include "tessera/hal/gemm_desc.h"
#include "tessera/overlap/codec_host.h"

namespace tessera::overlap {
namespace {

using Shape = PowerSgdShape;

// Column-major GEMM descriptor C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C, f32.
tsr_gemm_desc gemm(int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, int trans_a,
                   const void* b, int64_t ldb, int trans_b, void* c, int64_t ldc,
                   double alpha = 1.0, double beta = 0.0) {
  tsr_gemm_desc d =
      hal::f32_gemm_desc(trans_a != 0, trans_b != 0, m, n, k, static_cast<const float*>(a), lda,
                         static_cast<const float*>(b), ldb, static_cast<float*>(c), ldc, beta);
  d.alpha = alpha;
  return d;
}

struct Buffers {
  hal::DeviceBuffer m;       // device: rows x cols (the padding stays 0)
  hal::DeviceBuffer error;   // device: rows x cols (error feedback; the first `count` matter)
  hal::DeviceBuffer p;       // device: rows x r
  hal::DeviceBuffer q;       // device: cols x r
  hal::DeviceBuffer approx;  // device: rows x cols
  hal::HostBuffer staged;    // pinned: max(rows, cols) x r (P for the orthonormalisation)
};

class PowerSgdCodec final : public Codec {
 public:
  PowerSgdCodec(const CodecOptions& options, size_t count, int world, Shape shape, Buffers buffers)
      : count_(count),
        shape_(shape),
        world_(world),
        error_feedback_(options.error_feedback),
        buf_(std::move(buffers)) {}

  std::string_view name() const override { return "powersgd"; }
  size_t wire_bytes() const override {
    return (shape_.rows + shape_.cols) * shape_.rank * sizeof(float);
  }
  size_t wire_message_bytes() const override { return shape_.rows * shape_.rank * sizeof(float); }

  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    // Row-major matrices read as column-major ones are their transposes: M is M^T (cols x rows,
    // ld cols), P is P^T (r x rows, ld r), Q is Q^T (r x cols, ld r).
    const int64_t rows = int64_t(shape_.rows), cols = int64_t(shape_.cols);
    const int64_t r = int64_t(shape_.rank);
    const hal::Stream& stream = ctx.stream;
    void* m = buf_.m.data();
    void* p = buf_.p.data();
    void* q = buf_.q.data();
    // M = g + error (the first `count` elements; the padding stays 0).
    if (error_feedback_) {
      const void* const sources[] = {data, buf_.error.data()};
      TSR_RETURN_IF_ERROR(stream.reduce(m, sources, count_, DType::kF32, hal::ReduceOp::kSum));
    } else {
      TSR_RETURN_IF_ERROR(stream.copy(m, data, count_ * sizeof(float)));
    }
    // P = M Q  <=>  P^T (r x rows) = Q^T (r x cols) M^T (cols x rows).
    TSR_RETURN_IF_ERROR(stream.gemm(gemm(r, rows, cols, q, r, 0, m, cols, 0, p, r)));
    TSR_RETURN_IF_ERROR(ctx.host([&times] { times.encoded = Clock::now(); }));
    coll::Communicator& comm = ctx.comm;
    const size_t p_count = shape_.rows * shape_.rank, q_count = shape_.cols * shape_.rank;
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&] { return comm.allreduce(p, p, p_count, DType::kF32, hal::ReduceOp::kAvg, stream); }));
    // The orthonormalisation of the small P on the host: staged out and back.
    TSR_RETURN_IF_ERROR(stream.copy(buf_.staged.data(), p, p_count * sizeof(float)));
    TSR_RETURN_IF_ERROR(ctx.host([this] { orthonormalise(); }));
    TSR_RETURN_IF_ERROR(stream.copy(p, buf_.staged.data(), p_count * sizeof(float)));
    // Q = M^T P  <=>  Q^T (r x cols) = P^T (r x rows) M (rows x cols), M = (M^T)^T.
    TSR_RETURN_IF_ERROR(stream.gemm(gemm(r, cols, rows, p, r, 0, m, cols, 1, q, r)));
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&] { return comm.allreduce(q, q, q_count, DType::kF32, hal::ReduceOp::kAvg, stream); }));
    TSR_RETURN_IF_ERROR(ctx.host([&times] { times.communicated = Clock::now(); }));
    // g = scale P Q^T  <=>  approx^T (cols x rows) = scale Q (cols x r) P^T (r x rows).
    const double scale = ctx.reduction == Reduction::kSum ? double(world_) : 1.0;
    void* approx = buf_.approx.data();
    TSR_RETURN_IF_ERROR(stream.gemm(gemm(cols, rows, r, q, r, 1, p, r, 0, approx, cols, scale)));
    TSR_RETURN_IF_ERROR(stream.copy(data, approx, count_ * sizeof(float)));
    if (!error_feedback_) return Status();
    // error = M - P Q^T: M copied into error, then error += -1 (P Q^T).
    void* error = buf_.error.data();
    TSR_RETURN_IF_ERROR(stream.copy(error, m, shape_.rows * shape_.cols * sizeof(float)));
    return stream.gemm(gemm(cols, rows, r, q, r, 1, p, r, 0, error, cols, -1.0, 1.0));
  }

  Status save(const hal::Stream& stream, ByteWriter& out) const override {
    std::vector<float> host;
    if (error_feedback_) TSR_RETURN_IF_ERROR(download(stream, buf_.error.data(), count_, host));
    out.u64(host.size());
    out.floats(host);
    TSR_RETURN_IF_ERROR(download(stream, buf_.q.data(), q_count(), host));
    out.u64(host.size());
    out.floats(host);
    return Status();
  }
  Status load(const hal::Stream& stream, ByteReader& in, const std::string& where) override {
    const size_t error_count = error_feedback_ ? count_ : 0;
    uint64_t n = 0;
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " error size"));
    if (n != error_count) {
      return invalid_argument(where + ": error of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(error_count));
    }
    std::vector<float> error(error_count), q(q_count());
    TSR_RETURN_IF_ERROR(in.floats(error, where + " error"));
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " Q size"));
    if (n != q.size()) {
      return invalid_argument(where + ": Q of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(q.size()));
    }
    TSR_RETURN_IF_ERROR(in.floats(q, where + " Q"));
    if (error_feedback_) TSR_RETURN_IF_ERROR(upload(stream, buf_.error.data(), error));
    return upload(stream, buf_.q.data(), q);
  }

 private:
  size_t q_count() const { return shape_.cols * shape_.rank; }

  // Modified Gram-Schmidt on the columns of the staged P; a vanishing column becomes zero.
  void orthonormalise() {
    powersgd_orthonormalise(static_cast<float*>(buf_.staged.data()), shape_.rows, shape_.rank);
  }

  size_t count_;
  Shape shape_;
  int world_;
  bool error_feedback_;
  Buffers buf_;
};

}  // namespace

Result<std::unique_ptr<Codec>> make_powersgd_codec(const CodecOptions& options, size_t count,
                                                   int world, int bucket, const CodecSetup& setup) {
  const Shape shape = powersgd_shape(count, options.powersgd_rank);
  const size_t matrix = shape.rows * shape.cols * sizeof(float);
  const hal::Device& device = setup.device;
  const hal::Stream& stream = setup.stream;
  Buffers b;
  TSR_ASSIGN_OR_RETURN(b.m, device.allocate(matrix));
  TSR_RETURN_IF_ERROR(stream.memset(b.m.data(), 0, matrix));
  if (options.error_feedback) {
    TSR_ASSIGN_OR_RETURN(b.error, device.allocate(matrix));
    TSR_RETURN_IF_ERROR(stream.memset(b.error.data(), 0, matrix));
  }
  TSR_ASSIGN_OR_RETURN(b.p, device.allocate(shape.rows * shape.rank * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(b.q, device.allocate(shape.cols * shape.rank * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(b.approx, device.allocate(matrix));
  TSR_ASSIGN_OR_RETURN(b.staged, device.allocate_host(std::max(shape.rows, shape.cols) *
                                                      shape.rank * sizeof(float)));
  // The initial Q, the same on every rank, through the staging buffer (the engine synchronises
  // the stream before it is reused).
  float* q = static_cast<float*>(b.staged.data());
  powersgd_initial_q(options.seed, bucket, shape.cols * shape.rank, q);
  TSR_RETURN_IF_ERROR(stream.copy(b.q.data(), q, shape.cols * shape.rank * sizeof(float)));
  return std::unique_ptr<Codec>(new PowerSgdCodec(options, count, world, shape, std::move(b)));
}

}  // namespace tessera::overlap
