/*
 * Element arithmetic of the porting example: N-source reductions and dtype casts on host memory,
 * with exactly the semantics backend_abi.h prescribes (see tsr_reduce_op and cast_async there).
 * Arguments are validated by the caller; these functions cannot fail. Thread-safe (no state).
 */
#ifndef TESSERA_PORTING_EXAMPLE_NUMERICS_H_
#define TESSERA_PORTING_EXAMPLE_NUMERICS_H_

#include <stddef.h>

#include "tessera/hal/backend_abi.h"

/* Bytes per element of a valid dtype. */
size_t pe_dtype_size(tsr_dtype dtype);

/* dst[i] = op(srcs[0][i], ..., srcs[n-1][i]); dst may alias a source exactly. */
void pe_reduce(void* dst, const void* const* srcs, int n, size_t count, tsr_dtype dtype,
               tsr_reduce_op op);

/* Converts count elements; dst and src must not overlap (the caller copies src if they do). */
void pe_cast(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype, size_t count);

#endif /* TESSERA_PORTING_EXAMPLE_NUMERICS_H_ */
