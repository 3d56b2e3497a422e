// Host kernels for the (vocabulary-parallel) cross-entropy and the mixture of experts: router
// softmax/top-k, its backward with the load-balancing term, and the row gather/combine that move
// tokens to experts and back. Semantics: examples/trainer/gpt/kernels.h.
#include "host_kernels.h"
#include "kernel_support.h"

namespace tessera::gpt::host {

const char* xent_max(const float* logits, float* row_max, uint64_t rows, uint64_t vocab_local) {
  grid_stride(rows, [&](uint64_t r) {
    const float* row = logits + r * vocab_local;
    float m = kNegativeInfinity;
    for (uint64_t c = 0; c < vocab_local; ++c) m = row[c] > m ? row[c] : m;
    row_max[r] = m;
  });
  return nullptr;
}

const char* xent_sum_exp(const float* logits, const float* row_max, float* sum_exp, uint64_t rows,
                         uint64_t vocab_local) {
  grid_stride(rows, [&](uint64_t r) {
    const float* row = logits + r * vocab_local;
    float sum = 0.0f;
    for (uint64_t c = 0; c < vocab_local; ++c) sum += std::exp(row[c] - row_max[r]);
    sum_exp[r] = sum;
  });
  return nullptr;
}

const char* xent_target(const float* logits, const int32_t* targets, float* target_logit,
                        uint64_t rows, int64_t vocab_begin, uint64_t vocab_local) {
  grid_stride(rows, [&](uint64_t r) {
    const int64_t c = int64_t(targets[r]) - vocab_begin;
    target_logit[r] = c >= 0 && c < int64_t(vocab_local) ? logits[r * vocab_local + c] : 0.0f;
  });
  return nullptr;
}

const char* xent_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                      float* loss, uint64_t rows) {
  grid_stride(rows,
              [&](uint64_t r) { loss[r] = std::log(sum_exp[r]) + row_max[r] - target_logit[r]; });
  return nullptr;
}

const char* xent_backward(const float* logits, const int32_t* targets, const float* row_max,
                          const float* sum_exp, void* dlogits, uint64_t rows, int64_t vocab_begin,
                          uint64_t vocab_local, float scale, uint32_t dtype) {
  return with_dtype("tsr_gpt_xent_backward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    grid_stride(rows, [&](uint64_t r) {
      const float* row = logits + r * vocab_local;
      T* out = static_cast<T*>(dlogits) + r * vocab_local;
      const float inv_sum = 1.0f / sum_exp[r];
      for (uint64_t c = 0; c < vocab_local; ++c) {
        store(out + c, scale * (std::exp(row[c] - row_max[r]) * inv_sum));
      }
      const int64_t target = int64_t(targets[r]) - vocab_begin;
      if (target >= 0 && target < int64_t(vocab_local)) {
        store(out + target, scale * (std::exp(row[target] - row_max[r]) * inv_sum - 1.0f));
      }
    });
    return nullptr;
  });
}

const char* router_forward(const float* logits, float* probs, int32_t* top_index, float* top_weight,
                           uint64_t tokens, uint64_t experts, uint64_t top_k, uint32_t normalize) {
  if (top_k > experts || experts == 0) {
    return error("tsr_gpt_router_forward: top_k %lu is not within experts %lu",
                 (unsigned long)top_k, (unsigned long)experts);
  }
  grid_stride(tokens, [&](uint64_t t) {
    const float* z = logits + t * experts;
    float* p = probs + t * experts;
    float m = kNegativeInfinity, sum = 0.0f;
    for (uint64_t e = 0; e < experts; ++e) m = z[e] > m ? z[e] : m;
    for (uint64_t e = 0; e < experts; ++e) sum += (p[e] = std::exp(z[e] - m));
    for (uint64_t e = 0; e < experts; ++e) p[e] /= sum;
    // Repeated arg-max over the experts not yet taken; strict '>' keeps the lower expert on ties.
    int32_t* index = top_index + t * top_k;
    float* weight = top_weight + t * top_k;
    float chosen_sum = 0.0f;
    for (uint64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      for (uint64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (uint64_t i = 0; i < j; ++i) taken = taken || index[i] == int32_t(e);
        if (!taken && (best < 0 || p[e] > p[best])) best = int64_t(e);
      }
      index[j] = int32_t(best);
      weight[j] = p[best];
      chosen_sum += p[best];
    }
    if (normalize != 0) {
      for (uint64_t j = 0; j < top_k; ++j) weight[j] /= chosen_sum;
    }
  });
  return nullptr;
}

