// The host-format image of the GPT kernels (TSR_MODULE_HOST_ELF): the table the host backend
// reads through tessera_host_module_v1. Each entry's argument sizes come from its C++ signature
// (host_kernels.h), so the table cannot disagree with the function it calls.
#include <cstdarg>
#include <cstdio>
#include <tuple>
#include <utility>

#include "host_kernels.h"
#include "kernel_support.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::gpt::host {
namespace {

thread_local const tsr_host_kernel_call* t_call = nullptr;
thread_local char t_message[512];

template <typename T>
T read_arg(const void* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

template <typename Fn>
struct Signature;
template <typename... Params>
struct Signature<const char* (*)(Params...)> {
  static constexpr size_t kCount = sizeof...(Params);
  static constexpr size_t kSizes[kCount == 0 ? 1 : kCount] = {sizeof(Params)...};

  template <size_t... I>
  static const char* call(const char* (*fn)(Params...), const void* const* args,
                          std::index_sequence<I...>) {
    return fn(read_arg<Params>(args[I])...);
  }
};

// The ABI entry of kernel `Fn`: unpacks the arguments by the kernel's parameter types (launch
// has already checked their count and sizes against the table) and passes its message on.
template <auto Fn>
int entry(const tsr_host_kernel_call* call, const char** message) {
  using Sig = Signature<decltype(Fn)>;
  set_current_call(call);
  const char* why = Sig::call(Fn, call->args, std::make_index_sequence<Sig::kCount>());
  set_current_call(nullptr);
  if (why == nullptr) return 0;
  *message = why;
  return 1;
}

#define TSR_GPT_KERNEL(name)                                            \
  tsr_host_kernel_desc {                                                \
    "tsr_gpt_" #name, entry<&name>, Signature<decltype(&name)>::kCount, \
        Signature<decltype(&name)>::kSizes                              \
  }

const tsr_host_kernel_desc kKernels[] = {
    TSR_GPT_KERNEL(add),
    TSR_GPT_KERNEL(bias_add),
    TSR_GPT_KERNEL(bias_grad),
    TSR_GPT_KERNEL(embed_forward),
    TSR_GPT_KERNEL(embed_backward),
    TSR_GPT_KERNEL(norm_forward),
    TSR_GPT_KERNEL(norm_backward_input),
    TSR_GPT_KERNEL(norm_backward_params),
    TSR_GPT_KERNEL(rope),
    TSR_GPT_KERNEL(attention_forward),
    TSR_GPT_KERNEL(attention_backward_delta),
    TSR_GPT_KERNEL(attention_backward_dq),
    TSR_GPT_KERNEL(attention_backward_dkv),
    TSR_GPT_KERNEL(gelu_forward),
    TSR_GPT_KERNEL(gelu_backward),
    TSR_GPT_KERNEL(swiglu_forward),
    TSR_GPT_KERNEL(swiglu_backward),
    TSR_GPT_KERNEL(xent_max),
    TSR_GPT_KERNEL(xent_sum_exp),
    TSR_GPT_KERNEL(xent_target),
    TSR_GPT_KERNEL(xent_loss),
    TSR_GPT_KERNEL(xent_backward),
    TSR_GPT_KERNEL(router_forward),
    TSR_GPT_KERNEL(router_backward),
    TSR_GPT_KERNEL(gather_rows),
    TSR_GPT_KERNEL(combine_rows),
    TSR_GPT_KERNEL(combine_backward),
    TSR_GPT_KERNEL(sum_squares),
    TSR_GPT_KERNEL(adamw),
};

const tsr_host_module kModule = {
    sizeof(tsr_host_module),
    TSR_BACKEND_ABI_MAJOR,
    sizeof kKernels / sizeof kKernels[0],
    kKernels,
};

}  // namespace

const tsr_host_kernel_call& current_call() {
  return *t_call;
}
void set_current_call(const tsr_host_kernel_call* call) {
  t_call = call;
}

const char* error(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_message, sizeof t_message, format, args);
  va_end(args);
  return t_message;
}

}  // namespace tessera::gpt::host

extern "C" __attribute__((visibility("default"))) const tsr_host_module* tessera_host_module_v1() {
  return &tessera::gpt::host::kModule;
}
