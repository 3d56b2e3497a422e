// OpenCL C helpers shared by reduce.cl and cast.cl: the 16-bit float conversions and the rounding
// helpers of backends/host/half.h, ported bit for bit so that the Level Zero kernels give the same
// results as the host backend (backend_abi.h semantics). Integer arithmetic and plain f32 adds
// only, so no cl_khr_fp16 is needed. TSR_FP64 (0 or 1) selects the module built: 1 holds only the
// kernels that touch f64 (cl_khr_fp64), so devices without f64 still load the other module.
#ifndef TESSERA_ZE_KERNELS_COMMON_H_
#define TESSERA_ZE_KERNELS_COMMON_H_

#ifndef TSR_FP64
#define TSR_FP64 0
#endif
#if TSR_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// tsr_reduce_op values (backend_abi.h).
#define TSR_SUM 0u
#define TSR_PROD 1u
#define TSR_MIN 2u
#define TSR_MAX 3u
#define TSR_AVG 4u

// The reduce_async sources, passed by value: device-visible addresses of up to 64 arrays.
typedef struct TsrSources {
  ulong address[64];
} TsrSources;

#define TSR_SOURCE(T, sources, k) ((global const T*)(sources).address[k])

// Every kernel walks its range with a grid stride, so any group count covers any count.
#define TSR_FOR_EACH(i, count) \
  for (ulong i = get_global_id(0); i < (count); i += get_global_size(0))

// f16 -> f32 is exact.
static inline float tsr_f16_to_f32(ushort h) {
  const uint sign = (uint)(h & 0x8000u) << 16;
  const uint shifted = (uint)(h & 0x7fffu) << 13;
  const uint exponent = shifted & 0x0f800000u;
  const uint normal = shifted + 0x38000000u;
  const uint inf_nan = shifted + 0x70000000u;
  // Zero/subnormal: 2^-14 * (1 + m/1024) - 2^-14, exact, both operands normal.
  const uint subnormal = as_uint(as_float(shifted + 0x38800000u) - 6.103515625e-05f);
  const uint magnitude = exponent == 0x0f800000u ? inf_nan : (exponent == 0u ? subnormal : normal);
  return as_float(sign | magnitude);
}

// f32 -> f16, round to nearest even; overflow gives infinity, NaN a quiet NaN (0x7e00 | sign).
static inline ushort tsr_f32_to_f16(float value) {
  const uint bits = as_uint(value);
  const uint sign = (bits >> 16) & 0x8000u;
  const uint magnitude = bits & 0x7fffffffu;
  const uint inf_nan = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Below 2^-14: adding 0.5 rounds to a multiple of 2^-24 (the f16 subnormal step), ties to even.
  const uint subnormal = as_uint(as_float(magnitude) + 0.5f) - 0x3f000000u;
  const uint odd = (magnitude >> 13) & 1u;
  const uint normal = (magnitude + 0xc8000fffu + odd) >> 13;  // wraps on purpose (rebias)
  const uint result =
      magnitude >= 0x47800000u ? inf_nan : (magnitude < 0x38800000u ? subnormal : normal);
  return (ushort)(result | sign);
}

// bf16 -> f32 is exact: bf16 is the top half of an f32.
static inline float tsr_bf16_to_f32(ushort h) {
  return as_float((uint)h << 16);
}

// f32 -> bf16, round to nearest even; NaN stays NaN (quietened, sign and top payload kept).
static inline ushort tsr_f32_to_bf16(float value) {
  const uint bits = as_uint(value);
  const uint rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint quiet_nan = (bits >> 16) | 0x0040u;
  return (ushort)((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// i64 -> f32 rounded to odd, so that one more rounding to f16/bf16 is correct (rounding to
// nearest twice is not). Exact below 2^24.
static inline float tsr_i64_to_f32_round_odd(long value) {
  const ulong magnitude = value < 0 ? (ulong)0 - (ulong)value : (ulong)value;
  if (magnitude < (1ul << 24)) return (float)value;
  const int shift = 64 - (int)clz(magnitude) - 24;  // keep 24 significant bits
  ulong kept = magnitude >> shift;
  kept |= (magnitude & ((1ul << shift) - 1ul)) != 0ul ? 1ul : 0ul;         // sticky bit
  const float result = (float)kept * as_float((uint)(127 + shift) << 23);  // exact
  return value < 0 ? -result : result;
}

#if TSR_FP64
// f64 -> f32 rounded to odd (see above).
static inline float tsr_f64_to_f32_round_odd(double value) {
  const float nearest = (float)value;
  const double back = (double)nearest;
  const bool inexact = back != value && value == value;  // NaN is never "inexact"
  const bool away = fabs(back) > fabs(value);
  const uint bits = as_uint(nearest) - ((inexact && away) ? 1u : 0u);
  return as_float(bits | (inexact ? 1u : 0u));
}
#endif

// MIN/MAX on floats: NaN if either is NaN, else the smaller/larger (the first on ties), as the
// host backend's nan_min/nan_max.
#define TSR_DEFINE_NAN_MIN_MAX(A)                    \
  static inline A tsr_nan_min_##A(A a, A b) {        \
    return a != a ? a : ((b < a || b != b) ? b : a); \
  }                                                  \
  static inline A tsr_nan_max_##A(A a, A b) {        \
    return a != a ? a : ((b > a || b != b) ? b : a); \
  }

// Float -> integer: truncate toward zero, saturate, NaN -> 0 (the host's float_to_int). LOW and
// PAST_TOP (the integer type's minimum and 2^bits of its range) are exact in F.
#define TSR_DEFINE_FLOAT_TO_INT(NAME, I, F, LOW, PAST_TOP, MAX) \
  static inline I NAME(F x) {                                   \
    const bool nan = x != x;                                    \
    F clamped = x < (F)(LOW) ? (F)(LOW) : x;                    \
    clamped = clamped >= (F)(PAST_TOP) ? (F)(LOW) : clamped;    \
    clamped = nan ? (F)0 : clamped;                             \
    I result = (I)clamped;                                      \
    result = x >= (F)(PAST_TOP) ? (I)(MAX) : result;            \
    return nan ? (I)0 : result;                                 \
  }

#endif  // TESSERA_ZE_KERNELS_COMMON_H_
