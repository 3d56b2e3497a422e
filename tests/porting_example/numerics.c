/*
 * Reductions and casts of the porting example, written straight from the rules in backend_abi.h:
 *   - f16/bf16 accumulate in f32 and round once, to nearest even; f32 in f32, f64 in f64, in
 *     source order 0..N-1; float AVG is the sum divided once by N;
 *   - integers wrap; integer AVG sums in 64 bits and divides truncating toward zero;
 *   - MIN/MAX on floats propagate NaN;
 *   - casts round to nearest even exactly once (f64 and i64 reach f16/bf16 through f32 rounded
 *     "to odd", which makes the second rounding exact), float->int truncates and saturates,
 *     NaN->int is 0, int->int keeps the low bits.
 * Plain loops: a real accelerator does this in device kernels; the semantics are what matters.
 */
#include "numerics.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

size_t pe_dtype_size(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return 4;
    case TSR_DTYPE_F16: return 2;
    case TSR_DTYPE_BF16: return 2;
    case TSR_DTYPE_F64: return 8;
    case TSR_DTYPE_I32: return 4;
    case TSR_DTYPE_I64: return 8;
    case TSR_DTYPE_U8: return 1;
    default: return 0;
  }
}

static int is_float(tsr_dtype dtype) {
  return dtype == TSR_DTYPE_F32 || dtype == TSR_DTYPE_F16 || dtype == TSR_DTYPE_BF16 ||
         dtype == TSR_DTYPE_F64;
}

