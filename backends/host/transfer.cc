// memcpy_async, memset_async and memcpy_peer_async. Every kind of memory this backend hands out
// is ordinary host memory in one address space, so a transfer in any direction is a memcpy run
// by the stream's worker. Arguments are validated before anything is enqueued, so bad input is
// reported by the call itself, never by a crash on the worker.
#include <cstring>

#include "api.h"
#include "dtype.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {
namespace {

tsr_status check_pointer(const char* operation, const char* param, const void* ptr) {
  if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, param);
  return TSR_OK;
}

// A pointer that the backend knows as device memory must belong to the device the caller named.
tsr_status check_device_of(Backend& backend, const char* operation, const char* param,
                           const void* ptr, int32_t device) {
  std::optional<Allocation> allocation = backend.memory.find(ptr);
  if (allocation &&
      (allocation->kind == AllocationKind::kDevice || allocation->kind == AllocationKind::kIpc) &&
      allocation->device != device) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %s %p is memory of device %d, not device %d", operation,
                param, ptr, allocation->device, device);
  }
  return TSR_OK;
}

tsr_status enqueue_copy(Stream& stream, const char* operation, void* dst, const void* src,
                        size_t bytes) {
  bool overlap = ranges_overlap(dst, bytes, src, bytes);
  return stream.enqueue(operation, /*always_run=*/false,
                        [dst, src, bytes, overlap](tsr_status, std::string*) {
                          if (overlap) {
                            std::memmove(dst, src, bytes);
                          } else {
                            std::memcpy(dst, src, bytes);
                          }
                          return TSR_OK;
                        });
}

}  // namespace

namespace api {

tsr_status memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memcpy_async";
  return guarded(kOp, [&] {
    Backend* backend;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_pointer(kOp, "src", src); s != TSR_OK) return s;
    if (tsr_status s = check_range(backend->memory, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    if (tsr_status s = check_range(backend->memory, kOp, "src", src, bytes); s != TSR_OK) return s;
    return enqueue_copy(*stream, kOp, dst, src, bytes);
  });
}

tsr_status memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memset_async";
  return guarded(kOp, [&] {
    Backend* backend;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_range(backend->memory, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    auto byte = static_cast<unsigned char>(value);
    return stream->enqueue(kOp, /*always_run=*/false, [dst, byte, bytes](tsr_status, std::string*) {
      std::memset(dst, byte, bytes);
      return TSR_OK;
    });
  });
}

tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memcpy_peer_async";
  return guarded(kOp, [&] {
    Backend* backend;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    Device* device;
    if (tsr_status s =
            lookup_device(*backend, "memcpy_peer_async (dst_device)", dst_device, &device);
        s != TSR_OK) {
      return s;
    }
    if (tsr_status s =
            lookup_device(*backend, "memcpy_peer_async (src_device)", src_device, &device);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_pointer(kOp, "src", src); s != TSR_OK) return s;
    if (tsr_status s = check_device_of(*backend, kOp, "dst", dst, dst_device); s != TSR_OK) {
      return s;
    }
    if (tsr_status s = check_device_of(*backend, kOp, "src", src, src_device); s != TSR_OK) {
      return s;
    }
    if (tsr_status s = check_range(backend->memory, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    if (tsr_status s = check_range(backend->memory, kOp, "src", src, bytes); s != TSR_OK) return s;
    return enqueue_copy(*stream, kOp, dst, src, bytes);
  });
}

}  // namespace api
}  // namespace tessera::host
