// memcpy_async, memset_async and memcpy_peer_async. Arguments are checked before anything is
// enqueued: NULL pointers, and ranges that run past the end of an allocation the backend knows,
// are refused by the call itself instead of faulting on the device later.
#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::cuda {
namespace {

tsr_status check_pointer(const char* operation, const char* param, const void* ptr) {
  if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, param);
  return TSR_OK;
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

tsr_status check_device_of(const Backend& backend, const char* operation, const char* param,
                           const void* ptr, int32_t device) {
  std::optional<Allocation> a = backend.memory.find(ptr);
  if (a && a->device >= 0 && a->device != device) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %s %p is memory of device %d, not device %d", operation,
                param, ptr, a->device, device);
  }
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memcpy_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_pointer(kOp, "src", src); s != TSR_OK) return s;
    if (tsr_status s = check_range(*backend, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    if (tsr_status s = check_range(*backend, kOp, "src", src, bytes); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    // Unified addressing: the runtime infers the direction from the pointers.
    TSR_RT_CHECK(kOp, rtMemcpyAsync, dst, src, bytes, rtMemcpyDefault, stream->raw);
    return TSR_OK;
  });
}

tsr_status memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memset_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_range(*backend, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtMemsetAsync, dst, int(value & 0xff), bytes, stream->raw);
    return TSR_OK;
  });
}

tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memcpy_peer_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, "memcpy_peer_async (dst_device)", dst_device);
        s != TSR_OK) {
      return s;
    }
    if (tsr_status s = check_device(*backend, "memcpy_peer_async (src_device)", src_device);
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
    if (tsr_status s = check_range(*backend, kOp, "dst", dst, bytes); s != TSR_OK) return s;
    if (tsr_status s = check_range(*backend, kOp, "src", src, bytes); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    // Goes over NVLink/PCIe peer-to-peer when enabled, else the runtime stages through the host.
    TSR_RT_CHECK(kOp, rtMemcpyPeerAsync, dst, dst_device, src, src_device, bytes, stream->raw);
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
