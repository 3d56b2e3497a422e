/*
 * reduce_async and cast_async of the porting example: argument checks, then the kernels of
 * numerics.c, run at once (synchronous streams), so the caller's srcs array is not kept.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "state.h"

/* ---- reductions and casts ----------------------------------------------------------------- */

tsr_status pe_reduce_async(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                           tsr_dtype dtype, tsr_reduce_op op, tsr_stream stream) {
  tsr_status status = pe_check_stream(stream, "reduce_async");
  if (status != TSR_OK) return status;
  /* Enums arrive as the caller's raw int: validate before use. */
  if ((int)dtype < 0 || (int)dtype >= TSR_DTYPE_COUNT || (int)op < 0 ||
      (int)op >= TSR_REDUCE_OP_COUNT) {
    return pe_fail(TSR_INVALID_ARGUMENT, "reduce_async: dtype %d or op %d out of range", (int)dtype,
                   (int)op);
  }
  if (num_srcs < 1 || num_srcs > 64) {
    return pe_fail(TSR_INVALID_ARGUMENT, "reduce_async: num_srcs %d not in [1, 64]", (int)num_srcs);
  }
  if (count == 0) return TSR_OK;
  if (dst == NULL || srcs == NULL)
    return pe_fail(TSR_INVALID_ARGUMENT, "reduce_async: NULL pointer");
  for (int32_t s = 0; s < num_srcs; ++s) {
    if (srcs[s] == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "reduce_async: srcs[%d] is NULL", s);
  }
  pe_reduce(dst, srcs, num_srcs, count, dtype, op); /* srcs is not used after this returns */
  return TSR_OK;
}

tsr_status pe_cast_async(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                         size_t count, tsr_stream stream) {
  tsr_status status = pe_check_stream(stream, "cast_async");
  if (status != TSR_OK) return status;
  if ((int)dst_dtype < 0 || (int)dst_dtype >= TSR_DTYPE_COUNT || (int)src_dtype < 0 ||
      (int)src_dtype >= TSR_DTYPE_COUNT) {
    return pe_fail(TSR_INVALID_ARGUMENT, "cast_async: dtype %d or %d out of range", (int)dst_dtype,
                   (int)src_dtype);
  }
  if (count == 0) return TSR_OK;
  if (dst == NULL || src == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "cast_async: NULL pointer");
  const size_t src_bytes = count * pe_dtype_size(src_dtype);
  const size_t dst_bytes = count * pe_dtype_size(dst_dtype);
  const char* s = (const char*)src;
  const char* d = (const char*)dst;
  void* copy = NULL;
  if (s < d + dst_bytes && d < s + src_bytes) { /* overlapping: convert from a private copy */
    copy = malloc(src_bytes);
    if (copy == NULL) return pe_fail(TSR_RESOURCE_EXHAUSTED, "cast_async: %zu bytes", src_bytes);
    memcpy(copy, src, src_bytes);
    src = copy;
  }
  pe_cast(dst, dst_dtype, src, src_dtype, count);
  free(copy);
  return TSR_OK;
}
