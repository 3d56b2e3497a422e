// Element-wise dtype conversion (tsr_backend_api_v1::cast_async) for every pair of tsr_dtype:
// results are correctly rounded to nearest even for floating destinations (no double rounding,
// including f64 -> f16/bf16 and i64 -> bf16); a float -> integer cast truncates toward zero and
// saturates at the integer's range, NaN gives 0; integer -> integer casts keep the low bits
// (two's complement wrap-around, as static_cast in C++20).
#pragma once

#include <cstddef>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

// Converts count elements from src to dst, which must not overlap (the entry point copies the
// source first when they do). Dtypes must be valid. `streaming` as in store.h. Thread-safe.
void cast_range(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype, size_t count,
                bool streaming);

}  // namespace tessera::host
