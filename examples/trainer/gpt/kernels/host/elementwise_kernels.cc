// Elementwise host kernels (add, bias, GeLU, SwiGLU) and the optimizer's (sum_squares, AdamW).
// Semantics: examples/trainer/gpt/kernels.h.
#include <vector>

#include "host_kernels.h"
#include "kernel_support.h"

namespace tessera::gpt::host {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

const char* add(const void* a, const void* b, void* out, uint64_t n, uint32_t dtype) {
  return with_dtype("tsr_gpt_add", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    grid_stride(n, [&](uint64_t i) { store(po + i, load(pa + i) + load(pb + i)); });
    return nullptr;
  });
}

const char* bias_add(void* y, const void* bias, uint64_t rows, uint64_t cols, uint32_t dtype) {
  return with_dtype("tsr_gpt_bias_add", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    T* py = static_cast<T*>(y);
    const T* pb = static_cast<const T*>(bias);
    if (single_lane()) {
      for (uint64_t r = 0; r < rows; ++r) {
        T* row = py + r * cols;
        for (uint64_t c = 0; c < cols; ++c) store(row + c, load(row + c) + load(pb + c));
      }
      return nullptr;
    }
    grid_stride(rows * cols,
                [&](uint64_t i) { store(py + i, load(py + i) + load(pb + i % cols)); });
    return nullptr;
  });
}

const char* bias_grad(const void* dy, float* dbias, uint64_t rows, uint64_t cols, uint32_t dtype) {
  return with_dtype("tsr_gpt_bias_grad", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy);
    if (single_lane()) {  // rows outer for the cache; each column still sums r = 0, 1, ...
      std::vector<float> sum(cols, 0.0f);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < cols; ++c) sum[c] += load(pdy + r * cols + c);
      }
      for (uint64_t c = 0; c < cols; ++c) dbias[c] += sum[c];
      return nullptr;
    }
    grid_stride(cols, [&](uint64_t c) {
      float sum = 0.0f;
      for (uint64_t r = 0; r < rows; ++r) sum += load(pdy + r * cols + c);
      dbias[c] += sum;
    });
    return nullptr;
  });
}

const char* gelu_forward(const void* x, void* y, uint64_t n, uint32_t dtype) {
  return with_dtype("tsr_gpt_gelu_forward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    grid_stride(n, [&](uint64_t i) {
      const float v = load(px + i);
      const float t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      store(py + i, 0.5f * v * (1.0f + t));
    });
    return nullptr;
  });
}

const char* gelu_backward(const void* x, const void* dy, void* dx, uint64_t n, uint32_t dtype) {
  return with_dtype("tsr_gpt_gelu_backward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    grid_stride(n, [&](uint64_t i) {
      const float v = load(px + i);
      const float t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      const float dt = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dt;
      store(pdx + i, load(pdy + i) * grad);
    });
    return nullptr;
  });
}

const char* swiglu_forward(const void* gate, const void* up, void* y, uint64_t n, uint32_t dtype) {
  return with_dtype("tsr_gpt_swiglu_forward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gate);
    const T* pu = static_cast<const T*>(up);
    T* py = static_cast<T*>(y);
    grid_stride(n, [&](uint64_t i) {
      const float g = load(pg + i);
      store(py + i, g * sigmoid(g) * load(pu + i));
    });
    return nullptr;
  });
}

const char* swiglu_backward(const void* gate, const void* up, const void* dy, void* dgate,
                            void* dup, uint64_t n, uint32_t dtype) {
  return with_dtype("tsr_gpt_swiglu_backward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gate);
    const T* pu = static_cast<const T*>(up);
    const T* pdy = static_cast<const T*>(dy);
    T* pdg = static_cast<T*>(dgate);
    T* pdu = static_cast<T*>(dup);
    grid_stride(n, [&](uint64_t i) {
      const float g = load(pg + i);
      const float s = sigmoid(g);
      const float d = load(pdy + i);
      store(pdg + i, d * load(pu + i) * (s * (1.0f + g * (1.0f - s))));
      store(pdu + i, d * g * s);
    });
    return nullptr;
  });
}

// One value under any geometry: block 0's thread 0 sums everything (eight interleaved partial
// sums in a fixed order), the other blocks do nothing.
const char* sum_squares(const float* x, float* sum_sq, uint64_t n) {
  if (lanes().first != 0) return nullptr;
  sum_sq[0] = dot(x, x, n);
  return nullptr;
}

const char* adamw(float* param, const float* grad, float* m, float* v, void* copy, uint64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale, uint32_t copy_dtype) {
  auto step = [&](auto* out) {
    grid_stride(n, [&](uint64_t i) {
      const float g = grad[i] * grad_scale;
      const float mi = beta1 * m[i] + (1.0f - beta1) * g;
      const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      const float p = param[i];
      const float updated =
          p - lr * (mi / bias1 / (std::sqrt(vi / bias2) + eps) + weight_decay * p);
      param[i] = updated;
      if (out != nullptr) store(out + i, updated);
    });
    return nullptr;
  };
  if (copy == nullptr) return step(static_cast<float*>(nullptr));
  return with_dtype("tsr_gpt_adamw", "copy_dtype", copy_dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    return step(static_cast<T*>(copy));
  });
}

}  // namespace tessera::gpt::host
