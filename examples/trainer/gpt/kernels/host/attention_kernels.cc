// Host kernels for causal multi-head / grouped-query attention: the forward as one online-softmax
// pass over the keys of each query row, the backward as three kernels (delta, dq, dk/dv) that
// recompute the probabilities from the saved log-sum-exp. Semantics:
// examples/trainer/gpt/kernels.h.
#include <vector>

#include "host_kernels.h"
#include "kernel_support.h"

namespace tessera::gpt::host {
namespace {

// Where head `head` of token (b, i) starts in a [batch*seq, heads*head_dim] matrix.
struct Layout {
  uint64_t batch, seq, heads, kv_heads, head_dim;

  uint64_t group_size() const { return heads / kv_heads; }
  uint64_t q_offset(uint64_t b, uint64_t i, uint64_t h) const {
    return ((b * seq + i) * heads + h) * head_dim;
  }
  uint64_t kv_offset(uint64_t b, uint64_t j, uint64_t g) const {
    return ((b * seq + j) * kv_heads + g) * head_dim;
  }
  uint64_t row(uint64_t b, uint64_t h, uint64_t i) const { return (b * heads + h) * seq + i; }
};

const char* check_layout(const char* kernel, const Layout& l) {
  if (l.kv_heads == 0 || l.heads % l.kv_heads != 0) {
    return error("%s: heads %lu is not a multiple of kv_heads %lu", kernel, (unsigned long)l.heads,
                 (unsigned long)l.kv_heads);
  }
  return nullptr;
}

template <typename T>
void to_f32(const T* src, float* dst, uint64_t n) {
  for (uint64_t d = 0; d < n; ++d) dst[d] = load(src + d);
}

// p_ij of row (b, h, i) and key j: exp(scale * q.k - lse).
template <typename T>
float probability(const float* q_row, const T* k, const Layout& l, uint64_t b, uint64_t j,
                  uint64_t g, float scale, float lse) {
  return std::exp(scale * dot(q_row, k + l.kv_offset(b, j, g), l.head_dim) - lse);
}

}  // namespace

const char* attention_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                              uint64_t batch, uint64_t seq, uint64_t heads, uint64_t kv_heads,
                              uint64_t head_dim, float scale, uint32_t dtype) {
  const Layout l{batch, seq, heads, kv_heads, head_dim};
  if (const char* bad = check_layout("tsr_gpt_attention_forward", l)) return bad;
  return with_dtype("tsr_gpt_attention_forward", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(q);
    const T* pk = static_cast<const T*>(k);
    const T* pv = static_cast<const T*>(v);
    std::vector<float> q_row(head_dim), acc(head_dim);
    grid_stride(batch * heads * seq, [&](uint64_t row) {
      const uint64_t i = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
      const uint64_t g = h / l.group_size();
      to_f32(pq + l.q_offset(b, i, h), q_row.data(), head_dim);
      float m = kNegativeInfinity, sum = 0.0f;
      for (uint64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
      for (uint64_t j = 0; j <= i; ++j) {
        const float s = scale * dot(q_row.data(), pk + l.kv_offset(b, j, g), head_dim);
        const float m_new = s > m ? s : m;
        const float rescale = std::exp(m - m_new);
        const float p = std::exp(s - m_new);
        sum = sum * rescale + p;
        const T* vj = pv + l.kv_offset(b, j, g);
        for (uint64_t d = 0; d < head_dim; ++d) acc[d] = acc[d] * rescale + p * load(vj + d);
        m = m_new;
      }
      T* o = static_cast<T*>(out) + l.q_offset(b, i, h);
      for (uint64_t d = 0; d < head_dim; ++d) store(o + d, acc[d] / sum);
      lse[row] = m + std::log(sum);
    });
    return nullptr;
  });
}

const char* attention_backward_delta(const void* q, const void* k, const void* v, const void* out,
                                     const void* dout, const float* lse, float* delta, void* dq,
                                     void* dk, void* dv, uint64_t batch, uint64_t seq,
                                     uint64_t heads, uint64_t kv_heads, uint64_t head_dim,
                                     float scale, uint32_t dtype) {
  const Layout l{batch, seq, heads, kv_heads, head_dim};
  if (const char* bad = check_layout("tsr_gpt_attention_backward_delta", l)) return bad;
  return with_dtype(
      "tsr_gpt_attention_backward_delta", "dtype", dtype, [&](auto tag) -> const char* {
        using T = decltype(tag);
        grid_stride(batch * heads * seq, [&](uint64_t row) {
          const uint64_t i = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
          const uint64_t at = l.q_offset(b, i, h);
          delta[row] =
              dot(static_cast<const T*>(dout) + at, static_cast<const T*>(out) + at, head_dim);
        });
        return nullptr;
      });
}

