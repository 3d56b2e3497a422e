#include "state.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "errors.h"

#ifndef TESSERA_CUDA_DRIVER_LIBRARY
#define TESSERA_CUDA_DRIVER_LIBRARY "libcuda.so.1"
#endif

namespace tessera::cuda {
namespace {

std::mutex g_lifecycle_mutex;  // serialises init and finalize
int g_references = 0;          // guarded by g_lifecycle_mutex
std::atomic<Backend*> g_backend{nullptr};
// Why device_count is 0; rewritten only under g_lifecycle_mutex by a failing init.
char g_reason[768] = "backend not initialised (call init first)";

void set_reason(const char* text) {
  std::snprintf(g_reason, sizeof g_reason, "%s", text);
}

// The driver library comes first: without it the runtime can only say "insufficient driver",
// while dlopen's own message says what is missing ("libcuda.so.1: cannot open shared object
// file: No such file or directory").
tsr_status open_driver(Backend& backend) {
  const char* library = TESSERA_CUDA_DRIVER_LIBRARY;
  if (library[0] == '\0') return TSR_OK;  // this stack's runtime is its own driver
  backend.driver = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (backend.driver == nullptr) {
    const char* why = dlerror();
    return fail(TSR_NO_DRIVER, "the driver is not installed: %s", why ? why : library);
  }
  dlerror();
  backend.address_range = reinterpret_cast<decltype(backend.address_range)>(
      dlsym(backend.driver, "cuMemGetAddressRange_v2"));
  return TSR_OK;
}

tsr_status open_devices(Backend& backend) {
  int count = 0;
  rtError_t error = rtGetDeviceCount(&count);
  if (error == rtErrorNoDevice || (error == rtSuccess && count == 0)) {
    (void)rtGetLastError();
    return fail(TSR_NO_DEVICE, "%s",
                error == rtSuccess ? "the driver reports 0 devices" : rtGetErrorString(error));
  }
  if (error == rtErrorInsufficientDriver) {
    int runtime = 0;
    int driver = 0;
    (void)rtRuntimeGetVersion(&runtime);
    (void)rtDriverGetVersion(&driver);
    (void)rtGetLastError();
    return fail(TSR_VERSION_MISMATCH, "%s (runtime %d.%d, driver supports %d.%d)",
                rtGetErrorString(error), runtime / 1000, runtime % 1000 / 10, driver / 1000,
                driver % 1000 / 10);
  }
  if (error != rtSuccess) {
    tsr_status s = fail_runtime(error, "init", TSR_RT_NAME(rtGetDeviceCount));
    return s == TSR_INTERNAL ? fail(TSR_UNAVAILABLE, "%s", last_error_message()) : s;
  }
  backend.devices.resize(size_t(count));
  for (int i = 0; i < count; ++i) {
    if (tsr_status s = describe_device(i, &backend.devices[size_t(i)]); s != TSR_OK) return s;
  }
  return TSR_OK;
}

}  // namespace

Backend* current_backend() {
  return g_backend.load(std::memory_order_acquire);
}

const char* no_device_reason() {
  return g_reason;
}

tsr_status backend_init(const tsr_init_options* options) {
  return guarded("init", [&] {
    std::lock_guard lock(g_lifecycle_mutex);
    if (g_references > 0) {
      ++g_references;
      return TSR_OK;
    }
    // No options are read today; the struct is accepted for forward compatibility.
    (void)options;
    auto backend = std::make_unique<Backend>();
    tsr_status s = open_driver(*backend);
    if (s == TSR_OK) s = open_devices(*backend);
    if (s != TSR_OK) {
      set_reason(last_error_message());
      if (backend->driver != nullptr) dlclose(backend->driver);
      return s;
    }
    backend->signals = create_signal_pool();
    const bool blas = gemm_available();
    int runtime = 0;
    (void)rtRuntimeGetVersion(&runtime);
    log(TSR_LOG_INFO, "%s backend: %zu device(s), %s runtime %d.%d, GEMM %s", kBackendName,
        backend->devices.size(), TSR_RT_PREFIX_NAME, runtime / 1000, runtime % 1000 / 10,
        blas ? "available" : "unavailable");
    g_backend.store(backend.release(), std::memory_order_release);
    g_references = 1;
    return TSR_OK;
  });
}

void backend_finalize() {
  std::lock_guard lock(g_lifecycle_mutex);
  if (g_references == 0) return;
  if (--g_references > 0) return;
  Backend* backend = g_backend.exchange(nullptr, std::memory_order_acq_rel);
  release_host_signals(backend->signals);  // so that no stream below waits on one forever
  backend->streams.clear();                // ~Stream waits for each stream's work
  backend->events.clear();
  unload_all_modules(*backend);  // after the streams: no launch of theirs is still running
  destroy_signal_pool(backend->signals);
  gemm_shutdown();
  for (const Allocation& a : backend->memory.take_all()) {
    DeviceGuard guard;
    if (a.device >= 0 && guard.enter("finalize", a.device) != TSR_OK) continue;
    switch (a.kind) {
      case AllocationKind::kDevice: (void)rtFree(a.base); break;
      case AllocationKind::kPinned: (void)rtFreeHost(a.base); break;
      case AllocationKind::kRegistered: (void)rtHostUnregister(a.base); break;
      case AllocationKind::kIpc:
#if TESSERA_CUDA_HAVE_IPC
        (void)rtIpcCloseMemHandle(a.base);
#endif
        break;
    }
  }
  (void)rtGetLastError();
  // The driver library stays mapped: the runtime linked into this backend keeps using it.
  set_reason("backend finalized (call init again)");
  delete backend;
}

tsr_status require_backend(const char* operation, Backend** out) {
  Backend* backend = current_backend();
  if (backend == nullptr) {
    return fail(TSR_FAILED_PRECONDITION, "%s: %s backend not initialised (call init first)",
                operation, kBackendName);
  }
  *out = backend;
  return TSR_OK;
}

tsr_status check_device(const Backend& backend, const char* operation, int32_t index) {
  if (index < 0 || size_t(index) >= backend.devices.size()) {
    return fail(TSR_INVALID_ARGUMENT, "%s: device %d does not exist (the %s backend has %zu)",
                operation, index, kBackendName, backend.devices.size());
  }
  return TSR_OK;
}

tsr_status lookup_stream(Backend& backend, const char* operation, tsr_stream handle,
                         std::shared_ptr<Stream>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: stream is NULL", operation);
  std::shared_ptr<Stream> stream =
      backend.streams.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (stream == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: stream %p is not a live stream of the %s backend (destroyed, or never "
                "created)",
                operation, static_cast<void*>(handle), kBackendName);
  }
  *out = std::move(stream);
  return TSR_OK;
}

tsr_status lookup_event(Backend& backend, const char* operation, const char* param,
                        tsr_event handle, std::shared_ptr<Event>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, param);
  std::shared_ptr<Event> event = backend.events.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (event == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is not a live event of the %s backend (destroyed, or never created)",
                operation, param, static_cast<void*>(handle), kBackendName);
  }
  *out = std::move(event);
  return TSR_OK;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)rtSetDevice(previous_);
}