/* ---- half-precision encodings ------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

static float f32_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) { /* zero or subnormal: mantissa x 2^-24, exact in f32 */
    const float magnitude = (float)mantissa * 0x1p-24f;
    return f32_from_bits(f32_bits(magnitude) | sign);
  }
  if (exponent == 31) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static uint16_t f32_to_f16(float f) {
  const uint32_t bits = f32_bits(f);
  const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) { /* NaN stays NaN (quiet), keeping the top payload bits */
    return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (magnitude < 0x38800000u) { /* below 2^-14: f16 subnormal or zero */
    /* |f| * 2^24 < 1024 is exact; adding and removing 2^23 rounds it to an integer, RNE. */
    const float scaled = f32_from_bits(magnitude) * 0x1p24f;
    volatile float shifted = scaled + 0x1p23f;
    return (uint16_t)(sign | (uint16_t)(shifted - 0x1p23f));
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return (uint16_t)(sign | ((rounded - (112u << 23)) >> 13));
}

static float bf16_to_f32(uint16_t b) {
  return f32_from_bits((uint32_t)b << 16);
}

static uint16_t f32_to_bf16(float f) {
  const uint32_t bits = f32_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* NaN */
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* f64 -> f32 rounded to odd: truncate, then set the last bit if anything was lost. With 24 bits
 * against f16's 11 and bf16's 8, a following round-to-nearest-even equals one direct rounding. */
static float f64_to_f32_odd(double d) {
  if (isnan(d) || isinf(d)) return (float)d;
  float f = (float)d;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  if ((double)f != d) f = f32_from_bits(f32_bits(f) | 1u);
  return f;
}

/* int64 -> f32 rounded to odd (integers above 2^24 lose bits). */
static float i64_to_f32_odd(int64_t v) {
  const uint64_t magnitude = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  if (magnitude < (1ull << 24)) return (float)v;
  const int shift = 40 - __builtin_clzll(magnitude); /* bits below the top 24 */
  uint64_t top = magnitude >> shift;
  if (magnitude & ((1ull << shift) - 1)) top |= 1;
  const float f = ldexpf((float)top, shift); /* exact: top < 2^24 */
  return v < 0 ? -f : f;
}

/* ---- element access ----------------------------------------------------------------------- */

static double load_float(const void* p, size_t i, tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return ((const float*)p)[i];
    case TSR_DTYPE_F16: return f16_to_f32(((const uint16_t*)p)[i]);
    case TSR_DTYPE_BF16: return bf16_to_f32(((const uint16_t*)p)[i]);
    default: return ((const double*)p)[i];
  }
}

static int64_t load_int(const void* p, size_t i, tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_I32: return ((const int32_t*)p)[i];
    case TSR_DTYPE_U8: return ((const uint8_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}

/* Stores the low bits of v (modular, as a C cast to the unsigned type of that width). */
static void store_int(void* p, size_t i, tsr_dtype dtype, uint64_t v) {
  switch (dtype) {
    case TSR_DTYPE_I32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case TSR_DTYPE_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    default: ((uint64_t*)p)[i] = v; break;
  }
}

/* Stores an f32 accumulator into f32/f16/bf16, rounding once. */
static void store_from_f32(void* p, size_t i, tsr_dtype dtype, float v) {
  switch (dtype) {
    case TSR_DTYPE_F16: ((uint16_t*)p)[i] = f32_to_f16(v); break;
    case TSR_DTYPE_BF16: ((uint16_t*)p)[i] = f32_to_bf16(v); break;
    default: ((float*)p)[i] = v; break;
  }
}

/* ---- reductions --------------------------------------------------------------------------- */

static float combine_f32(float acc, float v, tsr_reduce_op op) {
  switch (op) {
    case TSR_REDUCE_PROD: return acc * v;
    case TSR_REDUCE_MIN: return (isnan(acc) || isnan(v)) ? NAN : (v < acc ? v : acc);
    case TSR_REDUCE_MAX: return (isnan(acc) || isnan(v)) ? NAN : (v > acc ? v : acc);
    default: return acc + v; /* SUM, AVG */
  }
}

static double combine_f64(double acc, double v, tsr_reduce_op op) {
  switch (op) {
    case TSR_REDUCE_PROD: return acc * v;
    case TSR_REDUCE_MIN: return (isnan(acc) || isnan(v)) ? NAN : (v < acc ? v : acc);
    case TSR_REDUCE_MAX: return (isnan(acc) || isnan(v)) ? NAN : (v > acc ? v : acc);
    default: return acc + v;
  }
}

void pe_reduce(void* dst, const void* const* srcs, int n, size_t count, tsr_dtype dtype,
               tsr_reduce_op op) {
  /* Every source element is read before dst[i] is written, so dst may alias a source. */
  for (size_t i = 0; i < count; ++i) {
    if (dtype == TSR_DTYPE_F64) {
      double acc = load_float(srcs[0], i, dtype);
      for (int s = 1; s < n; ++s) acc = combine_f64(acc, load_float(srcs[s], i, dtype), op);
      if (op == TSR_REDUCE_AVG) acc /= (double)n;
      ((double*)dst)[i] = acc;
    } else if (is_float(dtype)) { /* f32, f16, bf16: accumulate in f32 */
      float acc = (float)load_float(srcs[0], i, dtype);
      for (int s = 1; s < n; ++s) acc = combine_f32(acc, (float)load_float(srcs[s], i, dtype), op);
      if (op == TSR_REDUCE_AVG) acc /= (float)n;
      store_from_f32(dst, i, dtype, acc);
    } else { /* integers: wrap in 64 bits, keep the low bits */
      uint64_t wrapped = (uint64_t)load_int(srcs[0], i, dtype);
      int64_t extreme = load_int(srcs[0], i, dtype);
      for (int s = 1; s < n; ++s) {
        const int64_t v = load_int(srcs[s], i, dtype);
        if (op == TSR_REDUCE_PROD)
          wrapped *= (uint64_t)v;
        else if (op == TSR_REDUCE_MIN)
          extreme = v < extreme ? v : extreme;
        else if (op == TSR_REDUCE_MAX)
          extreme = v > extreme ? v : extreme;
        else
          wrapped += (uint64_t)v; /* SUM, AVG */
      }
      if (op == TSR_REDUCE_MIN || op == TSR_REDUCE_MAX) wrapped = (uint64_t)extreme;
      if (op == TSR_REDUCE_AVG) wrapped = (uint64_t)((int64_t)wrapped / n); /* truncates */
      store_int(dst, i, dtype, wrapped);
    }
  }
}

/* ---- casts -------------------------------------------------------------------------------- */

static void integer_limits(tsr_dtype dtype, int64_t* lo, int64_t* hi) {
  switch (dtype) {
    case TSR_DTYPE_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case TSR_DTYPE_U8: *lo = 0, *hi = UINT8_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

static int64_t float_to_int(double v, tsr_dtype dtype) {
  if (isnan(v)) return 0;
  int64_t lo, hi;
  integer_limits(dtype, &lo, &hi);
  const double t = trunc(v);
  if (t >= 0x1p63 || t >= (double)hi) return hi; /* (double)INT64_MAX is 2^63 */
  if (t <= (double)lo) return lo;
  return (int64_t)t;
}

/* One element of src (float or int) to a float dtype, rounding once. */
static void store_float_from(void* dst, size_t i, tsr_dtype dst_dtype, const void* src,
                             tsr_dtype src_dtype) {
  if (dst_dtype == TSR_DTYPE_F64) {
    ((double*)dst)[i] =
        is_float(src_dtype) ? load_float(src, i, src_dtype) : (double)load_int(src, i, src_dtype);
    return;
  }
  float narrow; /* exact, or (for f16/bf16 destinations) rounded to odd */
  if (src_dtype == TSR_DTYPE_F64) {
    const double d = ((const double*)src)[i];
    narrow = dst_dtype == TSR_DTYPE_F32 ? (float)d : f64_to_f32_odd(d);
  } else if (is_float(src_dtype)) {
    narrow = (float)load_float(src, i, src_dtype); /* f32/f16/bf16 are exact in f32 */
  } else {
    const int64_t v = load_int(src, i, src_dtype);
    narrow = dst_dtype == TSR_DTYPE_F32 ? (float)v : i64_to_f32_odd(v);
  }
  store_from_f32(dst, i, dst_dtype, narrow);
}

void pe_cast(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (is_float(dst_dtype)) {
      store_float_from(dst, i, dst_dtype, src, src_dtype);
    } else if (is_float(src_dtype)) {
      store_int(dst, i, dst_dtype,
                (uint64_t)float_to_int(load_float(src, i, src_dtype), dst_dtype));
    } else {
      store_int(dst, i, dst_dtype, (uint64_t)load_int(src, i, src_dtype));
    }
  }
}
