// IPC handles: the runtime's own memory handle, which is exactly TSR_IPC_HANDLE_BYTES (64) on
// CUDA, copied as is. Only the base of a device_malloc allocation may be exported (the runtime
// would silently export the whole containing allocation otherwise). Built out when the stack has
// no IPC (TESSERA_CUDA_HAVE_IPC=0): the entries are then NULL.
#include <cstring>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::cuda {
#if TESSERA_CUDA_HAVE_IPC
namespace {

static_assert(sizeof(rtIpcMemHandle_t) <= TSR_IPC_HANDLE_BYTES,
              "the runtime's IPC memory handle must fit in tsr_ipc_handle");

tsr_status get_handle(void* device_ptr, tsr_ipc_handle* out_handle) {
  static constexpr const char* kOp = "ipc_get_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (device_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: device_ptr is NULL", kOp);
    if (out_handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_handle is NULL", kOp);
    std::optional<Allocation> a = backend->memory.find(device_ptr);
    if (!a || a->kind != AllocationKind::kDevice || a->base != device_ptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p is not the start of a device_malloc allocation%s",
                  kOp, device_ptr,
                  a && a->kind == AllocationKind::kIpc
                      ? " (memory opened from another process cannot be re-exported)"
                      : "");
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, a->device); s != TSR_OK) return s;
    rtIpcMemHandle_t raw;
    std::memset(&raw, 0, sizeof raw);
    TSR_RT_CHECK(kOp, rtIpcGetMemHandle, &raw, device_ptr);
    tsr_ipc_handle handle{};
    std::memcpy(handle.bytes, &raw, sizeof raw);
    *out_handle = handle;
    return TSR_OK;
  });
}

tsr_status open_handle(int32_t device, const tsr_ipc_handle* handle, void** out_ptr) {
  static constexpr const char* kOp = "ipc_open_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: handle is NULL", kOp);
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    static const tsr_ipc_handle kZero{};
    if (std::memcmp(handle->bytes, kZero.bytes, sizeof kZero.bytes) == 0) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: the handle is all zero (never filled by ipc_get_handle)", kOp);
    }
    rtIpcMemHandle_t raw;
    std::memcpy(&raw, handle->bytes, sizeof raw);
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    void* ptr = nullptr;
    TSR_RT_CHECK(kOp, rtIpcOpenMemHandle, &ptr, raw, rtIpcMemLazyEnablePeerAccess);
    Allocation a{ptr, 0, AllocationKind::kIpc, device};
    if (backend->address_range != nullptr) {  // the size, when the driver can tell it
      unsigned long long base = 0;
      size_t size = 0;
      if (backend->address_range(&base, &size, reinterpret_cast<uintptr_t>(ptr)) == 0 &&
          base == reinterpret_cast<uintptr_t>(ptr)) {
        a.size = size;
      }
    }
    if (!backend->memory.insert(a)) {
      (void)rtIpcCloseMemHandle(ptr);
      return fail(TSR_INTERNAL, "%s: the mapping %p overlaps a registered range", kOp, ptr);
    }
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status close_handle(void* ptr) {
  static constexpr const char* kOp = "ipc_close_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: ptr is NULL", kOp);
    std::optional<Allocation> a = backend->memory.take(ptr, AllocationKind::kIpc);
    if (!a) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: %p was not returned by ipc_open_handle (or is already closed)", kOp, ptr);
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, a->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtIpcCloseMemHandle, ptr);
    return TSR_OK;
  });
}

}  // namespace

namespace api {
tsr_status (*const ipc_get_handle)(void*, tsr_ipc_handle*) = &get_handle;
tsr_status (*const ipc_open_handle)(int32_t, const tsr_ipc_handle*, void**) = &open_handle;
tsr_status (*const ipc_close_handle)(void*) = &close_handle;
}  // namespace api
#else
namespace api {
tsr_status (*const ipc_get_handle)(void*, tsr_ipc_handle*) = nullptr;
tsr_status (*const ipc_open_handle)(int32_t, const tsr_ipc_handle*, void**) = nullptr;
tsr_status (*const ipc_close_handle)(void*) = nullptr;
}  // namespace api
#endif
}  // namespace tessera::cuda
