// reduce_async: argument checks and pointer translation (resolve(): the shadow mapping of
// discrete device memory, which is all a kernel takes in discrete mode), then reduce_range
// (reduce_kernels.cc) on the stream's thread.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "api.h"
#include "dtype.h"
#include "errors.h"
#include "reduce.h"
#include "state.h"
#include "store.h"

namespace tessera::host {

namespace api {

tsr_status reduce_async(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                        tsr_dtype dtype_in, tsr_reduce_op op_in, tsr_stream stream_handle) {
  static constexpr const char* kOp = "reduce_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    const int32_t dtype_value = enum_bits(dtype_in), op_value = enum_bits(op_in);
    if (!dtype_valid(dtype_value)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: dtype %d is not a tsr_dtype", kOp, dtype_value);
    }
    if (op_value < 0 || op_value >= TSR_REDUCE_OP_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: op %d is not a tsr_reduce_op", kOp, op_value);
    }
    const auto dtype = static_cast<tsr_dtype>(dtype_value);
    const auto op = static_cast<tsr_reduce_op>(op_value);
    if (num_srcs < 1 || num_srcs > kMaxReduceSources) {
      return fail(TSR_INVALID_ARGUMENT, "%s: num_srcs is %d (must be in [1, %d])", kOp, num_srcs,
                  kMaxReduceSources);
    }
    if (count == 0) return TSR_OK;
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (srcs == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: srcs is NULL", kOp);
    const size_t element = dtype_size(dtype);
    if (count > SIZE_MAX / element) {
      return fail(TSR_INVALID_ARGUMENT, "%s: count %zu of %s overflows size_t", kOp, count,
                  dtype_name(dtype));
    }
    const size_t bytes = count * element;
    const bool device_only = backend->config.discrete;
    void* target;
    if (tsr_status s = resolve(backend->memory, kOp, "dst", dst, bytes, device_only, &target);
        s != TSR_OK) {
      return s;
    }
    std::vector<const void*> sources(srcs, srcs + num_srcs);  // the caller's array may go away
    for (int32_t k = 0; k < num_srcs; ++k) {
      char name[24];
      std::snprintf(name, sizeof name, "srcs[%d]", k);
      if (sources[k] == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", kOp, name);
      if (sources[k] != dst && ranges_overlap(sources[k], bytes, dst, bytes)) {
        return fail(TSR_INVALID_ARGUMENT,
                    "%s: %s overlaps dst without being equal to it (only exact in-place "
                    "reduction is allowed)",
                    kOp, name);
      }
      void* source;
      if (tsr_status s =
              resolve(backend->memory, kOp, name, sources[k], bytes, device_only, &source);
          s != TSR_OK) {
        return s;
      }
      sources[k] = source;
    }
    const bool streaming = bytes >= kStreamingStoreThreshold;
    return stream->enqueue(kOp, /*always_run=*/false,
                           [target, sources = std::move(sources), count, dtype, op, streaming](
                               tsr_status, std::string*) {
                             reduce_range(target, sources.data(), int32_t(sources.size()), 0, count,
                                          dtype, op, streaming);
                             if (streaming) store_fence();
                             return TSR_OK;
                           });
  });
}

}  // namespace api
}  // namespace tessera::host
