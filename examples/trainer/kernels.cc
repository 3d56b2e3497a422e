#include "kernels.h"

#include <algorithm>
#include <cmath>

#include "tessera/hal/gemm_desc.h"

namespace tessera::trainer {

Status Gemm::run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) const {
  const tsr_gemm_desc d =
      hal::f32_gemm_desc(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
  ++calls;
  TSR_RETURN_IF_ERROR(stream_.gemm(d));
  return stream_.synchronize();
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < rows; ++r) y[r + rows * j] += bias[r];
  }
}

void accumulate_bias_grad(float* db, const float* dy, int64_t rows, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < rows; ++r) db[r] += dy[r + rows * j];
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;
}  // namespace

void gelu_forward(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluC * v * v * v)));
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kGeluC * v * v * v);
    const float t = std::tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void add_inplace(float* y, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

double softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t classes, int64_t n,
                             float scale, float* dlogits) {
  double loss = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float* z = logits + classes * j;
    float* dz = dlogits + classes * j;
    float top = z[0];
    for (int64_t c = 1; c < classes; ++c) top = std::max(top, z[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(z[c] - top));
    const double log_sum = std::log(sum);
    loss += log_sum - double(z[labels[j]] - top);  // before dz overwrites z (may alias)
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(double(z[c] - top) - log_sum);
      dz[c] = float(p) * scale;
    }
    dz[labels[j]] -= scale;
  }
  return loss;
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamConfig& c, int64_t t) {
  const float bc1 = 1.0f - float(std::pow(double(c.beta1), double(t)));
  const float bc2 = 1.0f - float(std::pow(double(c.beta2), double(t)));
  for (int64_t i = 0; i < count; ++i) {
    const float g = grad[i];
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] -= c.lr * mhat / (std::sqrt(vhat) + c.eps);
  }
}

}  // namespace tessera::trainer