const char* router_backward(const float* probs, const int32_t* top_index, const float* dtop_weight,
                            const float* fraction, float* dlogits, uint64_t tokens,
                            uint64_t experts, uint64_t top_k, uint32_t normalize, float aux_coef) {
  if (top_k > experts) {
    return error("tsr_gpt_router_backward: top_k %lu exceeds experts %lu", (unsigned long)top_k,
                 (unsigned long)experts);
  }
  const float aux_scale = tokens == 0 ? 0.0f : aux_coef * float(experts) / float(tokens);
  bool bad_index = false;
  grid_stride(tokens, [&](uint64_t t) {
    const float* p = probs + t * experts;
    const int32_t* index = top_index + t * top_k;
    const float* dw = dtop_weight + t * top_k;
    float* dp = dlogits + t * experts;  // d loss / d probs first, then through the softmax
    for (uint64_t e = 0; e < experts; ++e) {
      dp[e] = fraction != nullptr ? aux_scale * fraction[e] : 0.0f;
    }
    for (uint64_t j = 0; j < top_k; ++j) {
      if (index[j] < 0 || uint64_t(index[j]) >= experts) bad_index = true;
    }
    if (bad_index) return;
    if (normalize != 0) {  // w_j = p_j / S, S = sum of the chosen p: dp_m = dw_m / S - (dw.p) / S^2
      float chosen_sum = 0.0f, dw_dot_p = 0.0f;
      for (uint64_t j = 0; j < top_k; ++j) {
        chosen_sum += p[index[j]];
        dw_dot_p += dw[j] * p[index[j]];
      }
      for (uint64_t j = 0; j < top_k; ++j) {
        dp[index[j]] += dw[j] / chosen_sum - dw_dot_p / (chosen_sum * chosen_sum);
      }
    } else {
      for (uint64_t j = 0; j < top_k; ++j) dp[index[j]] += dw[j];
    }
    float p_dot_dp = 0.0f;
    for (uint64_t e = 0; e < experts; ++e) p_dot_dp += p[e] * dp[e];
    for (uint64_t e = 0; e < experts; ++e) dp[e] = p[e] * (dp[e] - p_dot_dp);
  });
  return bad_index
             ? error("tsr_gpt_router_backward: top_index outside [0, %lu)", (unsigned long)experts)
             : nullptr;
}

const char* gather_rows(const void* src, const int32_t* index, void* dst, uint64_t rows,
                        uint64_t cols, uint32_t dtype) {
  return with_dtype("tsr_gpt_gather_rows", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* ps = static_cast<const T*>(src);
    T* pd = static_cast<T*>(dst);
    grid_stride(rows * cols, [&](uint64_t i) {
      const int32_t from = index[i / cols];
      store(pd + i, from >= 0 ? load(ps + uint64_t(from) * cols + i % cols) : 0.0f);
    });
    return nullptr;
  });
}

const char* combine_rows(const void* expert_out, const int32_t* slot, const float* weight,
                         void* out, uint64_t tokens, uint64_t top_k, uint64_t cols,
                         uint32_t dtype) {
  return with_dtype("tsr_gpt_combine_rows", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pe = static_cast<const T*>(expert_out);
    T* po = static_cast<T*>(out);
    grid_stride(tokens * cols, [&](uint64_t i) {
      const uint64_t t = i / cols, c = i % cols;
      float sum = 0.0f;
      for (uint64_t j = 0; j < top_k; ++j) {
        const int32_t s = slot[t * top_k + j];
        if (s < 0) continue;
        const float w = weight != nullptr ? weight[t * top_k + j] : 1.0f;
        sum += w * load(pe + uint64_t(s) * cols + c);
      }
      store(po + i, sum);
    });
    return nullptr;
  });
}

const char* combine_backward(const void* dout, const void* expert_out, const int32_t* slot,
                             const float* weight, void* dexpert_out, float* dweight,
                             uint64_t tokens, uint64_t top_k, uint64_t cols, uint32_t dtype) {
  return with_dtype("tsr_gpt_combine_backward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    grid_stride(tokens * top_k, [&](uint64_t pair) {
      const uint64_t t = pair / top_k;
      const int32_t s = slot[pair];
      if (s < 0) {
        if (dweight != nullptr) dweight[pair] = 0.0f;
        return;
      }
      const T* d = static_cast<const T*>(dout) + t * cols;
      const T* e = static_cast<const T*>(expert_out) + uint64_t(s) * cols;
      T* de = static_cast<T*>(dexpert_out) + uint64_t(s) * cols;
      const float w = weight != nullptr ? weight[pair] : 1.0f;
      for (uint64_t c = 0; c < cols; ++c) store(de + c, w * load(d + c));
      if (dweight != nullptr) dweight[pair] = dot(d, e, cols);
    });
    return nullptr;
  });
}

}  // namespace tessera::gpt::host