// dq_i = scale * sum_{j <= i} p_ij (dout_i . v_j - delta_i) k_j, j in order.
const char* attention_backward_dq(const void* q, const void* k, const void* v, const void* out,
                                  const void* dout, const float* lse, float* delta, void* dq,
                                  void* dk, void* dv, uint64_t batch, uint64_t seq, uint64_t heads,
                                  uint64_t kv_heads, uint64_t head_dim, float scale,
                                  uint32_t dtype) {
  const Layout l{batch, seq, heads, kv_heads, head_dim};
  if (const char* bad = check_layout("tsr_gpt_attention_backward_dq", l)) return bad;
  return with_dtype("tsr_gpt_attention_backward_dq", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pk = static_cast<const T*>(k);
    const T* pv = static_cast<const T*>(v);
    std::vector<float> q_row(head_dim), do_row(head_dim), acc(head_dim);
    grid_stride(batch * heads * seq, [&](uint64_t row) {
      const uint64_t i = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
      const uint64_t g = h / l.group_size();
      to_f32(static_cast<const T*>(q) + l.q_offset(b, i, h), q_row.data(), head_dim);
      to_f32(static_cast<const T*>(dout) + l.q_offset(b, i, h), do_row.data(), head_dim);
      for (uint64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
      for (uint64_t j = 0; j <= i; ++j) {
        const float p = probability(q_row.data(), pk, l, b, j, g, scale, lse[row]);
        const float ds = p * (dot(do_row.data(), pv + l.kv_offset(b, j, g), head_dim) - delta[row]);
        const T* kj = pk + l.kv_offset(b, j, g);
        for (uint64_t d = 0; d < head_dim; ++d) acc[d] += ds * load(kj + d);
      }
      T* o = static_cast<T*>(dq) + l.q_offset(b, i, h);
      for (uint64_t d = 0; d < head_dim; ++d) store(o + d, scale * acc[d]);
    });
    return nullptr;
  });
}

// For key row (b, g, j): dv_j = sum p_ij dout_i and dk_j = scale * sum ds_ij q_i over the query
// heads h of group g (in order) and queries i >= j (in order).
const char* attention_backward_dkv(const void* q, const void* k, const void* v, const void* out,
                                   const void* dout, const float* lse, float* delta, void* dq,
                                   void* dk, void* dv, uint64_t batch, uint64_t seq, uint64_t heads,
                                   uint64_t kv_heads, uint64_t head_dim, float scale,
                                   uint32_t dtype) {
  const Layout l{batch, seq, heads, kv_heads, head_dim};
  if (const char* bad = check_layout("tsr_gpt_attention_backward_dkv", l)) return bad;
  return with_dtype("tsr_gpt_attention_backward_dkv", "dtype", dtype, [&](auto tag) -> const char* {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(q);
    const T* pdo = static_cast<const T*>(dout);
    std::vector<float> k_row(head_dim), v_row(head_dim), dk_acc(head_dim), dv_acc(head_dim);
    grid_stride(batch * kv_heads * seq, [&](uint64_t key_row) {
      const uint64_t j = key_row % seq, g = (key_row / seq) % kv_heads,
                     b = key_row / (seq * kv_heads);
      to_f32(static_cast<const T*>(k) + l.kv_offset(b, j, g), k_row.data(), head_dim);
      to_f32(static_cast<const T*>(v) + l.kv_offset(b, j, g), v_row.data(), head_dim);
      for (uint64_t d = 0; d < head_dim; ++d) dk_acc[d] = dv_acc[d] = 0.0f;
      for (uint64_t h = g * l.group_size(); h < (g + 1) * l.group_size(); ++h) {
        for (uint64_t i = j; i < seq; ++i) {
          const uint64_t row = l.row(b, h, i);
          const T* qi = pq + l.q_offset(b, i, h);
          const T* doi = pdo + l.q_offset(b, i, h);
          const float p = std::exp(scale * dot(qi, k_row.data(), head_dim) - lse[row]);
          const float ds = p * (dot(doi, v_row.data(), head_dim) - delta[row]);
          for (uint64_t d = 0; d < head_dim; ++d) {
            dv_acc[d] += p * load(doi + d);
            dk_acc[d] += ds * load(qi + d);
          }
        }
      }
      T* dkj = static_cast<T*>(dk) + l.kv_offset(b, j, g);
      T* dvj = static_cast<T*>(dv) + l.kv_offset(b, j, g);
      for (uint64_t d = 0; d < head_dim; ++d) {
        store(dkj + d, scale * dk_acc[d]);
        store(dvj + d, dv_acc[d]);
      }
    });
    return nullptr;
  });
}

}  // namespace tessera::gpt::host
