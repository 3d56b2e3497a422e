// The GPT/MoE trainer's kernels: one set of device kernels, the same semantics in every format
// (host ELF for the host backend, CUDA fatbin/PTX, OpenCL C -> SPIR-V for Level Zero), launched
// through the HAL's kernel modules (hal/include/tessera/hal/module.h). Nothing above this class
// touches device memory: every pointer below is a device address of the kernels' device.
//
//   auto kernels = GptKernels::load(device).value();   // picks the image the device takes
//   TSR_RETURN_IF_ERROR(kernels.gelu_forward(stream, x, y, n, TSR_DTYPE_BF16));
//
// THE CONTRACT (every format's kernels and this class follow it):
// - Kernel entry names are "tsr_gpt_<method>" (e.g. tsr_gpt_norm_forward) and take exactly the
//   method's parameters after the stream, in order, with the C types written here (pointers are
//   8 bytes; int64_t/uint64_t counts; uint32_t enums; float scalars). A method that runs several
//   kernels says which ("kernels:").
// - `dtype` is the activation type, TSR_DTYPE_F32, TSR_DTYPE_BF16 or TSR_DTYPE_F16 (IEEE
//   binary16); storing a 16-bit type rounds to nearest even, f16 overflow (|x| >= 65520) stores
//   infinity (the trainer's loss scaling detects it: trainer.h). "act*" below means a pointer to
//   that type. f32* is always float. Arithmetic is f32 inside every kernel. The host image fails
//   a launch with any other dtype naming the kernel and the value (the GPU images do not check).
// - Matrices are row-major [rows, cols], rows = tokens (token t = b * seq + s for batch b).
// - Kernels are written as grid-stride loops over their index space (elements, rows or columns,
//   as each says), so any launch geometry is correct; GptKernels picks the geometry per format
//   (host: one block of one thread per launch, the kernel loops; GPUs: up to 1024 blocks of 256
//   threads). Reductions run in a fixed order for a given geometry, so a run repeats itself
//   bitwise on one device type.
// - "+=" means accumulate into existing values (gradients are f32 and accumulate across micro-
//   batches); "=" overwrites.
// - Every pointer documented "may be null" is passed as nullptr (0) when absent.
//
// Thread-compatible: one GptKernels per device, used from one thread or with external locking
// (launches themselves are thread-safe in the HAL).
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/common/status.h"
#include "tessera/hal/module.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::gpt {

enum class NormKind : uint32_t { kLayerNorm = 0, kRmsNorm = 1 };

class GptKernels {
 public:
  // Loads the kernel image `device` takes (host ELF, CUDA fatbin/PTX, SPIR-V) from the images
  // built into this library. UNIMPLEMENTED naming the device and its formats when none fits.
  static Result<GptKernels> load(const hal::Device& device);
  // Which image was loaded: "host-elf", "cuda-cubin", ... (hal::module_format_name).
  const char* format_name() const;

  // ---- elementwise ---------------------------------------------------------------------------
  // out[i] = a[i] + b[i], i < n. `out` may alias `a` or `b`. Index space: elements.
  Status add(const hal::Stream& s, const void* a, const void* b, void* out, uint64_t n,
             uint32_t dtype) const;
  // y[r, c] += bias[c] (bias: act*). Index space: elements.
  Status bias_add(const hal::Stream& s, void* y, const void* bias, uint64_t rows, uint64_t cols,
                  uint32_t dtype) const;
  // dbias[c] += sum over r (in order r = 0..rows-1) of dy[r, c] (dbias: f32*). Index space: cols.
  Status bias_grad(const hal::Stream& s, const void* dy, float* dbias, uint64_t rows, uint64_t cols,
                   uint32_t dtype) const;

