// Host kernels for the embeddings, LayerNorm/RMSNorm and rotary embedding.
// Semantics: examples/trainer/gpt/kernels.h.
#include <vector>

#include "host_kernels.h"
#include "kernel_support.h"

namespace tessera::gpt::host {
namespace {

constexpr uint32_t kLayerNorm = 0;
constexpr uint32_t kRmsNorm = 1;

const char* check_norm(const char* kernel, uint32_t kind, const float* mean, uint64_t cols) {
  if (kind != kLayerNorm && kind != kRmsNorm) {
    return error("%s: kind %u is neither LayerNorm (0) nor RMSNorm (1)", kernel, kind);
  }
  if (kind == kLayerNorm && mean == nullptr) return error("%s: LayerNorm needs mean", kernel);
  if (cols == 0) return error("%s: cols is 0", kernel);
  return nullptr;
}

// x-hat of one element: (x - mean) * rstd for LayerNorm, x * rstd for RMSNorm.
float normalized(float x, uint32_t kind, const float* mean, const float* rstd, uint64_t r) {
  return kind == kLayerNorm ? (x - mean[r]) * rstd[r] : x * rstd[r];
}

}  // namespace

const char* embed_forward(const int32_t* tokens, const void* wte, const void* wpe, void* out,
                          uint64_t tokens_count, uint64_t hidden, uint64_t seq, int64_t vocab_begin,
                          int64_t vocab_count, uint32_t dtype) {
  if (wpe != nullptr && seq == 0) return error("tsr_gpt_embed_forward: seq is 0");
  return with_dtype("tsr_gpt_embed_forward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pte = static_cast<const T*>(wte);
    const T* ppe = static_cast<const T*>(wpe);
    T* po = static_cast<T*>(out);
    grid_stride(tokens_count * hidden, [&](uint64_t i) {
      const uint64_t t = i / hidden, h = i % hidden;
      const int64_t row = int64_t(tokens[t]) - vocab_begin;
      float value = 0.0f;
      if (row >= 0 && row < vocab_count) value = load(pte + uint64_t(row) * hidden + h);
      if (ppe != nullptr) value += load(ppe + (t % seq) * hidden + h);
      store(po + i, value);
    });
    return nullptr;
  });
}

const char* embed_backward(const int32_t* tokens, const void* dout, float* dwte, float* dwpe,
                           uint64_t tokens_count, uint64_t hidden, uint64_t seq,
                           int64_t vocab_begin, int64_t vocab_count, uint32_t dtype) {
  if (dwpe != nullptr && seq == 0) return error("tsr_gpt_embed_backward: seq is 0");
  return with_dtype("tsr_gpt_embed_backward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pd = static_cast<const T*>(dout);
    // Adds dout[t, h] for t = 0, 1, ... into column h; `first`..`end` are the columns walked.
    auto columns = [&](uint64_t first, uint64_t end) {
      for (uint64_t t = 0; t < tokens_count; ++t) {
        const int64_t row = int64_t(tokens[t]) - vocab_begin;
        const T* d = pd + t * hidden;
        if (row >= 0 && row < vocab_count) {
          float* w = dwte + uint64_t(row) * hidden;
          for (uint64_t h = first; h < end; ++h) w[h] += load(d + h);
        }
        if (dwpe != nullptr) {
          float* w = dwpe + (t % seq) * hidden;
          for (uint64_t h = first; h < end; ++h) w[h] += load(d + h);
        }
      }
    };
    if (single_lane()) {
      columns(0, hidden);
    } else {
      grid_stride(hidden, [&](uint64_t h) { columns(h, h + 1); });
    }
    return nullptr;
  });
}

const char* norm_forward(const void* x, const void* weight, const void* bias, void* y, float* mean,
                         float* rstd, uint64_t rows, uint64_t cols, float eps, uint32_t kind,
                         uint32_t dtype) {
  if (const char* bad = check_norm("tsr_gpt_norm_forward", kind, mean, cols)) return bad;
  return with_dtype("tsr_gpt_norm_forward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pw = static_cast<const T*>(weight);
    const T* pb = kind == kLayerNorm ? static_cast<const T*>(bias) : nullptr;
    grid_stride(rows, [&](uint64_t r) {
      const T* xr = static_cast<const T*>(x) + r * cols;
      T* yr = static_cast<T*>(y) + r * cols;
      float mu = 0.0f, sum_sq = 0.0f;
      if (kind == kLayerNorm) {
        for (uint64_t c = 0; c < cols; ++c) mu += load(xr + c);
        mu /= float(cols);
        for (uint64_t c = 0; c < cols; ++c) {
          const float d = load(xr + c) - mu;
          sum_sq += d * d;
        }
      } else {
        for (uint64_t c = 0; c < cols; ++c) sum_sq += load(xr + c) * load(xr + c);
      }
      const float rs = 1.0f / std::sqrt(sum_sq / float(cols) + eps);
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
      for (uint64_t c = 0; c < cols; ++c) {
        float value = (load(xr + c) - mu) * rs * load(pw + c);
        if (pb != nullptr) value += load(pb + c);
        store(yr + c, value);
      }
    });
    return nullptr;
  });
}