tsr_status DeviceGuard::enter(const char* operation, int32_t device) {
  int current = -1;
  if (rtGetDevice(&current) != rtSuccess) {
    (void)rtGetLastError();
    current = -1;
  }
  if (current == device) return TSR_OK;
  TSR_RT_CHECK(operation, rtSetDevice, device);
  previous_ = current;
  return TSR_OK;
}

void copy_prefix(void* out, const void* full, size_t full_size) {
  size_t wanted;
  std::memcpy(&wanted, out, sizeof wanted);
  size_t bytes = std::min(wanted, full_size);
  if (bytes > sizeof(size_t)) {
    std::memcpy(static_cast<char*>(out) + sizeof(size_t),
                static_cast<const char*>(full) + sizeof(size_t), bytes - sizeof(size_t));
  }
  if (wanted > full_size) std::memset(static_cast<char*>(out) + full_size, 0, wanted - full_size);
}

// ---- memory registry --------------------------------------------------------------------------

const char* allocation_kind_name(AllocationKind kind) {
  switch (kind) {
    case AllocationKind::kDevice: return "device allocation";
    case AllocationKind::kPinned: return "pinned host allocation";
    case AllocationKind::kRegistered: return "registered host range";
    case AllocationKind::kIpc: return "IPC mapping";
  }
  return "allocation";
}

bool MemoryRegistry::insert(const Allocation& allocation) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(allocation.base);
  uintptr_t end = begin + std::max<size_t>(allocation.size, 1);
  std::unique_lock lock(mutex_);
  auto next = by_base_.lower_bound(begin);
  if (next != by_base_.end() && next->first < end) return false;
  if (next != by_base_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + std::max<size_t>(prev->second.size, 1) > begin) return false;
  }
  by_base_.emplace(begin, allocation);
  return true;
}

std::optional<Allocation> MemoryRegistry::find(const void* ptr) const {
  uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  if (address - it->first >= std::max<size_t>(it->second.size, 1)) return std::nullopt;
  return it->second;
}

std::optional<Allocation> MemoryRegistry::take(const void* base, AllocationKind kind) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it == by_base_.end() || it->second.kind != kind) return std::nullopt;
  Allocation allocation = it->second;
  by_base_.erase(it);
  return allocation;
}

std::vector<Allocation> MemoryRegistry::take_all() {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> out;
  for (auto& [base, allocation] : by_base_) out.push_back(allocation);
  by_base_.clear();
  return out;
}

}  // namespace tessera::cuda
