// The reduction kernels (reduce_range), shared by reduce_async and the collectives. Kernels work on
// blocks of kBlock elements: the sources are combined into an accumulator block that stays in L1,
// converted to the destination type in a second L1 block, and copied out by store_block (streaming
// stores for large outputs). Keeping the output in a private block means no kernel loop ever writes
// memory a source may alias, so in-place reduction needs no special case and every loop can be
// vectorised by the compiler.
#include "reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "dtype.h"
#include "half.h"
#include "half_block.h"
#include "store.h"

namespace tessera::host {
namespace {

constexpr size_t kBlock = 1024;  // elements per block: 8 KiB of f64 accumulators at most

// ---- element policies ------------------------------------------------------------------------
// A Spec says how one (dtype, op) pair loads a source element into its accumulator type A,
// combines two accumulators, and turns the final accumulator into the stored type S.

template <typename T>
inline T nan_min(T a, T b) {  // NaN if either is NaN, else the smaller (a on ties)
  return a != a ? a : ((b < a || b != b) ? b : a);
}
template <typename T>
inline T nan_max(T a, T b) {
  return a != a ? a : ((b > a || b != b) ? b : a);
}

struct Sum {
  template <typename A>
  static A apply(A a, A b) {
    return A(a + b);
  }
};
struct Prod {
  template <typename A>
  static A apply(A a, A b) {
    return A(a * b);
  }
};
struct Min {
  template <typename A>
  static A apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>)
      return nan_min(a, b);
    else
      return b < a ? b : a;
  }
};
struct Max {
  template <typename A>
  static A apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>)
      return nan_max(a, b);
    else
      return b > a ? b : a;
  }
};

// Storage codecs: how S is read as A and written back.
template <typename S, typename A>
struct CastCodec {
  static A load(S x) { return A(x); }
  static S store(A x) { return S(x); }
};

// SUM/PROD/MIN/MAX: combine with Op, store at the end. `Avg` false.
template <typename S_, typename A_, typename Codec, typename Op>
struct PlainSpec {
  using S = S_;
  using A = A_;
  static A load(S x) { return Codec::load(x); }
  static A combine(A a, A b) { return Op::apply(a, b); }
  static S finish(A a, int32_t) { return Codec::store(a); }
  static constexpr bool kHasFinish = false;  // for f32 storage, finish is the identity
};

// Float AVG: the sum in A, divided once by N, then stored (rounded for f16/bf16).
template <typename S_, typename A_, typename Codec>
struct FloatAvgSpec {
  using S = S_;
  using A = A_;
  static A load(S x) { return Codec::load(x); }
  static A combine(A a, A b) { return a + b; }
  static S finish(A a, int32_t n) { return Codec::store(a / A(n)); }
  static constexpr bool kHasFinish = true;
};

// Integer AVG: the sum in a wide type A (wrapping for i64), divided as a signed (or for u8,
// unsigned) value truncating toward zero.
template <typename S_, typename A_, typename Signed>
struct IntAvgSpec {
  using S = S_;
  using A = A_;
  static A load(S x) { return A(x); }
  static A combine(A a, A b) { return A(a + b); }
  static S finish(A a, int32_t n) { return S(Signed(a) / Signed(n)); }
};

// ---- block kernels ---------------------------------------------------------------------------
// Each loop is its own function (TESSERA_HOST_KERNEL: noinline, and cloned for AVX2) with
// __restrict parameters, so GCC knows sources and blocks do not alias and vectorises without
// runtime overlap checks. Inlined into the loop over sources, GCC fuses passes, loses __restrict
// and falls back to scalar code.

template <typename Spec>
TESSERA_HOST_KERNEL void first_pair(typename Spec::A* __restrict acc,
                                    const typename Spec::S* __restrict a,
                                    const typename Spec::S* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Spec::combine(Spec::load(a[i]), Spec::load(b[i]));
}

template <typename Spec>
TESSERA_HOST_KERNEL void accumulate(typename Spec::A* __restrict acc,
                                    const typename Spec::S* __restrict a, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Spec::combine(acc[i], Spec::load(a[i]));
}

// Two sources per pass over the accumulators: half the L1 traffic of two accumulate() calls,
// same order of operations.
template <typename Spec>
TESSERA_HOST_KERNEL void accumulate2(typename Spec::A* __restrict acc,
                                     const typename Spec::S* __restrict a,
                                     const typename Spec::S* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    acc[i] = Spec::combine(Spec::combine(acc[i], Spec::load(a[i])), Spec::load(b[i]));
  }
}

