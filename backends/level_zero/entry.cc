// Lifecycle (init/finalize with the loader opened by dlopen), errors, logging and the table.
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "ze.h"

#ifndef TESSERA_ZE_LOADER
#define TESSERA_ZE_LOADER "libze_loader.so.1"
#endif
#if TESSERA_ZE_HAVE_KERNELS
#define TESSERA_ZE_KERNEL_NOTE "SPIR-V reduce/cast kernels"
#else
#define TESSERA_ZE_KERNEL_NOTE "no kernels"
#endif
#ifndef TESSERA_ZE_VERSION
#define TESSERA_ZE_VERSION "0"
#endif

namespace tessera::ze {

const char* const kBackendName = "level_zero";

namespace {

thread_local char t_error[1024] = {0};
std::atomic<tsr_log_fn> g_log{nullptr};
std::atomic<void*> g_log_user{nullptr};
std::atomic<int32_t> g_log_level{-1};

std::mutex g_lifecycle;
int g_references = 0;
std::atomic<Backend*> g_backend{nullptr};
char g_reason[768] = "backend not initialised (call init first)";

tsr_status open_loader(Backend& b) {
  b.library = dlopen(TESSERA_ZE_LOADER, RTLD_NOW | RTLD_LOCAL);
  if (b.library == nullptr) {
    const char* why = dlerror();
    return fail(TSR_NO_DRIVER, "the Level Zero loader is not installed: %s",
                why ? why : TESSERA_ZE_LOADER);
  }
#define TSR_ZE_RESOLVE(name)                                                                       \
  b.loader.name = reinterpret_cast<decltype(b.loader.name)>(dlsym(b.library, #name));              \
  if (b.loader.name == nullptr) {                                                                  \
    return fail(TSR_VERSION_MISMATCH, "%s: %s not found in %s", "init", #name, TESSERA_ZE_LOADER); \
  }
  TSR_ZE_FUNCTIONS(TSR_ZE_RESOLVE)
#undef TSR_ZE_RESOLVE
  b.loader.zeDevicePciGetPropertiesExt =
      reinterpret_cast<decltype(b.loader.zeDevicePciGetPropertiesExt)>(
          dlsym(b.library, "zeDevicePciGetPropertiesExt"));
  return TSR_OK;
}

tsr_status open_devices(Backend& b) {
  ze_result_t r = b.loader.zeInit(0);
  if (r != ZE_RESULT_SUCCESS) {
    return fail(TSR_NO_DRIVER,
                "zeInit failed: %s (0x%x): no Level Zero driver is installed or "
                "none could start",
                result_name(r), unsigned(r));
  }
  uint32_t drivers = 0;
  r = b.loader.zeDriverGet(&drivers, nullptr);
  if (r != ZE_RESULT_SUCCESS || drivers == 0) {
    return fail(TSR_NO_DRIVER, "zeDriverGet found no Level Zero driver (%s)", result_name(r));
  }
  std::vector<ze_driver_handle_t> handles(drivers);
  if (r = b.loader.zeDriverGet(&drivers, handles.data()); r != ZE_RESULT_SUCCESS) {
    return fail_ze(r, "init", "zeDriverGet");
  }
  for (ze_driver_handle_t driver : handles) {
    uint32_t count = 0;
    if (b.loader.zeDeviceGet(driver, &count, nullptr) != ZE_RESULT_SUCCESS || count == 0) continue;
    std::vector<ze_device_handle_t> devices(count);
    if (r = b.loader.zeDeviceGet(driver, &count, devices.data()); r != ZE_RESULT_SUCCESS) {
      return fail_ze(r, "init", "zeDeviceGet");
    }
    ze_context_desc_t desc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    ze_context_handle_t context = nullptr;
    if (r = b.loader.zeContextCreate(driver, &desc, &context); r != ZE_RESULT_SUCCESS) {
      return fail_ze(r, "init", "zeContextCreate");
    }
    b.contexts.push_back(context);
    for (ze_device_handle_t handle : devices) {
      Device d;
      d.driver = driver;
      d.context = context;
      d.handle = handle;
      b.devices.push_back(d);
    }
  }
  if (b.devices.empty()) {
    return fail(TSR_NO_DEVICE, "Level Zero: %u driver(s), no devices", unsigned(drivers));
  }
  b.allocated.assign(b.devices.size(), 0);
  for (size_t i = 0; i < b.devices.size(); ++i) {
    if (tsr_status s = describe_device(b.loader, b.devices[i]); s != TSR_OK) return s;
  }
  return TSR_OK;
}

void release(Backend* b) {
  if (b->library != nullptr && b->loader.zeContextDestroy != nullptr) {
    for (ze_context_handle_t c : b->contexts) (void)b->loader.zeContextDestroy(c);
  }
  // The loader stays mapped: drivers it started may keep threads alive.
  delete b;
}

tsr_status init(const tsr_init_options*) {
  return guarded("init", [&] {
    std::lock_guard lock(g_lifecycle);
    if (g_references > 0) {
      ++g_references;
      return TSR_OK;
    }
    auto* b = new Backend;
    tsr_status s = open_loader(*b);
    if (s == TSR_OK) s = open_devices(*b);
    if (s != TSR_OK) {
      std::snprintf(g_reason, sizeof g_reason, "%.767s", t_error);
      release(b);
      return s;
    }
    log(TSR_LOG_INFO, "level_zero backend: %zu device(s)", b->devices.size());
    g_backend.store(b, std::memory_order_release);
    g_references = 1;
    return TSR_OK;
  });
}

void finalize() {
  std::lock_guard lock(g_lifecycle);
  if (g_references == 0 || --g_references > 0) return;
  // Still published while releasing: destroy_stream/destroy_event call through ze().
  Backend* b = g_backend.load(std::memory_order_acquire);
  release_host_signals(*b);  // so that no stream below waits on one forever
  for (auto& [id, s] : b->streams) destroy_stream(s);
  reap_streams(*b, true);
  for (auto& [id, e] : b->events) destroy_event(e);
  reap_events(*b, true);
  b->kernels.clear();  // kernels and modules, before their contexts go
  release_user_modules(*b);
  for (auto& [base, a] : b->memory) {
    ze_context_handle_t ctx = b->devices[size_t(a.device < 0 ? 0 : a.device)].context;
    if (a.kind == Kind::kIpc) {
      (void)b->loader.zeMemCloseIpcHandle(ctx, a.base);
    } else {
      (void)b->loader.zeMemFree(ctx, a.base);
    }
  }
  g_backend.store(nullptr, std::memory_order_release);
  std::snprintf(g_reason, sizeof g_reason, "backend finalized (call init again)");
  release(b);
}

const char* last_error_entry() {
  return t_error;
}

tsr_backend_api_v1 make_table() {
  tsr_backend_api_v1 t{};
  t.struct_size = sizeof t;
  t.abi_major = TSR_BACKEND_ABI_MAJOR;
  t.abi_minor = TSR_BACKEND_ABI_MINOR;
  t.name = "level_zero";
  t.version = "tessera level_zero backend " TESSERA_ZE_VERSION " (" TESSERA_ZE_LOADER
              " by dlopen, " TESSERA_ZE_KERNEL_NOTE ")";
  t.init = &init;
  t.finalize = &finalize;
  t.last_error = &last_error_entry;
  t.device_count = &api::device_count;
  t.device_properties = &api::device_properties;
  t.device_malloc = &api::device_malloc;
  t.device_free = &api::device_free;
  t.host_malloc_pinned = &api::host_malloc_pinned;
  t.host_free_pinned = &api::host_free_pinned;
  t.memory_info = &api::memory_info;
  t.pointer_attributes = &api::pointer_attributes;
  t.memcpy_async = &api::memcpy_async;
  t.memset_async = &api::memset_async;
  t.memcpy_peer_async = &api::memcpy_peer_async;
  t.stream_create = &api::stream_create;
  t.stream_destroy = &api::stream_destroy;
  t.stream_synchronize = &api::stream_synchronize;
  t.stream_query = &api::stream_query;
  t.stream_wait_event = &api::stream_wait_event;
  t.event_create = &api::event_create;
  t.event_destroy = &api::event_destroy;
  t.event_record = &api::event_record;
  t.event_synchronize = &api::event_synchronize;
  t.event_query = &api::event_query;
  t.event_elapsed_time = &api::event_elapsed_time;
  t.device_can_access_peer = &api::device_can_access_peer;
  t.device_enable_peer_access = &api::device_enable_peer_access;
  t.ipc_get_handle = &api::ipc_get_handle;
  t.ipc_open_handle = &api::ipc_open_handle;
  t.ipc_close_handle = &api::ipc_close_handle;
  t.stream_add_callback = &api::stream_add_callback;
  t.stream_add_callback_with_message = &api::stream_add_callback_with_message;
  t.host_signal_create = &api::host_signal_create;  // all five (host_signal.cc)
  t.host_signal_destroy = &api::host_signal_destroy;
  t.host_signal_raise = &api::host_signal_raise;
  t.host_signal_query = &api::host_signal_query;
  t.stream_wait_host_signal = &api::stream_wait_host_signal;
  t.module_load = &api::module_load;  // all four (module_entries.cc)
  t.module_unload = &api::module_unload;
  t.module_get_function = &api::module_get_function;
  t.launch = &api::launch;
#if TESSERA_ZE_HAVE_KERNELS
  t.reduce_async = &api::reduce_async;
  t.cast_async = &api::cast_async;
#endif
  // host_register, gemm_async and collectives stay NULL (README.md); so do reduce_async and
  // cast_async when the build had no clang/llvm-spirv for the kernels.
  return t;
}

}  // namespace

const Loader& ze() {
  return g_backend.load(std::memory_order_acquire)->loader;
}

Backend* current() {
  return g_backend.load(std::memory_order_acquire);
}

const char* no_device_reason() {
  return g_reason;
}

tsr_status fail(tsr_status status, const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_error, sizeof t_error, format, args);
  va_end(args);
  return status;
}

const char* last_error_message() noexcept {
  return t_error;
}

const char* result_name(ze_result_t r) noexcept {
  switch (r) {
#define TSR_ZE_NAME(x) \
  case x: return #x;
    TSR_ZE_NAME(ZE_RESULT_SUCCESS)
    TSR_ZE_NAME(ZE_RESULT_NOT_READY)
    TSR_ZE_NAME(ZE_RESULT_ERROR_DEVICE_LOST)
    TSR_ZE_NAME(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    TSR_ZE_NAME(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNINITIALIZED)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_SIZE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_ENUMERATION)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
    TSR_ZE_NAME(ZE_RESULT_ERROR_NOT_AVAILABLE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_UNKNOWN)
    TSR_ZE_NAME(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_MODULE_LINK_FAILURE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_NAME)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION)
    TSR_ZE_NAME(ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION)
#undef TSR_ZE_NAME
    default: return "ZE_RESULT_ERROR (unlisted)";
  }
}

tsr_status status_of(ze_result_t r) noexcept {
  switch (r) {
    case ZE_RESULT_SUCCESS: return TSR_OK;
    case ZE_RESULT_NOT_READY: return TSR_NOT_READY;
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: return TSR_RESOURCE_EXHAUSTED;
    case ZE_RESULT_ERROR_INVALID_ARGUMENT:
    case ZE_RESULT_ERROR_INVALID_NULL_HANDLE:
    case ZE_RESULT_ERROR_INVALID_NULL_POINTER:
    case ZE_RESULT_ERROR_INVALID_SIZE:
    case ZE_RESULT_ERROR_INVALID_ENUMERATION:
    case ZE_RESULT_ERROR_MODULE_BUILD_FAILURE:
    case ZE_RESULT_ERROR_MODULE_LINK_FAILURE:
    case ZE_RESULT_ERROR_INVALID_NATIVE_BINARY:
    case ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX:
    case ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE:
    case ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION:
    case ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION: return TSR_INVALID_ARGUMENT;
    case ZE_RESULT_ERROR_INVALID_KERNEL_NAME: return TSR_NOT_FOUND;
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
    case ZE_RESULT_ERROR_UNSUPPORTED_SIZE:
    case ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT: return TSR_UNIMPLEMENTED;
    case ZE_RESULT_ERROR_UNSUPPORTED_VERSION: return TSR_VERSION_MISMATCH;
    case ZE_RESULT_ERROR_UNINITIALIZED: return TSR_NO_DRIVER;
    case ZE_RESULT_ERROR_DEVICE_LOST: return TSR_UNAVAILABLE;
    case ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS: return TSR_PERMISSION_DENIED;
    default: return TSR_INTERNAL;
  }
}

tsr_status fail_ze(ze_result_t r, const char* operation, const char* call) noexcept {
  return fail(status_of(r), "%s: %s failed: %s (0x%x)", operation, call, result_name(r),
              unsigned(r));
}

void set_host_info(const tsr_host_info* host) noexcept {
  constexpr size_t kEnd = offsetof(tsr_host_info, log_level) + sizeof(int32_t);
  tsr_log_fn fn = nullptr;
  if (host != nullptr && host->struct_size >= kEnd) {
    fn = host->log;
    g_log_user.store(host->log_user_data);
    g_log_level.store(fn ? host->log_level : -1);
  }
  g_log.store(fn);
}

void log(tsr_log_level level, const char* format, ...) noexcept {
  tsr_log_fn fn = g_log.load();
  if (fn == nullptr || int32_t(level) > g_log_level.load()) return;
  char line[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  fn(g_log_user.load(), level, line);
}

tsr_status require(const char* operation, Backend** out) {
  Backend* b = current();
  if (b == nullptr) {
    return fail(TSR_FAILED_PRECONDITION,
                "%s: level_zero backend not initialised (call init "
                "first)",
                operation);
  }
  *out = b;
  return TSR_OK;
}

tsr_status check_device(const Backend& b, const char* operation, int32_t device) {
  if (device < 0 || size_t(device) >= b.devices.size()) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: device %d does not exist (the level_zero backend has "
                "%zu)",
                operation, device, b.devices.size());
  }
  return TSR_OK;
}

std::optional<Allocation> find_allocation(Backend& b, const void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(b.mutex);
  auto it = b.memory.upper_bound(address);
  if (it == b.memory.begin()) return std::nullopt;
  --it;
  if (address - it->first >= (it->second.size ? it->second.size : 1)) return std::nullopt;
  return it->second;
}

}  // namespace tessera::ze

extern "C" TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(
    const tsr_host_info* host) {
  tessera::ze::set_host_info(host);
  static const tsr_backend_api_v1 table = tessera::ze::make_table();
  return &table;
}
