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
#include "tessera/overlap/collective_matmul.h"

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

// Tensor parallelism under sequence parallelism through the ring collective matmuls
// (tessera/overlap/collective_matmul.h; Megatron's tp-comm-overlap), f32 activations only.
// Gathered: x_full[T, in] receives every rank's x_local[T / ranks, in] (as an allgather would put
// it) while y[T, out] = x_full W^T is computed chunk by chunk. shape.tokens is T (all ranks).
Status linear_forward_gathered(overlap::CollectiveMatmul& cm, const hal::Stream& s,
                               LinearShape shape, const void* x_local, const void* w, void* x_full,
                               void* y, DType act);
// Scattered: y_local[T / ranks, out] = this rank's rows of sum over ranks of x[T, in] W^T (the
// row-parallel GEMM and the reduce-scatter in one ring). shape.tokens is T.
Status linear_forward_scattered(overlap::CollectiveMatmul& cm, const hal::Stream& s,
                                LinearShape shape, const void* x, const void* w, void* y_local,
                                DType act);

}  // namespace tessera::gpt
