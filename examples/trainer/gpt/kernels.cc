// GptKernels: picks the embedded image the device takes, resolves every kernel once at load, and
// turns each method into one launch (or three, for attention_backward) with the contract's
// arguments in order. The geometry is this file's choice (kernels.h: any geometry is correct).
#include "kernels.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tessera/hal/backend_abi.h"

// The images the build embedded (cmake/TesseraEmbed.cmake; kernels/CMakeLists.txt says which).
#ifdef TESSERA_GPT_HAVE_HOST_IMAGE
extern const unsigned char tsr_gpt_host_image[];
extern const unsigned long tsr_gpt_host_image_size;
#endif
#ifdef TESSERA_GPT_HAVE_CUDA_IMAGE
extern const unsigned char tsr_gpt_cuda_fatbin[];
extern const unsigned long tsr_gpt_cuda_fatbin_size;
#endif
#ifdef TESSERA_GPT_HAVE_PTX_IMAGE
extern const unsigned char tsr_gpt_cuda_ptx[];
extern const unsigned long tsr_gpt_cuda_ptx_size;
#endif
#ifdef TESSERA_GPT_HAVE_SPIRV_IMAGE
extern const unsigned char tsr_gpt_spirv[];
extern const unsigned long tsr_gpt_spirv_size;
#endif

namespace tessera::gpt {
namespace {

// Every kernel of the contract; kKernelNames spells each entry name in the same order.
enum Kernel : size_t {
  kAdd,
  kBiasAdd,
  kBiasGrad,
  kEmbedForward,
  kEmbedBackward,
  kNormForward,
  kNormBackwardInput,
  kNormBackwardParams,
  kRope,
  kAttentionForward,
  kAttentionBackwardDelta,
  kAttentionBackwardDq,
  kAttentionBackwardDkv,
  kGeluForward,
  kGeluBackward,
  kSwigluForward,
  kSwigluBackward,
  kXentMax,
  kXentSumExp,
  kXentTarget,
  kXentLoss,
  kXentBackward,
  kRouterForward,
  kRouterBackward,
  kGatherRows,
  kCombineRows,
  kCombineBackward,
  kSumSquares,
  kAdamw,
  kKernelCount
};

constexpr std::array<const char*, kKernelCount> kKernelNames = {
    "tsr_gpt_add",
    "tsr_gpt_bias_add",
    "tsr_gpt_bias_grad",
    "tsr_gpt_embed_forward",
    "tsr_gpt_embed_backward",
    "tsr_gpt_norm_forward",
    "tsr_gpt_norm_backward_input",
    "tsr_gpt_norm_backward_params",
    "tsr_gpt_rope",
    "tsr_gpt_attention_forward",
    "tsr_gpt_attention_backward_delta",
    "tsr_gpt_attention_backward_dq",
    "tsr_gpt_attention_backward_dkv",
    "tsr_gpt_gelu_forward",
    "tsr_gpt_gelu_backward",
    "tsr_gpt_swiglu_forward",
    "tsr_gpt_swiglu_backward",
    "tsr_gpt_xent_max",
    "tsr_gpt_xent_sum_exp",
    "tsr_gpt_xent_target",
    "tsr_gpt_xent_loss",
    "tsr_gpt_xent_backward",
    "tsr_gpt_router_forward",
    "tsr_gpt_router_backward",
    "tsr_gpt_gather_rows",
    "tsr_gpt_combine_rows",
    "tsr_gpt_combine_backward",
    "tsr_gpt_sum_squares",
    "tsr_gpt_adamw",
};

// How a launch's index space maps onto GPU blocks, as the GPU kernels walk it
// (kernels/gpu/*.inc): kItems gives each thread one item (elements, columns, tokens); kRows gives
// each block one row (or (t, j) pair) whose threads share the work and reduce it; kSingle is one
// block reducing everything (sum_squares writes one value).
enum class Space { kItems, kRows, kSingle };

constexpr uint32_t kGpuThreads = 256;
constexpr uint64_t kGpuMaxBlocks = 1024;

struct Image {
  int32_t format;
  const unsigned char* bytes;
  unsigned long size;
};

// The embedded images in preference order: native GPU code first, then PTX (JIT), SPIR-V, host.
std::vector<Image> embedded_images() {
  std::vector<Image> images;
#ifdef TESSERA_GPT_HAVE_CUDA_IMAGE
  images.push_back({TSR_MODULE_CUDA_CUBIN, tsr_gpt_cuda_fatbin, tsr_gpt_cuda_fatbin_size});
#endif
#ifdef TESSERA_GPT_HAVE_PTX_IMAGE
  images.push_back({TSR_MODULE_CUDA_PTX, tsr_gpt_cuda_ptx, tsr_gpt_cuda_ptx_size});
#endif
#ifdef TESSERA_GPT_HAVE_SPIRV_IMAGE
  images.push_back({TSR_MODULE_SPIRV, tsr_gpt_spirv, tsr_gpt_spirv_size});
#endif
#ifdef TESSERA_GPT_HAVE_HOST_IMAGE
  images.push_back({TSR_MODULE_HOST_ELF, tsr_gpt_host_image, tsr_gpt_host_image_size});
#endif
  return images;
}

std::string format_list(const std::vector<Image>& images) {
  std::string names;
  for (const Image& image : images) {
    if (!names.empty()) names += ", ";
    names += hal::module_format_name(image.format);
  }
  return names.empty() ? "none" : names;
}

}  // namespace

struct GptKernels::Impl {
  hal::Module module;
  std::array<hal::Function, kKernelCount> functions;
  bool host = false;

