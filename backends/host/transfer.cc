// memcpy_async, memset_async and memcpy_peer_async. Every kind of memory this backend hands out
// is host memory in one address space, so a transfer in any direction is a memcpy run by the
// stream's worker, on the addresses resolve() gives (in discrete mode a device pointer becomes
// its shadow mapping). Arguments are validated before anything is enqueued, so bad input is
// reported by the call itself, never by a crash on the worker. Copies take host memory on either
// side in both modes; memset is a device kernel and, in discrete mode, takes device memory only.
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

// Resolves both sides (host memory allowed on either) and enqueues the copy.
tsr_status resolve_and_copy(Backend& backend, Stream& stream, const char* operation, void* dst_in,
                            const void* src_in, size_t bytes) {
  void* dst;
  void* src_mutable;
  if (tsr_status s = resolve(backend.memory, operation, "dst", dst_in, bytes,
                             /*device_only=*/false, &dst);
      s != TSR_OK) {
    return s;
  }
  if (tsr_status s = resolve(backend.memory, operation, "src", src_in, bytes,
                             /*device_only=*/false, &src_mutable);
      s != TSR_OK) {
    return s;
  }
  const void* src = src_mutable;
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
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (bytes == 0) return TSR_OK;
    if (tsr_status s = check_pointer(kOp, "dst", dst); s != TSR_OK) return s;
    if (tsr_status s = check_pointer(kOp, "src", src); s != TSR_OK) return s;
    return resolve_and_copy(*backend, *stream, kOp, dst, src, bytes);
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
    void* target;
    if (tsr_status s =
            resolve(backend->memory, kOp, "dst", dst, bytes, backend->config.discrete, &target);
        s != TSR_OK) {
      return s;
    }
    auto byte = static_cast<unsigned char>(value);
    return stream->enqueue(kOp, /*always_run=*/false,
                           [target, byte, bytes](tsr_status, std::string*) {
                             std::memset(target, byte, bytes);
                             return TSR_OK;
                           });
  });
}

tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream stream_handle) {
  static constexpr const char* kOp = "memcpy_peer_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    Device* device = nullptr;
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
    return resolve_and_copy(*backend, *stream, kOp, dst, src, bytes);
  });
}

}  // namespace api
}  // namespace tessera::host
