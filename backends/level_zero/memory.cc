// Device and host memory (zeMemAllocDevice/Host), pointer attributes and IPC handles.
#include <cstring>

#include "ze.h"

namespace tessera::ze {
namespace {

tsr_status remember(Backend& b, const Allocation& a) {
  std::lock_guard lock(b.mutex);
  b.memory[reinterpret_cast<uintptr_t>(a.base)] = a;
  if (a.kind == Kind::kDevice) b.allocated[size_t(a.device)] += a.size;
  return TSR_OK;
}

std::optional<Allocation> forget(Backend& b, const void* base, Kind kind) {
  std::lock_guard lock(b.mutex);
  auto it = b.memory.find(reinterpret_cast<uintptr_t>(base));
  if (it == b.memory.end() || it->second.kind != kind) return std::nullopt;
  Allocation a = it->second;
  b.memory.erase(it);
  if (kind == Kind::kDevice) b.allocated[size_t(a.device)] -= a.size;
  return a;
}

}  // namespace

namespace api {

tsr_status device_malloc(int32_t device, size_t bytes, void** out_ptr) {
  static constexpr const char* kOp = "device_malloc";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    const Device& d = b->devices[size_t(device)];
    if (bytes > d.properties.total_memory) {
      return fail(TSR_RESOURCE_EXHAUSTED, "%s: %zu bytes exceed device %d's %llu", kOp, bytes,
                  device, static_cast<unsigned long long>(d.properties.total_memory));
    }
    ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* ptr = nullptr;
    TSR_ZE_CHECK(kOp, zeMemAllocDevice, d.context, &desc, bytes, 256, d.handle, &ptr);
    remember(*b, Allocation{ptr, bytes, Kind::kDevice, device});
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status device_free(int32_t device, void* ptr) {
  static constexpr const char* kOp = "device_free";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (ptr == nullptr) return TSR_OK;
  if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
  std::optional<Allocation> a = forget(*b, ptr, Kind::kDevice);
  if (!a) return fail(TSR_INVALID_ARGUMENT, "%s: %p is not a device allocation", kOp, ptr);
  TSR_ZE_CHECK(kOp, zeMemFree, b->devices[size_t(a->device)].context, ptr);
  return TSR_OK;
}

tsr_status host_malloc_pinned(size_t bytes, void** out_ptr) {
  static constexpr const char* kOp = "host_malloc_pinned";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    // Host USM of the first driver's context; devices of other drivers see it as pageable.
    ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
    void* ptr = nullptr;
    TSR_ZE_CHECK(kOp, zeMemAllocHost, b->devices[0].context, &desc, bytes, 256, &ptr);
    remember(*b, Allocation{ptr, bytes, Kind::kHost, -1});
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status host_free_pinned(void* ptr) {
  static constexpr const char* kOp = "host_free_pinned";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (ptr == nullptr) return TSR_OK;
  if (!forget(*b, ptr, Kind::kHost)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %p is not a pinned host allocation", kOp, ptr);
  }
  TSR_ZE_CHECK(kOp, zeMemFree, b->devices[0].context, ptr);
  return TSR_OK;
}

tsr_status pointer_attributes(const void* ptr, tsr_pointer_attributes* out) {
  Backend* b = nullptr;
  if (tsr_status s = require("pointer_attributes", &b); s != TSR_OK) return s;
  if (out == nullptr || out->struct_size < sizeof(size_t)) {
    return fail(TSR_INVALID_ARGUMENT, "pointer_attributes: out is NULL or too small");
  }
  tsr_pointer_attributes full{};
  full.struct_size = sizeof full;
  full.type = TSR_MEMORY_UNKNOWN;
  full.device = -1;
  if (std::optional<Allocation> a = find_allocation(*b, ptr)) {
    full.type = a->kind == Kind::kDevice ? TSR_MEMORY_DEVICE
                : a->kind == Kind::kHost ? TSR_MEMORY_HOST_PINNED
                                         : TSR_MEMORY_DEVICE_IPC;
    full.device = a->device;
    full.base = a->base;
    full.size = a->size;
  }
  const size_t wanted = out->struct_size;
  const size_t bytes = wanted < sizeof full ? wanted : sizeof full;
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
              reinterpret_cast<const char*>(&full) + sizeof(size_t), bytes - sizeof(size_t));
  if (wanted > sizeof full)
    std::memset(reinterpret_cast<char*>(out) + sizeof full, 0, wanted - sizeof full);
  return TSR_OK;
}

// IPC: ze_ipc_mem_handle_t is 64 bytes, the size of tsr_ipc_handle. The handle carries a file
// descriptor of the exporting process; drivers that need it passed over a socket (rather than
// opened through pidfd_getfd) are documented in README.md.
static_assert(sizeof(ze_ipc_mem_handle_t) <= sizeof(tsr_ipc_handle), "IPC handle too big");

tsr_status ipc_get_handle(void* device_ptr, tsr_ipc_handle* out_handle) {
  static constexpr const char* kOp = "ipc_get_handle";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (out_handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_handle is NULL", kOp);
  std::optional<Allocation> a = find_allocation(*b, device_ptr);
  if (!a || a->kind != Kind::kDevice || a->base != device_ptr) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %p is not the base of a device allocation", kOp,
                device_ptr);
  }
  ze_ipc_mem_handle_t handle{};
  TSR_ZE_CHECK(kOp, zeMemGetIpcHandle, b->devices[size_t(a->device)].context, device_ptr, &handle);
  std::memset(out_handle, 0, sizeof *out_handle);
  std::memcpy(out_handle->bytes, &handle, sizeof handle);
  return TSR_OK;
}

tsr_status ipc_open_handle(int32_t device, const tsr_ipc_handle* handle, void** out_ptr) {
  static constexpr const char* kOp = "ipc_open_handle";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (handle == nullptr || out_ptr == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: handle or out_ptr is NULL", kOp);
    }
    ze_ipc_mem_handle_t raw{};
    std::memcpy(&raw, handle->bytes, sizeof raw);
    const Device& d = b->devices[size_t(device)];
    void* ptr = nullptr;
    TSR_ZE_CHECK(kOp, zeMemOpenIpcHandle, d.context, d.handle, raw, 0, &ptr);
    remember(*b, Allocation{ptr, 0, Kind::kIpc, device});
    *out_ptr = ptr;
    return TSR_OK;
  });
}

tsr_status ipc_close_handle(void* ptr) {
  static constexpr const char* kOp = "ipc_close_handle";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  std::optional<Allocation> a = forget(*b, ptr, Kind::kIpc);
  if (!a) return fail(TSR_INVALID_ARGUMENT, "%s: %p was not opened with ipc_open_handle", kOp, ptr);
  TSR_ZE_CHECK(kOp, zeMemCloseIpcHandle, b->devices[size_t(a->device)].context, ptr);
  return TSR_OK;
}

}  // namespace api
}  // namespace tessera::ze
