// Building a tsr_gemm_desc: column-major (BLAS convention), C = op(A) op(B) + beta C with alpha
// 1; f32_gemm_desc for the common f32 case. Callers with row-major data swap the operands
// (C^T = B^T A^T); see runtime/overlap/src/collective_matmul.cc.
#pragma once

#include <cstdint>

#include "tessera/hal/backend_abi.h"

namespace tessera::hal {

// Any tsr_dtype pair (e.g. bf16 inputs accumulating into an f32 C, as the GPT trainer's weight
// gradients do).
inline tsr_gemm_desc gemm_desc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
                               int64_t ldc, double beta, int32_t dtype_ab, int32_t dtype_c) {
  tsr_gemm_desc d{};
  d.struct_size = sizeof d;
  d.trans_a = trans_a ? 1 : 0;
  d.trans_b = trans_b ? 1 : 0;
  d.m = m;
  d.n = n;
  d.k = k;
  d.alpha = 1.0;
  d.beta = beta;
  d.a = a;
  d.lda = lda;
  d.b = b;
  d.ldb = ldb;
  d.c = c;
  d.ldc = ldc;
  d.dtype_ab = dtype_ab;
  d.dtype_c = dtype_c;
  return d;
}

inline tsr_gemm_desc f32_gemm_desc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                   const float* a, int64_t lda, const float* b, int64_t ldb,
                                   float* c, int64_t ldc, double beta = 0.0) {
  return gemm_desc(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta, TSR_DTYPE_F32,
                   TSR_DTYPE_F32);
}

}  // namespace tessera::hal
