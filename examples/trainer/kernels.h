// The trainer's arithmetic. GEMMs go through the HAL (tsr_gemm_desc on a stream, column-major);
// the elementwise parts run on the host, which can address the host backend's device memory.
// Every loop has a fixed order, so results are bit-reproducible on one machine.
// Not thread-safe per Gemm object (one stream, one caller).
#pragma once

#include <cstdint>

#include "tessera/common/status.h"
#include "tessera/hal/stream.h"

namespace tessera::trainer {

// C (m x n) = alpha * op(A) * op(B) + beta * C, all f32 column-major; waits for the result.
class Gemm {
 public:
  explicit Gemm(const hal::Stream& stream) : stream_(stream) {}
  Status run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) const;
  // GEMMs issued (for the step report).
  mutable int64_t calls = 0;

 private:
  const hal::Stream& stream_;
};

// y[r + rows * j] += bias[r]
void add_bias(float* y, const float* bias, int64_t rows, int64_t n);
// db[r] += sum_j dy[r + rows * j], j in order
void accumulate_bias_grad(float* db, const float* dy, int64_t rows, int64_t n);
// GeLU (tanh form) and its backward: dx = dy * gelu'(x)
void gelu_forward(const float* x, float* y, int64_t count);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t count);
// y += x
void add_inplace(float* y, const float* x, int64_t count);
// Softmax cross-entropy of (classes x n) logits: writes dlogits = (softmax - onehot) * scale and
// returns the summed loss (not scaled). `dlogits` may be `logits`.
double softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t classes, int64_t n,
                             float scale, float* dlogits);

struct AdamConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};
// One Adam step (bias-corrected, step t >= 1) on `count` elements.
void adam_update(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamConfig& config, int64_t t);

}  // namespace tessera::trainer
