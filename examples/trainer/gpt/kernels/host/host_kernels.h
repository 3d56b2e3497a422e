// The host kernels: one function per entry "tsr_gpt_<name>", taking exactly the contract's
// arguments (examples/trainer/gpt/kernels.h, after the stream; attention_backward is three
// kernels with its arguments). Each returns nullptr, or why it failed (kernel_support.h).
#pragma once

#include <cstdint>

namespace tessera::gpt::host {

const char* add(const void* a, const void* b, void* out, uint64_t n, uint32_t dtype);
const char* bias_add(void* y, const void* bias, uint64_t rows, uint64_t cols, uint32_t dtype);
const char* bias_grad(const void* dy, float* dbias, uint64_t rows, uint64_t cols, uint32_t dtype);
const char* embed_forward(const int32_t* tokens, const void* wte, const void* wpe, void* out,
                          uint64_t tokens_count, uint64_t hidden, uint64_t seq, int64_t vocab_begin,
                          int64_t vocab_count, uint32_t dtype);
const char* embed_backward(const int32_t* tokens, const void* dout, float* dwte, float* dwpe,
                           uint64_t tokens_count, uint64_t hidden, uint64_t seq,
                           int64_t vocab_begin, int64_t vocab_count, uint32_t dtype);
const char* norm_forward(const void* x, const void* weight, const void* bias, void* y, float* mean,
                         float* rstd, uint64_t rows, uint64_t cols, float eps, uint32_t kind,
                         uint32_t dtype);
const char* norm_backward_input(const void* dy, const void* x, const void* weight,
                                const float* mean, const float* rstd, void* dx, uint64_t rows,
                                uint64_t cols, uint32_t kind, uint32_t accumulate, uint32_t dtype);
const char* norm_backward_params(const void* dy, const void* x, const float* mean,
                                 const float* rstd, float* dweight, float* dbias, uint64_t rows,
                                 uint64_t cols, uint32_t kind, uint32_t dtype);
const char* rope(void* x, uint64_t rows, uint64_t heads, uint64_t head_dim, uint64_t seq,
                 float theta, int32_t direction, uint32_t dtype);
const char* attention_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                              uint64_t batch, uint64_t seq, uint64_t heads, uint64_t kv_heads,
                              uint64_t head_dim, float scale, uint32_t dtype);
const char* attention_backward_delta(const void* q, const void* k, const void* v, const void* out,
                                     const void* dout, const float* lse, float* delta, void* dq,
                                     void* dk, void* dv, uint64_t batch, uint64_t seq,
                                     uint64_t heads, uint64_t kv_heads, uint64_t head_dim,
                                     float scale, uint32_t dtype);
const char* attention_backward_dq(const void* q, const void* k, const void* v, const void* out,
                                  const void* dout, const float* lse, float* delta, void* dq,
                                  void* dk, void* dv, uint64_t batch, uint64_t seq, uint64_t heads,
                                  uint64_t kv_heads, uint64_t head_dim, float scale,
                                  uint32_t dtype);
const char* attention_backward_dkv(const void* q, const void* k, const void* v, const void* out,
                                   const void* dout, const float* lse, float* delta, void* dq,
                                   void* dk, void* dv, uint64_t batch, uint64_t seq, uint64_t heads,
                                   uint64_t kv_heads, uint64_t head_dim, float scale,
                                   uint32_t dtype);
const char* gelu_forward(const void* x, void* y, uint64_t n, uint32_t dtype);
const char* gelu_backward(const void* x, const void* dy, void* dx, uint64_t n, uint32_t dtype);
const char* swiglu_forward(const void* gate, const void* up, void* y, uint64_t n, uint32_t dtype);
const char* swiglu_backward(const void* gate, const void* up, const void* dy, void* dgate,
                            void* dup, uint64_t n, uint32_t dtype);
const char* xent_max(const float* logits, float* row_max, uint64_t rows, uint64_t vocab_local);
const char* xent_sum_exp(const float* logits, const float* row_max, float* sum_exp, uint64_t rows,
                         uint64_t vocab_local);
const char* xent_target(const float* logits, const int32_t* targets, float* target_logit,
                        uint64_t rows, int64_t vocab_begin, uint64_t vocab_local);
const char* xent_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                      float* loss, uint64_t rows);
const char* xent_backward(const float* logits, const int32_t* targets, const float* row_max,
                          const float* sum_exp, void* dlogits, uint64_t rows, int64_t vocab_begin,
                          uint64_t vocab_local, float scale, uint32_t dtype);
const char* router_forward(const float* logits, float* probs, int32_t* top_index, float* top_weight,
                           uint64_t tokens, uint64_t experts, uint64_t top_k, uint32_t normalize);
const char* router_backward(const float* probs, const int32_t* top_index, const float* dtop_weight,
                            const float* fraction, float* dlogits, uint64_t tokens,
                            uint64_t experts, uint64_t top_k, uint32_t normalize, float aux_coef);
const char* gather_rows(const void* src, const int32_t* index, void* dst, uint64_t rows,
                        uint64_t cols, uint32_t dtype);
const char* combine_rows(const void* expert_out, const int32_t* slot, const float* weight,
                         void* out, uint64_t tokens, uint64_t top_k, uint64_t cols, uint32_t dtype);
const char* combine_backward(const void* dout, const void* expert_out, const int32_t* slot,
                             const float* weight, void* dexpert_out, float* dweight,
                             uint64_t tokens, uint64_t top_k, uint64_t cols, uint32_t dtype);
const char* sum_squares(const float* x, float* sum_sq, uint64_t n);
const char* adamw(float* param, const float* grad, float* m, float* v, void* copy, uint64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale, uint32_t copy_dtype);

}  // namespace tessera::gpt::host
