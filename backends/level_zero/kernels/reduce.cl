// reduce_async kernels: dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) with the semantics of
// backend_abi.h and backends/host/reduce.cc. One kernel per dtype, the op a (uniform) argument:
//
//   reduce_<dtype>(global S* dst, TsrSources srcs, uint n, uint op, ulong count)
//
// Each work item reads all its sources before writing dst[i], so dst may alias a source exactly.
// Built twice (common.h): TSR_FP64=0 holds f32/f16/bf16/i32/i64/u8, TSR_FP64=1 holds f64.
#include "common.h"

// Floats: S stored, A accumulated in source order; AVG is the sum divided once by n, then stored
// (rounded once to nearest even for f16/bf16).
#define TSR_REDUCE_FLOAT(NAME, S, A, LOAD, STORE)                                            \
  kernel void reduce_##NAME(global S* dst, TsrSources srcs, uint n, uint op, ulong count) { \
    TSR_FOR_EACH(i, count) {                                                                 \
      A acc = LOAD(TSR_SOURCE(S, srcs, 0)[i]);                                               \
      for (uint k = 1; k < n; ++k) {                                                         \
        const A x = LOAD(TSR_SOURCE(S, srcs, k)[i]);                                         \
        switch (op) {                                                                        \
          case TSR_PROD: acc = acc * x; break;                                               \
          case TSR_MIN: acc = tsr_nan_min_##A(acc, x); break;                                \
          case TSR_MAX: acc = tsr_nan_max_##A(acc, x); break;                                \
          default: acc = acc + x; break; /* SUM, AVG */                                      \
        }                                                                                    \
      }                                                                                      \
      if (op == TSR_AVG) acc = acc / (A)n;                                                   \
      dst[i] = STORE(acc);                                                                   \
    }                                                                                        \
  }

// Integers: SUM/PROD wrap in the unsigned type U, MIN/MAX compare in S, AVG sums in W (wrapping
// for i64: "accumulates in 64 bits") and divides as WS, truncating toward zero.
#define TSR_REDUCE_INT(NAME, S, U, W, WS)                                                    \
  kernel void reduce_##NAME(global S* dst, TsrSources srcs, uint n, uint op, ulong count) { \
    TSR_FOR_EACH(i, count) {                                                                 \
      const S first = TSR_SOURCE(S, srcs, 0)[i];                                             \
      U acc = (U)first;  /* SUM, PROD */                                                     \
      S extreme = first; /* MIN, MAX */                                                      \
      W sum = (W)first;  /* AVG */                                                           \
      for (uint k = 1; k < n; ++k) {                                                         \
        const S x = TSR_SOURCE(S, srcs, k)[i];                                               \
        switch (op) {                                                                        \
          case TSR_SUM: acc = (U)(acc + (U)x); break;                                        \
          case TSR_PROD: acc = (U)(acc * (U)x); break;                                       \
          case TSR_MIN: extreme = x < extreme ? x : extreme; break;                          \
          case TSR_MAX: extreme = x > extreme ? x : extreme; break;                          \
          default: sum += (W)x; break; /* AVG */                                             \
        }                                                                                    \
      }                                                                                      \
      dst[i] = op == TSR_AVG                       ? (S)((WS)sum / (WS)n)                    \
               : (op == TSR_MIN || op == TSR_MAX) ? extreme                                 \
                                                   : (S)acc;                                 \
    }                                                                                        \
  }

#define TSR_IDENTITY(x) (x)

#if TSR_FP64
TSR_DEFINE_NAN_MIN_MAX(double)
TSR_REDUCE_FLOAT(f64, double, double, TSR_IDENTITY, TSR_IDENTITY)
#else
TSR_DEFINE_NAN_MIN_MAX(float)
TSR_REDUCE_FLOAT(f32, float, float, TSR_IDENTITY, TSR_IDENTITY)
TSR_REDUCE_FLOAT(f16, ushort, float, tsr_f16_to_f32, tsr_f32_to_f16)
TSR_REDUCE_FLOAT(bf16, ushort, float, tsr_bf16_to_f32, tsr_f32_to_bf16)
// i32 AVG: 64 sources of |x| <= 2^31 sum below 2^37, exact in a long.
TSR_REDUCE_INT(i32, int, uint, long, long)
TSR_REDUCE_INT(i64, long, ulong, ulong, long)
// u8 AVG: 64 x 255 fits in 32 bits.
TSR_REDUCE_INT(u8, uchar, uchar, uint, uint)
#endif