  // No dynamic shared memory: the GPU kernels reduce in a fixed scratch array of their own
  // (kernels/gpu/gpt_common.inc), which Level Zero launches could not size anyway.
  hal::LaunchConfig geometry(Space space, uint64_t count) const {
    hal::LaunchConfig config;
    if (host) return config;  // one call: the host kernel loops over the whole index space
    config.block.x = kGpuThreads;
    switch (space) {
      case Space::kItems:
        config.grid.x = uint32_t(
            std::clamp<uint64_t>((count + kGpuThreads - 1) / kGpuThreads, 1, kGpuMaxBlocks));
        break;
      case Space::kRows:
        config.grid.x = uint32_t(std::clamp<uint64_t>(count, 1, kGpuMaxBlocks));
        break;
      case Space::kSingle: break;  // grid 1
    }
    return config;
  }

  // FAILED_PRECONDITION for a GptKernels that load() did not make (default-constructed).
  template <typename... Args>
  static Status launch(const Impl* impl, const hal::Stream& s, Kernel kernel, Space space,
                       uint64_t count, const Args&... args) {
    if (impl == nullptr) {
      return failed_precondition(std::string("GPT kernels: ") + kKernelNames[kernel] +
                                 " called on kernels that were never loaded");
    }
    return s.launch(impl->functions[kernel], impl->geometry(space, count), args...);
  }
};

Result<GptKernels> GptKernels::load(const hal::Device& device) {
  const std::vector<Image> images = embedded_images();
  auto chosen = std::find_if(images.begin(), images.end(), [&](const Image& image) {
    return device.takes_module_format(image.format);
  });
  if (chosen == images.end()) {
    return unimplemented("GPT kernels: device " + device.id() + " takes module formats [" +
                         hal::module_format_names(device.module_formats()) +
                         "], and this build embeds [" + format_list(images) + "]");
  }
  // PTX is loaded as NUL-terminated text; the embedded file need not end in a NUL.
  std::vector<std::byte> image(reinterpret_cast<const std::byte*>(chosen->bytes),
                               reinterpret_cast<const std::byte*>(chosen->bytes) + chosen->size);
  if (chosen->format == TSR_MODULE_CUDA_PTX && (image.empty() || image.back() != std::byte{0})) {
    image.push_back(std::byte{0});
  }
  const std::string name = std::string("gpt_kernels.") + hal::module_format_name(chosen->format);
  auto impl = std::make_shared<Impl>();
  TSR_ASSIGN_OR_RETURN(impl->module, hal::Module::load(device, chosen->format, image, name));
  for (size_t k = 0; k < kKernelCount; ++k) {
    TSR_ASSIGN_OR_RETURN(impl->functions[k], impl->module.function(kKernelNames[k]));
  }
  impl->host = chosen->format == TSR_MODULE_HOST_ELF;
  GptKernels kernels;
  kernels.impl_ = std::move(impl);
  return kernels;
}

const char* GptKernels::format_name() const {
  return impl_ ? hal::module_format_name(impl_->module.format()) : "none";
}

// ---- elementwise ---------------------------------------------------------------------------

Status GptKernels::add(const hal::Stream& s, const void* a, const void* b, void* out, uint64_t n,
                       uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kAdd, Space::kItems, n, a, b, out, n, dtype);
}