  // ---- embeddings ----------------------------------------------------------------------------
  // out[t, :] = (vocab_begin <= tokens[t] < vocab_begin + vocab_count ? wte[tokens[t] -
  // vocab_begin, :] : 0) + (wpe ? wpe[t % seq, :] : 0). wte, wpe, out: act*; wpe may be null (the
  // caller passes it on one tensor-parallel rank only, since the partial outputs are summed).
  // Index space: elements of out (tokens * hidden).
  Status embed_forward(const hal::Stream& s, const int32_t* tokens, const void* wte,
                       const void* wpe, void* out, uint64_t tokens_count, uint64_t hidden,
                       uint64_t seq, int64_t vocab_begin, int64_t vocab_count,
                       uint32_t dtype) const;
  // dwte[tokens[t] - vocab_begin, :] += dout[t, :] for local tokens, t in order; dwpe[t % seq, :]
  // += dout[t, :] when dwpe is not null. dwte, dwpe: f32*. Index space: hidden columns (each
  // column walks the tokens in order: deterministic).
  Status embed_backward(const hal::Stream& s, const int32_t* tokens, const void* dout, float* dwte,
                        float* dwpe, uint64_t tokens_count, uint64_t hidden, uint64_t seq,
                        int64_t vocab_begin, int64_t vocab_count, uint32_t dtype) const;

  // ---- normalisation -------------------------------------------------------------------------
  // LayerNorm: y = (x - mean) * rstd * weight + bias; RMSNorm: y = x * rstd * weight, rstd =
  // 1 / sqrt(mean(x^2) + eps). weight, bias: act* (bias may be null; RMSNorm ignores it). mean
  // (f32*, rows; may be null for RMSNorm) and rstd (f32*, rows) are saved for the backward.
  // Index space: rows.
  Status norm_forward(const hal::Stream& s, const void* x, const void* weight, const void* bias,
                      void* y, float* mean, float* rstd, uint64_t rows, uint64_t cols, float eps,
                      uint32_t kind, uint32_t dtype) const;
  // dx = d(norm)/dx applied to dy; when accumulate != 0, dx += that (dx and the residual
  // gradient share a buffer), else dx = that. Index space: rows.
  Status norm_backward_input(const hal::Stream& s, const void* dy, const void* x,
                             const void* weight, const float* mean, const float* rstd, void* dx,
                             uint64_t rows, uint64_t cols, uint32_t kind, uint32_t accumulate,
                             uint32_t dtype) const;
  // dweight[c] += sum_r dy[r,c] * xhat[r,c]; dbias[c] += sum_r dy[r,c] (LayerNorm, when dbias is
  // not null), r in order. dweight, dbias: f32*. Index space: cols.
  Status norm_backward_params(const hal::Stream& s, const void* dy, const void* x,
                              const float* mean, const float* rstd, float* dweight, float* dbias,
                              uint64_t rows, uint64_t cols, uint32_t kind, uint32_t dtype) const;

  // ---- rotary position embedding (in place) --------------------------------------------------
  // x: [rows, heads * head_dim] act*; row r is position p = r % seq. For each head and
  // i < head_dim / 2, with angle = p * theta^(-2i / head_dim), the pair (x1, x2) = (x[i],
  // x[i + head_dim/2]) becomes (x1 cos - x2 sin, x2 cos + x1 sin) (HF's rotate_half convention).
  // direction = -1 applies the inverse rotation (the backward of direction +1). Index space: rows.
  Status rope(const hal::Stream& s, void* x, uint64_t rows, uint64_t heads, uint64_t head_dim,
              uint64_t seq, float theta, int32_t direction, uint32_t dtype) const;

