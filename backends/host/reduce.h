// Element-wise reduction of N sources (tsr_backend_api_v1::reduce_async) with the exact semantics
// of backend_abi.h: f16/bf16 accumulate in f32 and round once to nearest even; f32 in f32 and f64
// in f64 in source order; integers wrap; integer AVG accumulates in 64 bits (or a type that cannot
// overflow for 64 sources) and truncates toward zero; float AVG divides the sum once by N;
// MIN/MAX return NaN when any source is NaN.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

inline constexpr int32_t kMaxReduceSources = 64;

// Computes dst[i] = op(srcs[0][i], ..., srcs[num_srcs-1][i]) for i in [begin, end). dst may equal
// a source exactly (in place); no other overlap is allowed. `streaming` selects non-temporal
// stores for the output (see store.h); the caller issues store_fence() afterwards. dtype and op
// must be valid, 1 <= num_srcs <= 64. Thread-safe (reentrant); disjoint ranges may run in
// parallel.
void reduce_range(void* dst, const void* const* srcs, int32_t num_srcs, size_t begin, size_t end,
                  tsr_dtype dtype, tsr_reduce_op op, bool streaming);

}  // namespace tessera::host
