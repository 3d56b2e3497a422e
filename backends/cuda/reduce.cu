// N-source elementwise reduction. One kernel per (dtype, operator): each thread combines the
// sources of a 16-byte group of elements (one vector load per source) when every pointer is
// 16-byte aligned, else one element; a grid-stride loop covers the array. Accumulation follows
// backend_abi.h bit for bit: f16/bf16 in f32 rounded once, sources in order 0..N-1, integers
// wrapping, integer AVG in 64 bits truncating toward zero, MIN/MAX propagating NaN.
#include <cstdint>
#include <type_traits>

#include "kernels.h"
#include "numerics.cuh"

namespace tessera::cuda::kernels {
namespace {

struct Sources {
  const void* p[kMaxSources];
};

template <typename D, int Op>
__global__ void reduce_kernel(typename D::S* dst, Sources srcs, int n, size_t count,
                              bool vectorised) {
  using S = typename D::S;
  using R = Reducer<D, Op>;
  constexpr int kV = 16 / sizeof(S);
  union Pack {
    uint4 v;
    S e[kV];
  };
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vectorised) {
    const size_t groups = count / kV;
    for (size_t g = first; g < groups; g += stride) {
      typename R::A acc[kV];
      // The first two loads are issued together: two requests in flight per thread keep a
      // 2-source reduction (the common case) bandwidth-bound rather than latency-bound.
      Pack p, q;
      p.v = static_cast<const uint4*>(srcs.p[0])[g];
      if (n > 1) q.v = static_cast<const uint4*>(srcs.p[1])[g];
#pragma unroll
      for (int j = 0; j < kV; ++j) acc[j] = R::init(p.e[j]);
      if (n > 1) {
#pragma unroll
        for (int j = 0; j < kV; ++j) acc[j] = R::combine(acc[j], q.e[j]);
      }
      for (int s = 2; s < n; ++s) {
        p.v = static_cast<const uint4*>(srcs.p[s])[g];
#pragma unroll
        for (int j = 0; j < kV; ++j) acc[j] = R::combine(acc[j], p.e[j]);
      }
#pragma unroll
      for (int j = 0; j < kV; ++j) p.e[j] = R::finish(acc[j], n);
      reinterpret_cast<uint4*>(dst)[g] = p.v;
    }
    done = groups * kV;
  }
  for (size_t i = done + first; i < count; i += stride) {
    typename R::A acc = R::init(static_cast<const S*>(srcs.p[0])[i]);
    for (int s = 1; s < n; ++s) acc = R::combine(acc, static_cast<const S*>(srcs.p[s])[i]);
    dst[i] = R::finish(acc, n);
  }
}

template <typename D, int Op>
rtError_t launch(void* dst, const Sources& srcs, int n, size_t count, int blocks_hint,
                 rtStream_t stream) {
  using S = typename D::S;
  bool aligned = (reinterpret_cast<uintptr_t>(dst) % 16) == 0;
  for (int s = 0; s < n; ++s) aligned = aligned && reinterpret_cast<uintptr_t>(srcs.p[s]) % 16 == 0;
  constexpr int kThreads = 256;
  const size_t per_thread = aligned ? 16 / sizeof(S) : 1;
  const size_t items = (count + per_thread - 1) / per_thread;
  size_t blocks = (items + kThreads - 1) / kThreads;
  const size_t cap = size_t(blocks_hint > 0 ? blocks_hint : 80) * 8;
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  reduce_kernel<D, Op>
      <<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<S*>(dst), srcs, n, count, aligned);
  return rtGetLastError();
}

template <typename D>
rtError_t launch_op(void* dst, const Sources& srcs, int n, size_t count, tsr_reduce_op op,
                    int blocks_hint, rtStream_t stream) {
  switch (op) {
    case TSR_REDUCE_SUM: return launch<D, TSR_REDUCE_SUM>(dst, srcs, n, count, blocks_hint, stream);
    case TSR_REDUCE_PROD:
      return launch<D, TSR_REDUCE_PROD>(dst, srcs, n, count, blocks_hint, stream);
    case TSR_REDUCE_MIN: return launch<D, TSR_REDUCE_MIN>(dst, srcs, n, count, blocks_hint, stream);
    case TSR_REDUCE_MAX: return launch<D, TSR_REDUCE_MAX>(dst, srcs, n, count, blocks_hint, stream);
    default: return launch<D, TSR_REDUCE_AVG>(dst, srcs, n, count, blocks_hint, stream);
  }
}

}  // namespace

rtError_t launch_reduce(void* dst, const void* const* srcs, int num_srcs, size_t count,
                        tsr_dtype dtype, tsr_reduce_op op, int blocks_hint, rtStream_t stream) {
  Sources sources{};
  for (int s = 0; s < num_srcs; ++s) sources.p[s] = srcs[s];
  switch (dtype) {
    case TSR_DTYPE_F32:
      return launch_op<F32>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    case TSR_DTYPE_F16:
      return launch_op<F16>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    case TSR_DTYPE_BF16:
      return launch_op<BF16>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    case TSR_DTYPE_F64:
      return launch_op<F64>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    case TSR_DTYPE_I32:
      return launch_op<I32>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    case TSR_DTYPE_I64:
      return launch_op<I64>(dst, sources, num_srcs, count, op, blocks_hint, stream);
    default: return launch_op<U8>(dst, sources, num_srcs, count, op, blocks_hint, stream);
  }
}

}  // namespace tessera::cuda::kernels
