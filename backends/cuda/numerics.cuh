// Element formats for the kernels: how each tsr_dtype is stored, loaded into its
// accumulator type and rounded back, written from the IEEE definitions the ABI prescribes
// (round to nearest even, and round-to-odd where a conversion would otherwise round twice).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tessera/hal/backend_abi.h"

namespace tessera::cuda::kernels {

// The few device intrinsics the formats use, with host equivalents, so that the same code also
// runs on the CPU (tests/cuda_shim/cuda_numerics_test.cc checks it against the CTS reference).
#if defined(__CUDACC__) || defined(__HIPCC__)  // nvcc, or hipcc (backends/hip)
#define TSR_HD __host__ __device__
#else
#define TSR_HD
#endif

TSR_HD inline uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__float_as_int(f));
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
#endif
}
TSR_HD inline float bits_to_f32(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(int(b));
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}
// Host conversions round to nearest even (the default mode); truncation is derived from them.
TSR_HD inline float double2float_rn(double d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(d);
#else
  return static_cast<float>(d);
#endif
}
TSR_HD inline float ll2float_rn(int64_t x) {
#if defined(__CUDA_ARCH__)
  return __ll2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}
TSR_HD inline double ll2double_rn(int64_t x) {
#if defined(__CUDA_ARCH__)
  return __ll2double_rn(x);
#else
  return static_cast<double>(x);
#endif
}
TSR_HD inline float double2float_rz(double d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rz(d);
#else
  float f = static_cast<float>(d);
  if (d == d && !std::isinf(d) && std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return f;
#endif
}
TSR_HD inline float ll2float_rz(int64_t x) {
#if defined(__CUDA_ARCH__)
  return __ll2float_rz(x);
#else
  float f = static_cast<float>(x);
  const long double exact = static_cast<long double>(x);  // 64-bit significand: exact
  if (std::fabs(static_cast<long double>(f)) > std::fabs(exact)) f = std::nextafter(f, 0.0f);
  return f;
#endif
}

struct F32 {
  using S = float;
  using A = float;
  static constexpr bool kFloat = true;
  TSR_HD static A load(S x) { return x; }
  TSR_HD static S store(A x) { return x; }
};
struct F64 {
  using S = double;
  using A = double;
  static constexpr bool kFloat = true;
  TSR_HD static A load(S x) { return x; }
  TSR_HD static S store(A x) { return x; }
};
struct F16 {
  using S = uint16_t;
  using A = float;
  static constexpr bool kFloat = true;
  TSR_HD static A load(S x) { return __half2float(__ushort_as_half(x)); }
  TSR_HD static S store(A x) { return __half_as_ushort(__float2half_rn(x)); }
};
struct BF16 {
  using S = uint16_t;
  using A = float;
  static constexpr bool kFloat = true;
  TSR_HD static A load(S x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
  TSR_HD static S store(A x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct I32 {
  using S = int32_t;
  static constexpr bool kFloat = false;
};
struct I64 {
  using S = int64_t;
  static constexpr bool kFloat = false;
};
struct U8 {
  using S = uint8_t;
  static constexpr bool kFloat = false;
};

// Round-to-odd narrowing to f32: truncate, then set the last bit if anything was lost. A later
// round-to-nearest-even to f16/bf16 (at least 2 bits narrower) then equals a single rounding of
// the original value, which a plain double -> float -> half chain does not.
TSR_HD inline float to_f32_odd(double d) {
  if (d != d) return bits_to_f32(0x7fc00000u);
  float f = double2float_rz(d);
  if (double(f) != d) f = bits_to_f32(f32_to_bits(f) | 1u);
  return f;
}
TSR_HD inline float to_f32_odd(int64_t x) {
  float f = ll2float_rz(x);
  if (static_cast<int64_t>(f) != x) f = bits_to_f32(f32_to_bits(f) | 1u);
  return f;
}

// Float to integer: truncate toward zero, saturate, NaN -> 0.
TSR_HD inline int64_t to_i64(double d) {
  if (d != d) return 0;
  const double t = trunc(d);
  if (t >= 9223372036854775808.0) return INT64_MAX;
  if (t < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(t);
}
TSR_HD inline int32_t to_i32(double d) {
  if (d != d) return 0;
  const double t = trunc(d);
  if (t >= 2147483647.0) return INT32_MAX;
  if (t <= -2147483648.0) return INT32_MIN;
  return static_cast<int32_t>(t);
}
TSR_HD inline uint8_t to_u8(double d) {
  if (d != d) return 0;
  const double t = trunc(d);
  if (t >= 255.0) return 255;
  if (t <= 0.0) return 0;
  return static_cast<uint8_t>(t);
}

// ---- reductions -------------------------------------------------------------------------------

template <typename T>
TSR_HD inline T nan_min(T a, T b) {  // NaN if either is NaN, else the smaller (a on ties)
  return a != a ? a : ((b < a || b != b) ? b : a);
}
template <typename T>
TSR_HD inline T nan_max(T a, T b) {
  return a != a ? a : ((b > a || b != b) ? b : a);
}

template <typename T>
struct Unsigned {
  using type = uint32_t;  // uint8_t wraps identically when computed in 32 bits and truncated
};
template <>
struct Unsigned<int64_t> {
  using type = uint64_t;
};

// How one (dtype, op) starts, combines and finishes an accumulator.
template <typename D, int Op, bool = D::kFloat>
struct Reducer;

template <typename D, int Op>
struct Reducer<D, Op, true> {
  using S = typename D::S;
  using A = typename D::A;
  TSR_HD static A init(S x) { return D::load(x); }
  TSR_HD static A combine(A acc, S x) {
    const A v = D::load(x);
    if constexpr (Op == TSR_REDUCE_PROD) {
      return acc * v;
    } else if constexpr (Op == TSR_REDUCE_MIN) {
      return nan_min(acc, v);
    } else if constexpr (Op == TSR_REDUCE_MAX) {
      return nan_max(acc, v);
    } else {
      return acc + v;  // SUM, AVG
    }
  }
  TSR_HD static S finish(A acc, int n) { return D::store(Op == TSR_REDUCE_AVG ? acc / A(n) : acc); }
};

template <typename D, int Op>
struct Reducer<D, Op, false> {
  using S = typename D::S;
  using U = typename Unsigned<S>::type;
  // AVG sums in 64 bits; MIN/MAX compare in the signedness of S; SUM/PROD wrap in U.
  using A = typename std::conditional<
      Op == TSR_REDUCE_AVG, uint64_t,
      typename std::conditional<Op == TSR_REDUCE_MIN || Op == TSR_REDUCE_MAX, S, U>::type>::type;
  TSR_HD static A init(S x) {
    if constexpr (Op == TSR_REDUCE_AVG) {
      return A(static_cast<int64_t>(x));  // sign-extended, then 64-bit wrap-around
    } else {
      return A(x);
    }
  }
  TSR_HD static A combine(A acc, S x) {
    if constexpr (Op == TSR_REDUCE_PROD) {
      return A(acc * A(x));
    } else if constexpr (Op == TSR_REDUCE_MIN) {
      return x < acc ? A(x) : acc;
    } else if constexpr (Op == TSR_REDUCE_MAX) {
      return x > acc ? A(x) : acc;
    } else if constexpr (Op == TSR_REDUCE_AVG) {
      return acc + A(static_cast<int64_t>(x));
    } else {
      return A(acc + A(x));
    }
  }
  TSR_HD static S finish(A acc, int n) {
    if constexpr (Op == TSR_REDUCE_AVG) {
      return S(static_cast<int64_t>(acc) / int64_t(n));  // truncates toward zero
    } else {
      return S(acc);
    }
  }
};

// ---- casts ------------------------------------------------------------------------------------

// The exact value of a source element, as the widest type of its family.
template <typename D>
struct Source;
template <>
struct Source<F32> {
  TSR_HD static double value(float x) { return x; }
};
template <>
struct Source<F64> {
  TSR_HD static double value(double x) { return x; }
};
template <>
struct Source<F16> {
  TSR_HD static double value(uint16_t x) { return F16::load(x); }
};
template <>
struct Source<BF16> {
  TSR_HD static double value(uint16_t x) { return BF16::load(x); }
};
template <>
struct Source<I32> {
  TSR_HD static int64_t value(int32_t x) { return x; }
};
template <>
struct Source<I64> {
  TSR_HD static int64_t value(int64_t x) { return x; }
};
template <>
struct Source<U8> {
  TSR_HD static int64_t value(uint8_t x) { return x; }
};

// Narrow a value that is exact as double (every float source) or int64 (every integer source).
template <typename D>
struct Dest;
template <>
struct Dest<F64> {
  TSR_HD static double from(double v) { return v; }
  TSR_HD static double from(int64_t v) { return ll2double_rn(v); }
};
template <>
struct Dest<F32> {
  TSR_HD static float from(double v) { return double2float_rn(v); }
  TSR_HD static float from(int64_t v) { return ll2float_rn(v); }
};
template <>
struct Dest<F16> {
  TSR_HD static uint16_t from(double v) { return F16::store(to_f32_odd(v)); }
  TSR_HD static uint16_t from(int64_t v) { return F16::store(to_f32_odd(v)); }
};
template <>
struct Dest<BF16> {
  TSR_HD static uint16_t from(double v) { return BF16::store(to_f32_odd(v)); }
  TSR_HD static uint16_t from(int64_t v) { return BF16::store(to_f32_odd(v)); }
};
template <>
struct Dest<I32> {
  TSR_HD static int32_t from(double v) { return to_i32(v); }
  // Integer to integer is modular, as a C cast (backend_abi.h).
  TSR_HD static int32_t from(int64_t v) { return int32_t(uint32_t(uint64_t(v))); }
};
template <>
struct Dest<I64> {
  TSR_HD static int64_t from(double v) { return to_i64(v); }
  TSR_HD static int64_t from(int64_t v) { return v; }
};
template <>
struct Dest<U8> {
  TSR_HD static uint8_t from(double v) { return to_u8(v); }
  TSR_HD static uint8_t from(int64_t v) { return uint8_t(uint64_t(v)); }  // modular
};

}  // namespace tessera::cuda::kernels
