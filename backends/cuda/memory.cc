// Device memory, pinned host memory and host registration, through the runtime; every range is
// also kept in the backend's registry, which answers pointer_attributes (with the allocation's
// base and size, which the runtime does not give) and refuses frees of foreign or interior
// pointers before they reach the runtime.
#include <cstdint>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::cuda::api {

tsr_status device_malloc(int32_t device, size_t bytes, void** out_ptr) {
  static constexpr const char* kOp = "device_malloc";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    const uint64_t total = backend->devices[size_t(device)].properties.total_memory;
    if (bytes > total) {  // some runtimes answer "invalid value" rather than "out of memory"
      return fail(TSR_RESOURCE_EXHAUSTED,
                  "%s: device %d: %zu bytes exceed its %llu bytes of memory", kOp, device, bytes,
                  (unsigned long long)total);
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    void* ptr = nullptr;
    rtError_t error = rtMalloc(&ptr, bytes);
    if (error != rtSuccess) {
      (void)rtGetLastError();
      // The runtime says "out of memory" for absurd sizes too; say how much was asked.
      return fail(status_of(error), "%s: device %d: %s of %zu bytes failed: %s (%s)", kOp, device,
                  TSR_RT_NAME(rtMalloc), bytes, rtGetErrorString(error), rtGetErrorName(error));
    }
    if (!backend->memory.insert(Allocation{ptr, bytes, AllocationKind::kDevice, device})) {
      (void)rtFree(ptr);
      return fail(TSR_INTERNAL, "%s: new allocation %p overlaps a registered range", kOp, ptr);
    }
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status device_free(int32_t device, void* ptr) {
  static constexpr const char* kOp = "device_free";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (ptr == nullptr) return TSR_OK;
    std::optional<Allocation> found = backend->memory.find(ptr);
    if (!found || found->kind != AllocationKind::kDevice || found->base != ptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p was not returned by device_malloc (%s)", kOp, ptr,
                  !found ? "unknown pointer, or already freed"
                         : (found->base != ptr ? "points inside an allocation, not at its start"
                                               : allocation_kind_name(found->kind)));
    }
    if (found->device != device) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p belongs to device %d, not device %d", kOp, ptr,
                  found->device, device);
    }
    if (!backend->memory.take(ptr, AllocationKind::kDevice)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p was freed concurrently", kOp, ptr);
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtFree, ptr);  // synchronises the device, as the ABI expects
    return TSR_OK;
  });
}

tsr_status host_malloc_pinned(size_t bytes, void** out_ptr) {
  static constexpr const char* kOp = "host_malloc_pinned";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    void* ptr = nullptr;
    // Portable: usable for copies with every device, whichever is current.
    TSR_RT_CHECK(kOp, rtHostAlloc, &ptr, bytes, rtHostAllocPortable);
    if (!backend->memory.insert(Allocation{ptr, bytes, AllocationKind::kPinned, -1})) {
      (void)rtFreeHost(ptr);
      return fail(TSR_INTERNAL, "%s: new block %p overlaps a registered range", kOp, ptr);
    }
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status host_free_pinned(void* ptr) {
  static constexpr const char* kOp = "host_free_pinned";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return TSR_OK;
    if (!backend->memory.take(ptr, AllocationKind::kPinned)) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: %p was not returned by host_malloc_pinned (or is already freed)", kOp, ptr);
    }
    TSR_RT_CHECK(kOp, rtFreeHost, ptr);
    return TSR_OK;
  });
}

tsr_status host_register(void* ptr, size_t bytes) {
  static constexpr const char* kOp = "host_register";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: ptr is NULL", kOp);
    if (bytes == 0) return fail(TSR_INVALID_ARGUMENT, "%s: bytes is 0", kOp);
    if (reinterpret_cast<uintptr_t>(ptr) > UINTPTR_MAX - bytes) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p + %zu bytes wraps around", kOp, ptr, bytes);
    }
    if (!backend->memory.insert(Allocation{ptr, bytes, AllocationKind::kRegistered, -1})) {
      std::optional<Allocation> other = backend->memory.find(ptr);
      return fail(TSR_ALREADY_EXISTS,
                  "%s: [%p, +%zu) overlaps memory the backend already knows (%s)", kOp, ptr, bytes,
                  other ? allocation_kind_name(other->kind) : "a registered range");
    }
    rtError_t error = rtHostRegister(ptr, bytes, rtHostRegisterPortable);
    if (error != rtSuccess) {
      backend->memory.take(ptr, AllocationKind::kRegistered);
      return fail_runtime(error, kOp, TSR_RT_NAME(rtHostRegister));
    }
    return TSR_OK;
  });
}

tsr_status host_unregister(void* ptr) {
  static constexpr const char* kOp = "host_unregister";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: ptr is NULL", kOp);
    if (!backend->memory.take(ptr, AllocationKind::kRegistered)) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: %p is not the start of a range registered with host_register", kOp, ptr);
    }
    TSR_RT_CHECK(kOp, rtHostUnregister, ptr);
    return TSR_OK;
  });
}

tsr_status pointer_attributes(const void* ptr, tsr_pointer_attributes* out) {
  static constexpr const char* kOp = "pointer_attributes";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (out == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out is NULL", kOp);
    if (out->struct_size < sizeof(size_t)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: out->struct_size is %zu", kOp, out->struct_size);
    }
    tsr_pointer_attributes full{};
    full.struct_size = sizeof full;
    full.type = TSR_MEMORY_UNKNOWN;
    full.device = -1;
    if (std::optional<Allocation> a = backend->memory.find(ptr)) {
      switch (a->kind) {
        case AllocationKind::kDevice: full.type = TSR_MEMORY_DEVICE; break;
        case AllocationKind::kIpc: full.type = TSR_MEMORY_DEVICE_IPC; break;
        case AllocationKind::kPinned:
        case AllocationKind::kRegistered: full.type = TSR_MEMORY_HOST_PINNED; break;
      }
      full.device = a->device;
      full.base = a->base;
      full.size = a->size;
    }
    copy_prefix(out, &full, sizeof full);
    return TSR_OK;
  });
}

}  // namespace tessera::cuda::api