template <typename Spec>
TESSERA_HOST_KERNEL void last_into(typename Spec::S* __restrict out,
                                   const typename Spec::A* __restrict acc,
                                   const typename Spec::S* __restrict a, int32_t count, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = Spec::finish(Spec::combine(acc[i], Spec::load(a[i])), count);
}

template <typename Spec>
TESSERA_HOST_KERNEL void pair_into(typename Spec::S* __restrict out,
                                   const typename Spec::S* __restrict a,
                                   const typename Spec::S* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = Spec::finish(Spec::combine(Spec::load(a[i]), Spec::load(b[i])), 2);
  }
}

template <typename Spec>
TESSERA_HOST_KERNEL void single_into(typename Spec::S* __restrict out,
                                     const typename Spec::S* __restrict a, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Spec::finish(Spec::load(a[i]), 1);
}

template <typename Spec>
void reduce_kernel(void* dst, const void* const* srcs, int32_t num_srcs, size_t begin, size_t end,
                   bool streaming) {
  using S = typename Spec::S;
  using A = typename Spec::A;
  alignas(64) A acc[kBlock];
  alignas(64) S out[kBlock];
  auto src = [&](int32_t k, size_t at) { return static_cast<const S*>(srcs[k]) + at; };
  for (size_t at = begin; at < end; at += kBlock) {
    const size_t n = std::min(kBlock, end - at);
    if (num_srcs == 1) {
      single_into<Spec>(out, src(0, at), n);
    } else if (num_srcs == 2) {
      pair_into<Spec>(out, src(0, at), src(1, at), n);
    } else {
      first_pair<Spec>(acc, src(0, at), src(1, at), n);
      int32_t k = 2;
      for (; k + 2 < num_srcs; k += 2) accumulate2<Spec>(acc, src(k, at), src(k + 1, at), n);
      if (k + 1 < num_srcs) accumulate<Spec>(acc, src(k, at), n);
      last_into<Spec>(out, acc, src(num_srcs - 1, at), num_srcs, n);
    }
    store_block(static_cast<S*>(dst) + at, out, n * sizeof(S), streaming);
  }
}

using KernelFn = void (*)(void*, const void* const*, int32_t, size_t, size_t, bool);

// f16/bf16: each source block is widened to f32 (exact) by the block converters, which use the
// fastest instructions the CPU has; the f32 Spec combines; the result is rounded once to nearest
// even on the way out. Same results as a per-element kernel, but every loop is a plain f32 loop.
// kFusedLoad: widening is one shift (bf16), so it is fused into the combining loops; f16 widens
// whole blocks first (one F16C instruction per 8 elements, which GCC cannot emit per element).
struct F16Block {
  static constexpr bool kFusedLoad = false;
  static float load(uint16_t x) { return f16_to_f32(x); }
  static void widen(float* out, const uint16_t* in, size_t n) { widen_f16(out, in, n); }
  static void narrow(uint16_t* out, const float* in, size_t n) { narrow_f16(out, in, n); }
};
struct BF16Block {
  static constexpr bool kFusedLoad = true;
  static float load(uint16_t x) { return bf16_to_f32(x); }
  static void widen(float* out, const uint16_t* in, size_t n) { widen_bf16(out, in, n); }
  static void narrow(uint16_t* out, const float* in, size_t n) { narrow_bf16(out, in, n); }
};

template <typename Spec>
TESSERA_HOST_KERNEL void combine_f32(float* __restrict acc, const float* __restrict a, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Spec::combine(acc[i], a[i]);
}

template <typename Spec>
TESSERA_HOST_KERNEL void finish_f32(float* __restrict acc, int32_t count, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Spec::finish(acc[i], count);
}

// Spec32 combines f32 values; Elem is the same operation reading 16-bit storage directly.
template <typename Block, typename Spec32, typename Elem>
void reduce_kernel_half(void* dst, const void* const* srcs, int32_t num_srcs, size_t begin,
                        size_t end, bool streaming) {
  alignas(64) float acc[kBlock];
  alignas(64) float wide[kBlock];
  alignas(64) uint16_t out[kBlock];
  auto src = [&](int32_t k, size_t at) { return static_cast<const uint16_t*>(srcs[k]) + at; };
  for (size_t at = begin; at < end; at += kBlock) {
    const size_t n = std::min(kBlock, end - at);
    if (Block::kFusedLoad && num_srcs >= 2) {
      first_pair<Elem>(acc, src(0, at), src(1, at), n);
      int32_t k = 2;
      for (; k + 1 < num_srcs; k += 2) accumulate2<Elem>(acc, src(k, at), src(k + 1, at), n);
      if (k < num_srcs) accumulate<Elem>(acc, src(k, at), n);
    } else {
      Block::widen(acc, src(0, at), n);
      for (int32_t k = 1; k < num_srcs; ++k) {
        Block::widen(wide, src(k, at), n);
        combine_f32<Spec32>(acc, wide, n);
      }
    }
    if (Spec32::kHasFinish) finish_f32<Spec32>(acc, num_srcs, n);
    Block::narrow(out, acc, n);
    store_block(static_cast<uint16_t*>(dst) + at, out, n * sizeof(uint16_t), streaming);
  }
}