Status GptKernels::bias_add(const hal::Stream& s, void* y, const void* bias, uint64_t rows,
                            uint64_t cols, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kBiasAdd, Space::kItems, rows * cols, y, bias, rows, cols,
                      dtype);
}

Status GptKernels::bias_grad(const hal::Stream& s, const void* dy, float* dbias, uint64_t rows,
                             uint64_t cols, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kBiasGrad, Space::kItems, cols, dy, dbias, rows, cols, dtype);
}

// ---- embeddings ----------------------------------------------------------------------------

Status GptKernels::embed_forward(const hal::Stream& s, const int32_t* tokens, const void* wte,
                                 const void* wpe, void* out, uint64_t tokens_count, uint64_t hidden,
                                 uint64_t seq, int64_t vocab_begin, int64_t vocab_count,
                                 uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kEmbedForward, Space::kItems, tokens_count * hidden, tokens,
                      wte, wpe, out, tokens_count, hidden, seq, vocab_begin, vocab_count, dtype);
}

Status GptKernels::embed_backward(const hal::Stream& s, const int32_t* tokens, const void* dout,
                                  float* dwte, float* dwpe, uint64_t tokens_count, uint64_t hidden,
                                  uint64_t seq, int64_t vocab_begin, int64_t vocab_count,
                                  uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kEmbedBackward, Space::kItems, hidden, tokens, dout, dwte,
                      dwpe, tokens_count, hidden, seq, vocab_begin, vocab_count, dtype);
}

// ---- normalisation -------------------------------------------------------------------------

Status GptKernels::norm_forward(const hal::Stream& s, const void* x, const void* weight,
                                const void* bias, void* y, float* mean, float* rstd, uint64_t rows,
                                uint64_t cols, float eps, uint32_t kind, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kNormForward, Space::kRows, rows, x, weight, bias, y, mean,
                      rstd, rows, cols, eps, kind, dtype);
}

Status GptKernels::norm_backward_input(const hal::Stream& s, const void* dy, const void* x,
                                       const void* weight, const float* mean, const float* rstd,
                                       void* dx, uint64_t rows, uint64_t cols, uint32_t kind,
                                       uint32_t accumulate, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kNormBackwardInput, Space::kRows, rows, dy, x, weight, mean,
                      rstd, dx, rows, cols, kind, accumulate, dtype);
}

Status GptKernels::norm_backward_params(const hal::Stream& s, const void* dy, const void* x,
                                        const float* mean, const float* rstd, float* dweight,
                                        float* dbias, uint64_t rows, uint64_t cols, uint32_t kind,
                                        uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kNormBackwardParams, Space::kItems, cols, dy, x, mean, rstd,
                      dweight, dbias, rows, cols, kind, dtype);
}

// ---- rotary position embedding -------------------------------------------------------------

