#include "linear.h"

#include <string>

#include "tessera/hal/gemm_desc.h"

namespace tessera::gpt {
namespace {

tsr_gemm_desc desc(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                   const void* b, int64_t ldb, void* c, int64_t ldc, double beta, DType ab,
                   DType cd) {
  return hal::gemm_desc(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta, hal::to_abi(ab),
                        hal::to_abi(cd));
}

Status check_f32(DType act, const char* what) {
  if (act == DType::kF32) return Status();
  return invalid_argument(std::string(what) +
                          ": the collective matmul takes f32 activations, not " +
                          std::string(hal::dtype_name(act)));
}

}  // namespace

Status linear_forward(const hal::Stream& s, LinearShape sh, const void* x, const void* w, void* y,
                      DType act, DType y_dtype, bool accumulate) {
  if (sh.tokens == 0 || sh.out == 0) return Status();
  // Column-major: Y^T[out, T] = W^T... W row-major [out, in] is column-major [in, out]: op = T.
  return s.gemm(desc(true, false, sh.out, sh.tokens, sh.in, w, sh.in, x, sh.in, y, sh.out,
                     accumulate ? 1.0 : 0.0, act, y_dtype));
}

Status linear_backward_input(const hal::Stream& s, LinearShape sh, const void* dy, const void* w,
                             void* dx, DType act, bool accumulate) {
  if (sh.tokens == 0 || sh.in == 0) return Status();
  // dX^T[in, T] = W^T[in, out] (column-major [in, out] as stored) * dY^T[out, T].
  return s.gemm(desc(false, false, sh.in, sh.tokens, sh.out, w, sh.in, dy, sh.out, dx, sh.in,
                     accumulate ? 1.0 : 0.0, act, act));
}

Status linear_backward_weight(const hal::Stream& s, LinearShape sh, const void* dy, const void* x,
                              float* dw, DType act) {
  if (sh.tokens == 0) return Status();
  // dW^T[in, out] += X^T[in, T] * dY[T, out] (dY^T is column-major [out, T]: op = T).
  return s.gemm(desc(false, true, sh.in, sh.out, sh.tokens, x, sh.in, dy, sh.out, dw, sh.in, 1.0,
                     act, DType::kF32));
}

Status linear_forward_gathered(overlap::CollectiveMatmul& cm, const hal::Stream& s, LinearShape sh,
                               const void* x_local, const void* w, void* x_full, void* y,
                               DType act) {
  TSR_RETURN_IF_ERROR(check_f32(act, "linear_forward_gathered"));
  // W row-major [out, in] is W^T of the k x n (in x out) matrix the ring multiplies by.
  return cm.allgather_matmul(static_cast<const float*>(x_local), sh.tokens / cm.ranks(), sh.in,
                             static_cast<const float*>(w), sh.out, static_cast<float*>(x_full),
                             static_cast<float*>(y), s, /*w_transposed=*/true);
}

Status linear_forward_scattered(overlap::CollectiveMatmul& cm, const hal::Stream& s, LinearShape sh,
                                const void* x, const void* w, void* y_local, DType act) {
  TSR_RETURN_IF_ERROR(check_f32(act, "linear_forward_scattered"));
  return cm.matmul_reduce_scatter(static_cast<const float*>(x), sh.tokens, sh.in,
                                  static_cast<const float*>(w), sh.out,
                                  static_cast<float*>(y_local), s, /*w_transposed=*/true);
}

}  // namespace tessera::gpt