template <typename Block, typename Op>
constexpr KernelFn half_kernel_op() {
  return &reduce_kernel_half<Block, PlainSpec<float, float, CastCodec<float, float>, Op>,
                             PlainSpec<uint16_t, float, Block, Op>>;
}

template <typename Block>
constexpr KernelFn half_kernel(int op) {
  switch (op) {
    case TSR_REDUCE_SUM: return half_kernel_op<Block, Sum>();
    case TSR_REDUCE_PROD: return half_kernel_op<Block, Prod>();
    case TSR_REDUCE_MIN: return half_kernel_op<Block, Min>();
    case TSR_REDUCE_MAX: return half_kernel_op<Block, Max>();
    default:
      return &reduce_kernel_half<Block, FloatAvgSpec<float, float, CastCodec<float, float>>,
                                 PlainSpec<uint16_t, float, Block, Sum>>;
  }
}

// The five ops of one float type S accumulated in A through Codec.
template <typename S, typename A, typename Codec>
constexpr KernelFn float_kernel(int op) {
  switch (op) {
    case TSR_REDUCE_SUM: return &reduce_kernel<PlainSpec<S, A, Codec, Sum>>;
    case TSR_REDUCE_PROD: return &reduce_kernel<PlainSpec<S, A, Codec, Prod>>;
    case TSR_REDUCE_MIN: return &reduce_kernel<PlainSpec<S, A, Codec, Min>>;
    case TSR_REDUCE_MAX: return &reduce_kernel<PlainSpec<S, A, Codec, Max>>;
    default: return &reduce_kernel<FloatAvgSpec<S, A, Codec>>;
  }
}

// The five ops of one integer type S: SUM/PROD wrap in the unsigned type U, MIN/MAX compare in S,
// AVG sums in Wide and divides as WideSigned.
template <typename S, typename U, typename Wide, typename WideSigned>
constexpr KernelFn int_kernel(int op) {
  switch (op) {
    case TSR_REDUCE_SUM: return &reduce_kernel<PlainSpec<S, U, CastCodec<S, U>, Sum>>;
    case TSR_REDUCE_PROD: return &reduce_kernel<PlainSpec<S, U, CastCodec<S, U>, Prod>>;
    case TSR_REDUCE_MIN: return &reduce_kernel<PlainSpec<S, S, CastCodec<S, S>, Min>>;
    case TSR_REDUCE_MAX: return &reduce_kernel<PlainSpec<S, S, CastCodec<S, S>, Max>>;
    default: return &reduce_kernel<IntAvgSpec<S, Wide, WideSigned>>;
  }
}

KernelFn select_kernel(tsr_dtype dtype, tsr_reduce_op op) {
  switch (dtype) {
    case TSR_DTYPE_F32: return float_kernel<float, float, CastCodec<float, float>>(op);
    case TSR_DTYPE_F64: return float_kernel<double, double, CastCodec<double, double>>(op);
    case TSR_DTYPE_F16: return half_kernel<F16Block>(op);
    case TSR_DTYPE_BF16: return half_kernel<BF16Block>(op);
    // i32 AVG: 64 sources of |x| <= 2^31 sum below 2^37, exact in int64.
    case TSR_DTYPE_I32: return int_kernel<int32_t, uint32_t, int64_t, int64_t>(op);
    // i64 AVG: "accumulates in 64 bits": the 64-bit sum wraps, then divides as signed.
    case TSR_DTYPE_I64: return int_kernel<int64_t, uint64_t, uint64_t, int64_t>(op);
    // u8 AVG: 64 x 255 fits in 32 bits, so a 32-bit sum equals the 64-bit one and vectorises.
    case TSR_DTYPE_U8: return int_kernel<uint8_t, uint8_t, uint32_t, uint32_t>(op);
    default: return nullptr;
  }
}

}  // namespace

void reduce_range(void* dst, const void* const* srcs, int32_t num_srcs, size_t begin, size_t end,
                  tsr_dtype dtype, tsr_reduce_op op, bool streaming) {
  KernelFn kernel = select_kernel(dtype, op);
  if (kernel != nullptr) kernel(dst, srcs, num_srcs, begin, end, streaming);
}

}  // namespace tessera::host
