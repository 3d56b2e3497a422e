// cast_async kernels, one per (source, destination) pair of different dtypes, with the semantics
// of backend_abi.h and backends/host/cast.cc: floats round to nearest even (once: f64 and i64
// reach f16/bf16 through f32 rounded to odd), float -> int truncates toward zero and saturates,
// NaN -> int gives 0, int -> int wraps like a C cast.
//
//   cast_<from>_<to>(global To* dst, global const From* src, ulong count)
//
// dst may equal src when both dtypes have the same size (each work item reads, then writes its
// element); the backend copies other overlapping sources first. Built twice (common.h):
// TSR_FP64=1 holds the pairs with an f64 side, TSR_FP64=0 the others.
#include "common.h"

#define TSR_CAST(FROM, FT, TO, TT, EXPR)                                                  \
  kernel void cast_##FROM##_##TO(global TT* dst, global const FT* src, ulong count) {     \
    TSR_FOR_EACH(i, count) {                                                              \
      const FT x = src[i];                                                                \
      dst[i] = EXPR;                                                                      \
    }                                                                                     \
  }

TSR_DEFINE_FLOAT_TO_INT(tsr_f32_to_i32, int, float, -2147483648.0f, 2147483648.0f, INT_MAX)
TSR_DEFINE_FLOAT_TO_INT(tsr_f32_to_i64, long, float, -9223372036854775808.0f,
                        9223372036854775808.0f, LONG_MAX)
TSR_DEFINE_FLOAT_TO_INT(tsr_f32_to_u8, uchar, float, 0.0f, 256.0f, UCHAR_MAX)

#if TSR_FP64
TSR_DEFINE_FLOAT_TO_INT(tsr_f64_to_i32, int, double, -2147483648.0, 2147483648.0, INT_MAX)
TSR_DEFINE_FLOAT_TO_INT(tsr_f64_to_i64, long, double, -9223372036854775808.0,
                        9223372036854775808.0, LONG_MAX)
TSR_DEFINE_FLOAT_TO_INT(tsr_f64_to_u8, uchar, double, 0.0, 256.0, UCHAR_MAX)

// f64 -> any
TSR_CAST(f64, double, f32, float, (float)x)
TSR_CAST(f64, double, f16, ushort, tsr_f32_to_f16(tsr_f64_to_f32_round_odd(x)))
TSR_CAST(f64, double, bf16, ushort, tsr_f32_to_bf16(tsr_f64_to_f32_round_odd(x)))
TSR_CAST(f64, double, i32, int, tsr_f64_to_i32(x))
TSR_CAST(f64, double, i64, long, tsr_f64_to_i64(x))
TSR_CAST(f64, double, u8, uchar, tsr_f64_to_u8(x))
// any -> f64: exact, except i64 (correctly rounded)
TSR_CAST(f32, float, f64, double, (double)x)
TSR_CAST(f16, ushort, f64, double, (double)tsr_f16_to_f32(x))
TSR_CAST(bf16, ushort, f64, double, (double)tsr_bf16_to_f32(x))
TSR_CAST(i32, int, f64, double, (double)x)
TSR_CAST(i64, long, f64, double, (double)x)
TSR_CAST(u8, uchar, f64, double, (double)x)
#else
// f32 -> any
TSR_CAST(f32, float, f16, ushort, tsr_f32_to_f16(x))
TSR_CAST(f32, float, bf16, ushort, tsr_f32_to_bf16(x))
TSR_CAST(f32, float, i32, int, tsr_f32_to_i32(x))
TSR_CAST(f32, float, i64, long, tsr_f32_to_i64(x))
TSR_CAST(f32, float, u8, uchar, tsr_f32_to_u8(x))
// f16 -> any (exact in f32 first)
TSR_CAST(f16, ushort, f32, float, tsr_f16_to_f32(x))
TSR_CAST(f16, ushort, bf16, ushort, tsr_f32_to_bf16(tsr_f16_to_f32(x)))
TSR_CAST(f16, ushort, i32, int, tsr_f32_to_i32(tsr_f16_to_f32(x)))
TSR_CAST(f16, ushort, i64, long, tsr_f32_to_i64(tsr_f16_to_f32(x)))
TSR_CAST(f16, ushort, u8, uchar, tsr_f32_to_u8(tsr_f16_to_f32(x)))
// bf16 -> any (exact in f32 first)
TSR_CAST(bf16, ushort, f32, float, tsr_bf16_to_f32(x))
TSR_CAST(bf16, ushort, f16, ushort, tsr_f32_to_f16(tsr_bf16_to_f32(x)))
TSR_CAST(bf16, ushort, i32, int, tsr_f32_to_i32(tsr_bf16_to_f32(x)))
TSR_CAST(bf16, ushort, i64, long, tsr_f32_to_i64(tsr_bf16_to_f32(x)))
TSR_CAST(bf16, ushort, u8, uchar, tsr_f32_to_u8(tsr_bf16_to_f32(x)))
// i32 -> any. To f16: |x| >= 65520 is inf either way and smaller values are exact in f32; to
// bf16 through f32 rounded to odd.
TSR_CAST(i32, int, f32, float, (float)x)
TSR_CAST(i32, int, f16, ushort, tsr_f32_to_f16((float)x))
TSR_CAST(i32, int, bf16, ushort, tsr_f32_to_bf16(tsr_i64_to_f32_round_odd((long)x)))
TSR_CAST(i32, int, i64, long, (long)x)
TSR_CAST(i32, int, u8, uchar, (uchar)x)
// i64 -> any
TSR_CAST(i64, long, f32, float, (float)x)
TSR_CAST(i64, long, f16, ushort, tsr_f32_to_f16(tsr_i64_to_f32_round_odd(x)))
TSR_CAST(i64, long, bf16, ushort, tsr_f32_to_bf16(tsr_i64_to_f32_round_odd(x)))
TSR_CAST(i64, long, i32, int, (int)x)
TSR_CAST(i64, long, u8, uchar, (uchar)x)
// u8 -> any: exact
TSR_CAST(u8, uchar, f32, float, (float)x)
TSR_CAST(u8, uchar, f16, ushort, tsr_f32_to_f16((float)x))
TSR_CAST(u8, uchar, bf16, ushort, tsr_f32_to_bf16((float)x))
TSR_CAST(u8, uchar, i32, int, (int)x)
TSR_CAST(u8, uchar, i64, long, (long)x)
#endif
