// Elementwise reduction on host memory for the algorithms, with the HAL's semantics (the host
// backend's kernels, backends/host/reduce.h, so results match a HAL reduce bit for bit), and the
// kernels' block copy. The collectives reach the host backend's kernel library only through here.
#pragma once

#include <cstddef>

#include "tessera/hal/dtype.h"

namespace tessera::coll {

// dst[i] = op(a[i], b[i]) for i < count. a or b may equal dst exactly; any alignment. kAvg is
// treated as kSum (algorithms divide once at the end, see finish_average).
// `streaming`: write dst with non-temporal stores (large outputs that are not read again soon);
// the caller issues streaming_fence() before another thread reads them.
void reduce_pair(void* dst, const void* a, const void* b, size_t count, hal::DType dtype,
                 hal::ReduceOp op, bool streaming = false);

// data[i] /= divisor in place: floats divide once (f16/bf16 through f32, rounded to nearest even),
// integers truncate toward zero. The last step of an AVG reduction.
void finish_average(void* data, size_t count, hal::DType dtype, int divisor);

// Copies `bytes` from `src` to `dst` (no overlap), with streaming stores when `streaming` (the
// kernels' store_block: the same stores a reduction's output takes).
void copy_block(void* dst, const void* src, size_t bytes, bool streaming);

// Orders earlier streaming stores (reduce_pair's or copy_block's) before later ordinary ones: an
// sfence on x86. Once after the streaming writes, before the flag that publishes them.
void streaming_fence();

size_t dtype_bytes(hal::DType dtype);

}  // namespace tessera::coll
