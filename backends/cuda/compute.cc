// reduce_async and cast_async: argument checks on the host, then the kernels of reduce.cu and
// cast.cu on the stream. Built without kernels (TESSERA_CUDA_HAVE_KERNELS=0, for a stack whose
// device compiler is not at hand) both entries are NULL.
#include <cstdint>

#include "api.h"
#include "errors.h"
#include "state.h"

#if TESSERA_CUDA_HAVE_KERNELS || TESSERA_CUDA_HAVE_BUSY_WAIT
#include "kernels.h"
#endif

namespace tessera::cuda {
#if TESSERA_CUDA_HAVE_KERNELS
namespace {

size_t dtype_size(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32:
    case TSR_DTYPE_I32: return 4;
    case TSR_DTYPE_F16:
    case TSR_DTYPE_BF16: return 2;
    case TSR_DTYPE_F64:
    case TSR_DTYPE_I64: return 8;
    case TSR_DTYPE_U8: return 1;
    default: return 0;
  }
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

tsr_status check_range(const Backend& backend, const char* operation, const char* param,
                       const void* ptr, size_t bytes) {
  std::optional<Allocation> a = backend.memory.find(ptr);
  if (!a || a->size == 0) return TSR_OK;
  size_t offset = size_t(static_cast<const char*>(ptr) - static_cast<const char*>(a->base));
  if (bytes > a->size - offset) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s range of %zu bytes at offset %zu runs past the end of its %zu-byte %s",
                operation, param, bytes, offset, a->size, allocation_kind_name(a->kind));
  }
  return TSR_OK;
}

tsr_status reduce(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                  tsr_dtype dtype, tsr_reduce_op op, tsr_stream stream_handle) {
  static constexpr const char* kOp = "reduce_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (num_srcs < 1 || num_srcs > kernels::kMaxSources) {
      return fail(TSR_INVALID_ARGUMENT, "%s: num_srcs is %d; it must be in [1, %d]", kOp, num_srcs,
                  kernels::kMaxSources);
    }
    const size_t size = dtype_size(dtype);
    if (size == 0) return fail(TSR_INVALID_ARGUMENT, "%s: unknown dtype %d", kOp, int(dtype));
    if (int(op) < 0 || op >= TSR_REDUCE_OP_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: unknown operator %d", kOp, int(op));
    }
    if (count == 0) return TSR_OK;
    if (count > SIZE_MAX / size) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %zu elements overflow the address space", kOp, count);
    }
    const size_t bytes = count * size;
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (srcs == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: srcs is NULL", kOp);
    if (tsr_status s = check_range(*backend, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    for (int32_t i = 0; i < num_srcs; ++i) {
      if (srcs[i] == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: srcs[%d] is NULL", kOp, i);
      if (srcs[i] != dst && overlap(srcs[i], bytes, dst, bytes)) {
        return fail(TSR_INVALID_ARGUMENT,
                    "%s: dst overlaps srcs[%d] without being equal to it (only exact in-place "
                    "reduction is supported)",
                    kOp, i);
      }
      if (tsr_status s = check_range(*backend, kOp, "source", srcs[i], bytes); s != TSR_OK) {
        return s;
      }
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    const int sms = backend->devices[size_t(stream->device)].properties.compute_units;
    rtError_t error =
        kernels::launch_reduce(dst, srcs, num_srcs, count, dtype, op, sms, stream->raw);
    if (error != rtSuccess) return fail_runtime(error, kOp, "the reduction kernel launch");
    return TSR_OK;
  });
}

tsr_status cast(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype, size_t count,
                tsr_stream stream_handle) {
  static constexpr const char* kOp = "cast_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    const size_t dst_size = dtype_size(dst_dtype);
    const size_t src_size = dtype_size(src_dtype);
    if (dst_size == 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s: unknown dst_dtype %d", kOp, int(dst_dtype));
    }
    if (src_size == 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s: unknown src_dtype %d", kOp, int(src_dtype));
    }
    if (count == 0) return TSR_OK;
    if (count > SIZE_MAX / 8) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %zu elements overflow the address space", kOp, count);
    }
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (src == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: src is NULL", kOp);
    const size_t dst_bytes = count * dst_size;
    const size_t src_bytes = count * src_size;
    if (overlap(dst, dst_bytes, src, src_bytes) && !(dst == src && dst_size == src_size)) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: dst and src overlap (only an in-place cast between equal-sized dtypes is "
                  "supported)",
                  kOp);
    }
    if (tsr_status s = check_range(*backend, kOp, "dst", dst, dst_bytes); s != TSR_OK) return s;
    if (tsr_status s = check_range(*backend, kOp, "src", src, src_bytes); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    const int sms = backend->devices[size_t(stream->device)].properties.compute_units;
    rtError_t error = kernels::launch_cast(dst, dst_dtype, src, src_dtype, count, sms, stream->raw);
    if (error != rtSuccess) return fail_runtime(error, kOp, "the cast kernel launch");
    return TSR_OK;
  });
}

}  // namespace

namespace api {
tsr_status (*const reduce_async)(void*, const void* const*, int32_t, size_t, tsr_dtype,
                                 tsr_reduce_op, tsr_stream) = &reduce;
tsr_status (*const cast_async)(void*, tsr_dtype, const void*, tsr_dtype, size_t,
                               tsr_stream) = &cast;
}  // namespace api
#else
namespace api {
tsr_status (*const reduce_async)(void*, const void* const*, int32_t, size_t, tsr_dtype,
                                 tsr_reduce_op, tsr_stream) = nullptr;
tsr_status (*const cast_async)(void*, tsr_dtype, const void*, tsr_dtype, size_t,
                               tsr_stream) = nullptr;
}  // namespace api
#endif

// stream_busy_wait: the clock64 spin kernel of busy_wait.cu, compiled only with the CUDA
// language (TESSERA_CUDA_HAVE_BUSY_WAIT); NULL otherwise (e.g. kernels built outside CMake).
#if TESSERA_CUDA_HAVE_BUSY_WAIT
namespace {

tsr_status busy_wait(tsr_stream stream_handle, uint64_t microseconds) {
  static constexpr const char* kOp = "stream_busy_wait";
  static constexpr uint64_t kMaxMicroseconds = 60'000'000;  // the ABI's bound: one minute
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (microseconds > kMaxMicroseconds) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %llu us is more than the limit of %llu us", kOp,
                  static_cast<unsigned long long>(microseconds),
                  static_cast<unsigned long long>(kMaxMicroseconds));
    }
    if (microseconds == 0) return TSR_OK;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    int clock_khz = 0;
    TSR_RT_CHECK(kOp, rtDeviceGetAttribute, &clock_khz, rtDevAttrClockRate, stream->device);
    if (clock_khz <= 0) return fail(TSR_INTERNAL, "%s: the device reports no SM clock", kOp);
    rtError_t error = kernels::launch_busy_wait(microseconds, clock_khz, stream->raw);
    if (error != rtSuccess) return fail_runtime(error, kOp, "the busy-wait kernel launch");
    return TSR_OK;
  });
}

}  // namespace
namespace api {
tsr_status (*const stream_busy_wait)(tsr_stream, uint64_t) = &busy_wait;
}  // namespace api
#else
namespace api {
tsr_status (*const stream_busy_wait)(tsr_stream, uint64_t) = nullptr;
}  // namespace api
#endif
}  // namespace tessera::cuda