  // ---- causal self-attention (multi-head / grouped-query), exact softmax --------------------
  // q: [batch*seq, heads*head_dim], k, v: [batch*seq, kv_heads*head_dim], out like q (act*).
  // Query head h reads kv head h / (heads / kv_heads). out[b,i,h] = sum_{j<=i} p_ij v[b,j,g],
  // p = softmax_j(scale * q[b,i,h].k[b,j,g]); lse[(b*heads + h)*seq + i] = log sum exp (f32*).
  // Index space: (b, h, i) rows.
  Status attention_forward(const hal::Stream& s, const void* q, const void* k, const void* v,
                           void* out, float* lse, uint64_t batch, uint64_t seq, uint64_t heads,
                           uint64_t kv_heads, uint64_t head_dim, float scale, uint32_t dtype) const;
  // dq, dk, dv (act*, same shapes as q, k, v) = the gradients of attention_forward given dout;
  // they are overwritten. delta (f32*, batch*heads*seq) is scratch.
  // kernels: tsr_gpt_attention_backward_delta (delta[(b,h,i)] = dout . out; index space: rows),
  //          tsr_gpt_attention_backward_dq (index space: (b, h, i) rows),
  //          tsr_gpt_attention_backward_dkv (index space: (b, g, j) key rows; sums over the query
  //          heads of group g and queries i >= j in order) — each with the parameters of this
  //          method in this order.
  Status attention_backward(const hal::Stream& s, const void* q, const void* k, const void* v,
                            const void* out, const void* dout, const float* lse, float* delta,
                            void* dq, void* dk, void* dv, uint64_t batch, uint64_t seq,
                            uint64_t heads, uint64_t kv_heads, uint64_t head_dim, float scale,
                            uint32_t dtype) const;

  // ---- MLP activations ----------------------------------------------------------------------
  // GeLU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Index space: elements.
  Status gelu_forward(const hal::Stream& s, const void* x, void* y, uint64_t n,
                      uint32_t dtype) const;
  // dx = dy * gelu'(x) (overwrites). Index space: elements.
  Status gelu_backward(const hal::Stream& s, const void* x, const void* dy, void* dx, uint64_t n,
                       uint32_t dtype) const;
  // y = silu(gate) * up, silu(g) = g / (1 + exp(-g)). Index space: elements.
  Status swiglu_forward(const hal::Stream& s, const void* gate, const void* up, void* y, uint64_t n,
                        uint32_t dtype) const;
  // dgate = dy * up * silu'(gate), dup = dy * silu(gate) (overwrite). Index space: elements.
  Status swiglu_backward(const hal::Stream& s, const void* gate, const void* up, const void* dy,
                         void* dgate, void* dup, uint64_t n, uint32_t dtype) const;

  // ---- cross-entropy over (possibly vocabulary-parallel) f32 logits --------------------------
  // logits: [rows, vocab_local] f32*; this rank holds columns [vocab_begin, vocab_begin +
  // vocab_local) of the vocabulary. Under tensor parallelism the caller allreduces row_max (max),
  // then sum_exp and target_logit (sum) over the group between the calls. Index space: rows.
  // row_max[r] = max_c logits[r, c].
  Status xent_max(const hal::Stream& s, const float* logits, float* row_max, uint64_t rows,
                  uint64_t vocab_local) const;
  // sum_exp[r] = sum_c exp(logits[r, c] - row_max[r]), c in order.
  Status xent_sum_exp(const hal::Stream& s, const float* logits, const float* row_max,
                      float* sum_exp, uint64_t rows, uint64_t vocab_local) const;
  // target_logit[r] = logits[r, targets[r] - vocab_begin] when that column is local, else 0.
  Status xent_target(const hal::Stream& s, const float* logits, const int32_t* targets,
                     float* target_logit, uint64_t rows, int64_t vocab_begin,
                     uint64_t vocab_local) const;
  // loss[r] = log(sum_exp[r]) + row_max[r] - target_logit[r] (f32*).
  Status xent_loss(const hal::Stream& s, const float* row_max, const float* sum_exp,
                   const float* target_logit, float* loss, uint64_t rows) const;
  // dlogits[r, c] = scale * (exp(logits[r,c] - row_max[r]) / sum_exp[r] - [c + vocab_begin ==
  // targets[r]]) (act*: the input of the head's backward GEMMs). Index space: rows.
  Status xent_backward(const hal::Stream& s, const float* logits, const int32_t* targets,
                       const float* row_max, const float* sum_exp, void* dlogits, uint64_t rows,
                       int64_t vocab_begin, uint64_t vocab_local, float scale,
                       uint32_t dtype) const;

