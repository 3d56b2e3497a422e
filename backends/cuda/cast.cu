// dtype conversion, one kernel per (source, destination) pair. Conversions follow backend_abi.h:
// floats round once to nearest even (f64 and integers reach f16/bf16 through a round-to-odd f32,
// which makes the final rounding the only one), float -> int truncates toward zero, saturates and
// maps NaN to 0, int -> int is modular (a C cast), a dtype to itself copies the
// bits.
#include <cstdint>
#include <type_traits>

#include "kernels.h"
#include "numerics.cuh"

namespace tessera::cuda::kernels {
namespace {

template <typename From, typename To>
__global__ void cast_kernel(typename To::S* dst, const typename From::S* src, size_t count) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = Dest<To>::from(Source<From>::value(src[i]));
  }
}

template <typename From, typename To>
rtError_t launch(void* dst, const void* src, size_t count, int blocks_hint, rtStream_t stream) {
  if constexpr (std::is_same<From, To>::value) {
    // Identity: the bits are copied, NaN payloads included.
    if (dst == src) return rtSuccess;
    return rtMemcpyAsync(dst, src, count * sizeof(typename From::S), rtMemcpyDefault, stream);
  } else {
    constexpr int kThreads = 256;
    size_t blocks = (count + kThreads - 1) / kThreads;
    const size_t cap = size_t(blocks_hint > 0 ? blocks_hint : 80) * 8;
    if (blocks > cap) blocks = cap;
    cast_kernel<From, To><<<unsigned(blocks), kThreads, 0, stream>>>(
        static_cast<typename To::S*>(dst), static_cast<const typename From::S*>(src), count);
    return rtGetLastError();
  }
}

template <typename From>
rtError_t launch_to(void* dst, tsr_dtype to, const void* src, size_t count, int blocks_hint,
                    rtStream_t stream) {
  switch (to) {
    case TSR_DTYPE_F32: return launch<From, F32>(dst, src, count, blocks_hint, stream);
    case TSR_DTYPE_F16: return launch<From, F16>(dst, src, count, blocks_hint, stream);
    case TSR_DTYPE_BF16: return launch<From, BF16>(dst, src, count, blocks_hint, stream);
    case TSR_DTYPE_F64: return launch<From, F64>(dst, src, count, blocks_hint, stream);
    case TSR_DTYPE_I32: return launch<From, I32>(dst, src, count, blocks_hint, stream);
    case TSR_DTYPE_I64: return launch<From, I64>(dst, src, count, blocks_hint, stream);
    default: return launch<From, U8>(dst, src, count, blocks_hint, stream);
  }
}

}  // namespace

rtError_t launch_cast(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                      size_t count, int blocks_hint, rtStream_t stream) {
  switch (src_dtype) {
    case TSR_DTYPE_F32: return launch_to<F32>(dst, dst_dtype, src, count, blocks_hint, stream);
    case TSR_DTYPE_F16: return launch_to<F16>(dst, dst_dtype, src, count, blocks_hint, stream);
    case TSR_DTYPE_BF16: return launch_to<BF16>(dst, dst_dtype, src, count, blocks_hint, stream);
    case TSR_DTYPE_F64: return launch_to<F64>(dst, dst_dtype, src, count, blocks_hint, stream);
    case TSR_DTYPE_I32: return launch_to<I32>(dst, dst_dtype, src, count, blocks_hint, stream);
    case TSR_DTYPE_I64: return launch_to<I64>(dst, dst_dtype, src, count, blocks_hint, stream);
    default: return launch_to<U8>(dst, dst_dtype, src, count, blocks_hint, stream);
  }
}

}  // namespace tessera::cuda::kernels
