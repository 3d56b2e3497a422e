// The reduction and cast kernels (reduce.cu, cast.cu), callable from host code. Arguments are
// validated by compute.cc before these run; the device of `stream` must be current. Each returns
// the launch status.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime_names.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::cuda::kernels {

inline constexpr int kMaxSources = 64;

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) with the semantics of tsr_reduce_op; dst may be
// exactly one of the sources. `blocks_hint` is the device's SM count (sizes the grid).
rtError_t launch_reduce(void* dst, const void* const* srcs, int num_srcs, size_t count,
                        tsr_dtype dtype, tsr_reduce_op op, int blocks_hint, rtStream_t stream);

// dst[i] = convert(src[i]); src and dst must not overlap unless identical with equal sizes.
rtError_t launch_cast(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                      size_t count, int blocks_hint, rtStream_t stream);

#if TESSERA_CUDA_HAVE_BUSY_WAIT
// Occupies `stream` for `microseconds` with a one-thread kernel spinning on clock64, converted
// with the SM clock `clock_khz` (busy_wait.cu).
rtError_t launch_busy_wait(uint64_t microseconds, int clock_khz, rtStream_t stream);
#endif

}  // namespace tessera::cuda::kernels
