// Check data for `tessera bench coll`: inputs whose results are exact in any reduction order, the
// expected result of each element computed on the host, and the element comparison.
//
// Every input is a small non-negative integer chosen so that all partial results stay exact in the
// element type: sums (and averages) stay below the type's exact-integer limit (256 for bf16, 2048
// for f16, 255 for u8), products are powers of two with few enough factors, min/max any small
// integer. So the result does not depend on the order in which an algorithm combines ranks, and
// the tolerance is 0 ulp (2 ulp for avg, whose single division may round either way once
// f16/bf16 go through f32). Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/hal/dtype.h"

namespace tessera::tools::bench_coll {

// Every input depends on the element index only through i % kInputPeriod, so expected values can
// be computed for one period and reused.
inline constexpr size_t kInputPeriod = 4096;

// Element i of a buffer of `dtype`, widened to double (exact for every dtype).
double load(const void* base, size_t i, hal::DType dtype);
// Stores `value` rounded to `dtype` (nearest even for floats, truncation for integers).
void store(void* base, size_t i, hal::DType dtype, double value);

// Input of `rank` (of `nranks`) at element `i` for a reduction with `op`.
double reduction_input(hal::ReduceOp op, hal::DType dtype, int nranks, int rank, size_t i);
// The reduction of reduction_input over every rank at element `i`, rounded as the HAL's reduction
// rounds it (avg: one division at the end, through f32 for f16/bf16, truncating for integers).
double reduction_expected(hal::ReduceOp op, hal::DType dtype, int nranks, size_t i);
// Input of `rank` at element `i` for operations that only move data (broadcast, allgather, ...).
double movement_input(hal::DType dtype, int rank, size_t i);

// True when `got` (raw element read from a result buffer) equals `expected` rounded to `dtype`
// within `ulps` units in the last place (floats only; integers must be equal).
bool element_matches(const void* base, size_t i, hal::DType dtype, double expected, int ulps);

}  // namespace tessera::tools::bench_coll