Status GptKernels::rope(const hal::Stream& s, void* x, uint64_t rows, uint64_t heads,
                        uint64_t head_dim, uint64_t seq, float theta, int32_t direction,
                        uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kRope, Space::kRows, rows, x, rows, heads, head_dim, seq,
                      theta, direction, dtype);
}

// ---- attention -----------------------------------------------------------------------------

Status GptKernels::attention_forward(const hal::Stream& s, const void* q, const void* k,
                                     const void* v, void* out, float* lse, uint64_t batch,
                                     uint64_t seq, uint64_t heads, uint64_t kv_heads,
                                     uint64_t head_dim, float scale, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kAttentionForward, Space::kRows, batch * heads * seq, q, k, v,
                      out, lse, batch, seq, heads, kv_heads, head_dim, scale, dtype);
}

Status GptKernels::attention_backward(const hal::Stream& s, const void* q, const void* k,
                                      const void* v, const void* out, const void* dout,
                                      const float* lse, float* delta, void* dq, void* dk, void* dv,
                                      uint64_t batch, uint64_t seq, uint64_t heads,
                                      uint64_t kv_heads, uint64_t head_dim, float scale,
                                      uint32_t dtype) const {
  const uint64_t query_rows = batch * heads * seq;
  const uint64_t key_rows = batch * kv_heads * seq;
  TSR_RETURN_IF_ERROR(Impl::launch(impl_.get(), s, kAttentionBackwardDelta, Space::kRows,
                                   query_rows, q, k, v, out, dout, lse, delta, dq, dk, dv, batch,
                                   seq, heads, kv_heads, head_dim, scale, dtype));
  TSR_RETURN_IF_ERROR(Impl::launch(impl_.get(), s, kAttentionBackwardDq, Space::kRows, query_rows,
                                   q, k, v, out, dout, lse, delta, dq, dk, dv, batch, seq, heads,
                                   kv_heads, head_dim, scale, dtype));
  return Impl::launch(impl_.get(), s, kAttentionBackwardDkv, Space::kRows, key_rows, q, k, v, out,
                      dout, lse, delta, dq, dk, dv, batch, seq, heads, kv_heads, head_dim, scale,
                      dtype);
}

// ---- MLP activations -----------------------------------------------------------------------

Status GptKernels::gelu_forward(const hal::Stream& s, const void* x, void* y, uint64_t n,
                                uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kGeluForward, Space::kItems, n, x, y, n, dtype);
}

Status GptKernels::gelu_backward(const hal::Stream& s, const void* x, const void* dy, void* dx,
                                 uint64_t n, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kGeluBackward, Space::kItems, n, x, dy, dx, n, dtype);
}

Status GptKernels::swiglu_forward(const hal::Stream& s, const void* gate, const void* up, void* y,
                                  uint64_t n, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kSwigluForward, Space::kItems, n, gate, up, y, n, dtype);
}

Status GptKernels::swiglu_backward(const hal::Stream& s, const void* gate, const void* up,
                                   const void* dy, void* dgate, void* dup, uint64_t n,
                                   uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kSwigluBackward, Space::kItems, n, gate, up, dy, dgate, dup,
                      n, dtype);
}

// ---- cross-entropy -------------------------------------------------------------------------

Status GptKernels::xent_max(const hal::Stream& s, const float* logits, float* row_max,
                            uint64_t rows, uint64_t vocab_local) const {
  return Impl::launch(impl_.get(), s, kXentMax, Space::kRows, rows, logits, row_max, rows,
                      vocab_local);
}

Status GptKernels::xent_sum_exp(const hal::Stream& s, const float* logits, const float* row_max,
                                float* sum_exp, uint64_t rows, uint64_t vocab_local) const {
  return Impl::launch(impl_.get(), s, kXentSumExp, Space::kRows, rows, logits, row_max, sum_exp,
                      rows, vocab_local);
}