const char* norm_backward_input(const void* dy, const void* x, const void* weight,
                                const float* mean, const float* rstd, void* dx, uint64_t rows,
                                uint64_t cols, uint32_t kind, uint32_t accumulate, uint32_t dtype) {
  if (const char* bad = check_norm("tsr_gpt_norm_backward_input", kind, mean, cols)) return bad;
  return with_dtype("tsr_gpt_norm_backward_input", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pw = static_cast<const T*>(weight);
    grid_stride(rows, [&](uint64_t r) {
      const T* dyr = static_cast<const T*>(dy) + r * cols;
      const T* xr = static_cast<const T*>(x) + r * cols;
      T* dxr = static_cast<T*>(dx) + r * cols;
      // With g = dy * weight: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) for LayerNorm,
      // the same without mean(g) for RMSNorm.
      float sum_g = 0.0f, sum_g_xhat = 0.0f;
      for (uint64_t c = 0; c < cols; ++c) {
        const float g = load(dyr + c) * load(pw + c);
        sum_g += g;
        sum_g_xhat += g * normalized(load(xr + c), kind, mean, rstd, r);
      }
      const float mean_g = kind == kLayerNorm ? sum_g / float(cols) : 0.0f;
      const float mean_g_xhat = sum_g_xhat / float(cols);
      for (uint64_t c = 0; c < cols; ++c) {
        const float g = load(dyr + c) * load(pw + c);
        const float xhat = normalized(load(xr + c), kind, mean, rstd, r);
        float value = rstd[r] * (g - mean_g - xhat * mean_g_xhat);
        if (accumulate != 0) value += load(dxr + c);
        store(dxr + c, value);
      }
    });
    return nullptr;
  });
}

const char* norm_backward_params(const void* dy, const void* x, const float* mean,
                                 const float* rstd, float* dweight, float* dbias, uint64_t rows,
                                 uint64_t cols, uint32_t kind, uint32_t dtype) {
  if (const char* bad = check_norm("tsr_gpt_norm_backward_params", kind, mean, cols)) return bad;
  float* db = kind == kLayerNorm ? dbias : nullptr;
  return with_dtype("tsr_gpt_norm_backward_params", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy);
    const T* px = static_cast<const T*>(x);
    if (single_lane()) {  // rows outer for the cache; each column still sums r = 0, 1, ...
      std::vector<float> sum_w(cols, 0.0f), sum_b(cols, 0.0f);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < cols; ++c) {
          const float d = load(pdy + r * cols + c);
          sum_w[c] += d * normalized(load(px + r * cols + c), kind, mean, rstd, r);
          sum_b[c] += d;
        }
      }
      for (uint64_t c = 0; c < cols; ++c) {
        dweight[c] += sum_w[c];
        if (db != nullptr) db[c] += sum_b[c];
      }
      return nullptr;
    }
    grid_stride(cols, [&](uint64_t c) {
      float sum_w = 0.0f, sum_b = 0.0f;
      for (uint64_t r = 0; r < rows; ++r) {
        const float d = load(pdy + r * cols + c);
        sum_w += d * normalized(load(px + r * cols + c), kind, mean, rstd, r);
        sum_b += d;
      }
      dweight[c] += sum_w;
      if (db != nullptr) db[c] += sum_b;
    });
    return nullptr;
  });
}

const char* rope(void* x, uint64_t rows, uint64_t heads, uint64_t head_dim, uint64_t seq,
                 float theta, int32_t direction, uint32_t dtype) {
  if (head_dim % 2 != 0) return error("tsr_gpt_rope: head_dim %lu is odd", (unsigned long)head_dim);
  if (seq == 0) return error("tsr_gpt_rope: seq is 0");
  if (direction != 1 && direction != -1) {
    return error("tsr_gpt_rope: direction %d is neither 1 nor -1", direction);
  }
  const uint64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (uint64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(theta, -2.0f * float(i) / float(head_dim));
  }
  return with_dtype("tsr_gpt_rope", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    std::vector<float> cos_row(half), sin_row(half);
    grid_stride(rows, [&](uint64_t r) {
      const float position = float(r % seq);
      for (uint64_t i = 0; i < half; ++i) {
        const float angle = position * inv_freq[i];
        cos_row[i] = std::cos(angle);
        sin_row[i] = float(direction) * std::sin(angle);
      }
      for (uint64_t h = 0; h < heads; ++h) {
        T* head = static_cast<T*>(x) + (r * heads + h) * head_dim;
        for (uint64_t i = 0; i < half; ++i) {
          const float x1 = load(head + i), x2 = load(head + i + half);
          store(head + i, x1 * cos_row[i] - x2 * sin_row[i]);
          store(head + i + half, x2 * cos_row[i] + x1 * sin_row[i]);
        }
      }
    });
    return nullptr;
  });
}

}  // namespace tessera::gpt::host