  // ---- mixture of experts ------------------------------------------------------------------
  // logits: [tokens, experts] f32*. probs = softmax over experts (f32*, saved for the backward);
  // top_index[t, j] (int32_t*, [tokens, top_k]) = the j-th largest prob (ties: lower expert
  // first), top_weight[t, j] (f32*) = its prob, divided by the sum of the top_k probs when
  // normalize != 0. Index space: tokens.
  Status router_forward(const hal::Stream& s, const float* logits, float* probs, int32_t* top_index,
                        float* top_weight, uint64_t tokens, uint64_t experts, uint64_t top_k,
                        uint32_t normalize) const;
  // dlogits (f32*, overwritten) = the gradient of the router logits from dtop_weight (f32*,
  // [tokens, top_k]) through top_weight's softmax (and normalisation), plus the load-balancing
  // loss aux = aux_coef * experts * sum_e fraction[e] * mean_t probs[t, e] (fraction: f32*
  // [experts], the share of token slots routed to e, a constant): d aux / d probs[t, e] =
  // aux_coef * experts * fraction[e] / tokens. Index space: tokens.
  Status router_backward(const hal::Stream& s, const float* probs, const int32_t* top_index,
                         const float* dtop_weight, const float* fraction, float* dlogits,
                         uint64_t tokens, uint64_t experts, uint64_t top_k, uint32_t normalize,
                         float aux_coef) const;
  // dst[r, :] = index[r] >= 0 ? src[index[r], :] : 0, r < rows (act*). Index space: elements.
  Status gather_rows(const hal::Stream& s, const void* src, const int32_t* index, void* dst,
                     uint64_t rows, uint64_t cols, uint32_t dtype) const;
  // out[t, :] = sum_{j < top_k, slot[t*top_k + j] >= 0} w_j * expert_out[slot[t*top_k + j], :],
  // j in order, w_j = weight ? weight[t*top_k + j] : 1 (weight: f32*, may be null). Also the
  // backward of gather_rows (weight null). Index space: elements of out (tokens * cols).
  Status combine_rows(const hal::Stream& s, const void* expert_out, const int32_t* slot,
                      const float* weight, void* out, uint64_t tokens, uint64_t top_k,
                      uint64_t cols, uint32_t dtype) const;
  // The backward of combine_rows: dexpert_out[slot[t,j], :] = weight[t,j] * dout[t, :] (rows no
  // slot names are left as they are: the caller zeroes the buffer), dweight[t, j] = dout[t, :] .
  // expert_out[slot[t,j], :] (f32*; 0 where slot < 0). Index space: (t, j) pairs.
  Status combine_backward(const hal::Stream& s, const void* dout, const void* expert_out,
                          const int32_t* slot, const float* weight, void* dexpert_out,
                          float* dweight, uint64_t tokens, uint64_t top_k, uint64_t cols,
                          uint32_t dtype) const;

  // ---- optimizer ---------------------------------------------------------------------------
  // sum_sq[0] = sum of x[i]^2 over i < n in a fixed order (f32* x; the result in f32). Under
  // any geometry the kernel writes one value. Index space: one row of n elements.
  Status sum_squares(const hal::Stream& s, const float* x, float* sum_sq, uint64_t n) const;
  // AdamW on f32 master weights: g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2)
  // g^2; param -= lr * (m / bias1 / (sqrt(v / bias2) + eps) + weight_decay * param), bias1 =
  // 1 - b1^t, bias2 = 1 - b2^t given by the caller. When copy is not null, copy[i] = param[i] in
  // copy_dtype (the working weights, act*). Index space: elements.
  Status adamw(const hal::Stream& s, float* param, const float* grad, float* m, float* v,
               void* copy, uint64_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, float bias1, float bias2, float grad_scale,
               uint32_t copy_dtype) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tessera::gpt