Status GptKernels::xent_target(const hal::Stream& s, const float* logits, const int32_t* targets,
                               float* target_logit, uint64_t rows, int64_t vocab_begin,
                               uint64_t vocab_local) const {
  return Impl::launch(impl_.get(), s, kXentTarget, Space::kItems, rows, logits, targets,
                      target_logit, rows, vocab_begin, vocab_local);
}

Status GptKernels::xent_loss(const hal::Stream& s, const float* row_max, const float* sum_exp,
                             const float* target_logit, float* loss, uint64_t rows) const {
  return Impl::launch(impl_.get(), s, kXentLoss, Space::kItems, rows, row_max, sum_exp,
                      target_logit, loss, rows);
}

Status GptKernels::xent_backward(const hal::Stream& s, const float* logits, const int32_t* targets,
                                 const float* row_max, const float* sum_exp, void* dlogits,
                                 uint64_t rows, int64_t vocab_begin, uint64_t vocab_local,
                                 float scale, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kXentBackward, Space::kRows, rows, logits, targets, row_max,
                      sum_exp, dlogits, rows, vocab_begin, vocab_local, scale, dtype);
}

// ---- mixture of experts --------------------------------------------------------------------

Status GptKernels::router_forward(const hal::Stream& s, const float* logits, float* probs,
                                  int32_t* top_index, float* top_weight, uint64_t tokens,
                                  uint64_t experts, uint64_t top_k, uint32_t normalize) const {
  return Impl::launch(impl_.get(), s, kRouterForward, Space::kItems, tokens, logits, probs,
                      top_index, top_weight, tokens, experts, top_k, normalize);
}

Status GptKernels::router_backward(const hal::Stream& s, const float* probs,
                                   const int32_t* top_index, const float* dtop_weight,
                                   const float* fraction, float* dlogits, uint64_t tokens,
                                   uint64_t experts, uint64_t top_k, uint32_t normalize,
                                   float aux_coef) const {
  return Impl::launch(impl_.get(), s, kRouterBackward, Space::kItems, tokens, probs, top_index,
                      dtop_weight, fraction, dlogits, tokens, experts, top_k, normalize, aux_coef);
}

Status GptKernels::gather_rows(const hal::Stream& s, const void* src, const int32_t* index,
                               void* dst, uint64_t rows, uint64_t cols, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kGatherRows, Space::kItems, rows * cols, src, index, dst,
                      rows, cols, dtype);
}

Status GptKernels::combine_rows(const hal::Stream& s, const void* expert_out, const int32_t* slot,
                                const float* weight, void* out, uint64_t tokens, uint64_t top_k,
                                uint64_t cols, uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kCombineRows, Space::kItems, tokens * cols, expert_out, slot,
                      weight, out, tokens, top_k, cols, dtype);
}

Status GptKernels::combine_backward(const hal::Stream& s, const void* dout, const void* expert_out,
                                    const int32_t* slot, const float* weight, void* dexpert_out,
                                    float* dweight, uint64_t tokens, uint64_t top_k, uint64_t cols,
                                    uint32_t dtype) const {
  return Impl::launch(impl_.get(), s, kCombineBackward, Space::kRows, tokens * top_k, dout,
                      expert_out, slot, weight, dexpert_out, dweight, tokens, top_k, cols, dtype);
}

// ---- optimizer -----------------------------------------------------------------------------

Status GptKernels::sum_squares(const hal::Stream& s, const float* x, float* sum_sq,
                               uint64_t n) const {
  return Impl::launch(impl_.get(), s, kSumSquares, Space::kSingle, n, x, sum_sq, n);
}

Status GptKernels::adamw(const hal::Stream& s, float* param, const float* grad, float* m, float* v,
                         void* copy, uint64_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float bias1, float bias2, float grad_scale,
                         uint32_t copy_dtype) const {
  return Impl::launch(impl_.get(), s, kAdamw, Space::kItems, n, param, grad, m, v, copy, n, lr,
                      beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale, copy_dtype);
}

}  // namespace tessera::gpt
