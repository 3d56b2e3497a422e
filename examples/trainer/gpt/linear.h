// Row-major linear layers on hal::Stream::gemm (column-major BLAS convention underneath: a
// row-major [rows, cols] matrix is a column-major [cols, rows] one with leading dimension cols).
// Weights are row-major [out, in] (params.h), activations row-major [tokens, features].
//
//   forward        y[T, out]   (=|+=) x[T, in] W^T            act x act -> y_dtype
//   backward_input dx[T, in]   (=|+=) dy[T, out] W             act x act -> act
//   backward_weight dW[out, in] +=    dy^T x                   act x act -> f32 (gradients)
//
// `ld_*` default to the dense widths; a caller slicing a wider buffer passes its row stride.
#pragma once

#include <cstdint>

#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/stream.h"

namespace tessera::gpt {

using hal::DType;
using hal::ReduceOp;

struct LinearShape {
  int64_t tokens = 0;  // T
  int64_t in = 0;
  int64_t out = 0;
};

// y = x W^T (+ y when accumulate). y_dtype: act, or kF32 for logits.
Status linear_forward(const hal::Stream& s, LinearShape shape, const void* x, const void* w,
                      void* y, DType act, DType y_dtype, bool accumulate = false);
// dx = dy W (+ dx when accumulate).
Status linear_backward_input(const hal::Stream& s, LinearShape shape, const void* dy, const void* w,
                             void* dx, DType act, bool accumulate);
// dW += dy^T x in f32.
Status linear_backward_weight(const hal::Stream& s, LinearShape shape, const void* dy,
                              const void* x, float* dw, DType act);

}  // namespace tessera::gpt
