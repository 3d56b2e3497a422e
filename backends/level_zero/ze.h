// The Level Zero backend's shared state: the loader's entry points (dlopen'ed, so the plugin loads
// on machines without libze_loader), the per-thread last error, the device list, the allocation
// registry, and the stream/event objects. See README.md.
#pragma once

#include <level_zero/ze_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/hal/backend_abi.h"

namespace tessera::ze {

// Every Level Zero call the backend makes, resolved from the loader at init.
// clang-format off
#define TSR_ZE_FUNCTIONS(X) \
  X(zeInit) \
  X(zeDriverGet) \
  X(zeDeviceGet) \
  X(zeDeviceGetProperties) \
  X(zeDeviceGetMemoryProperties) \
  X(zeDeviceGetCommandQueueGroupProperties) \
  X(zeDeviceCanAccessPeer) \
  X(zeContextCreate) \
  X(zeContextDestroy) \
  X(zeMemAllocDevice) \
  X(zeMemAllocHost) \
  X(zeMemFree) \
  X(zeCommandListCreateImmediate) \
  X(zeCommandListDestroy) \
  X(zeCommandListAppendMemoryCopy) \
  X(zeCommandListAppendMemoryFill) \
  X(zeCommandListAppendBarrier) \
  X(zeCommandListAppendSignalEvent) \
  X(zeCommandListAppendWaitOnEvents) \
  X(zeEventPoolCreate) \
  X(zeEventPoolDestroy) \
  X(zeEventCreate) \
  X(zeEventDestroy) \
  X(zeEventHostSynchronize) \
  X(zeEventQueryStatus) \
  X(zeEventHostReset) \
  X(zeEventQueryKernelTimestamp) \
  X(zeMemGetIpcHandle) \
  X(zeMemOpenIpcHandle) \
  X(zeMemCloseIpcHandle) \
  X(zeEventHostSignal) \
  X(zeDeviceGetModuleProperties) \
  X(zeModuleCreate) \
  X(zeModuleDestroy) \
  X(zeModuleBuildLogGetString) \
  X(zeModuleBuildLogDestroy) \
  X(zeKernelCreate) \
  X(zeKernelDestroy) \
  X(zeKernelSetArgumentValue) \
  X(zeKernelSetGroupSize) \
  X(zeKernelSuggestGroupSize) \
  X(zeCommandListAppendLaunchKernel) \
  X(zeDeviceGetComputeProperties) \
  X(zeKernelGetProperties)
// clang-format on

struct Loader {
#define TSR_ZE_DECLARE(name) decltype(&::name) name = nullptr;
  TSR_ZE_FUNCTIONS(TSR_ZE_DECLARE)
#undef TSR_ZE_DECLARE
  // Optional extension (ZE_extension_pci_properties); NULL leaves pci_bus_id empty.
  ze_result_t (*zeDevicePciGetPropertiesExt)(ze_device_handle_t,
                                             ze_pci_ext_properties_t*) = nullptr;
};
const Loader& ze();  // valid between a successful init and the last finalize

// ---- errors and logging -----------------------------------------------------------------------
extern const char* const kBackendName;  // "level_zero"
tsr_status fail(tsr_status status, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));
const char* last_error_message() noexcept;
const char* result_name(ze_result_t result) noexcept;
tsr_status status_of(ze_result_t result) noexcept;
// Fails with status_of(result) and "<operation>: <call> failed: <NAME> (0x...)".
tsr_status fail_ze(ze_result_t result, const char* operation, const char* call) noexcept;
#define TSR_ZE_CHECK(operation, fn, ...)                              \
  do {                                                                \
    ze_result_t tsr_ze_result_ = ::tessera::ze::ze().fn(__VA_ARGS__); \
    if (tsr_ze_result_ != ZE_RESULT_SUCCESS) {                        \
      return ::tessera::ze::fail_ze(tsr_ze_result_, operation, #fn);  \
    }                                                                 \
  } while (0)
void set_host_info(const tsr_host_info* host) noexcept;
void log(tsr_log_level level, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// Runs `body`, turning C++ exceptions into statuses.
template <typename Body>
tsr_status guarded(const char* operation, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TSR_RESOURCE_EXHAUSTED, "%s: out of host memory", operation);
  } catch (...) {
    return fail(TSR_INTERNAL, "%s: unexpected exception", operation);
  }
}

// ---- state ------------------------------------------------------------------------------------
struct Device {
  ze_driver_handle_t driver = nullptr;
  ze_context_handle_t context = nullptr;  // one per driver, shared by its devices
  ze_device_handle_t handle = nullptr;
  uint32_t compute_ordinal = 0;  // command queue group with compute (and copy)
  double timer_ns_per_tick = 1.0;
  uint64_t timestamp_mask = ~0ull;
  tsr_device_properties properties{};
  ze_device_compute_properties_t compute{};  // launch limits (module_entries.cc)
};

struct CallbackQueue;  // callback.cc
struct HostSignal;     // host_signal.cc

struct Stream {
  int32_t device = 0;
  ze_command_list_handle_t list = nullptr;  // immediate, in order
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t sync = nullptr;  // signalled behind the work to wait for it
  std::mutex mutex;                  // immediate lists are not thread-safe; guards the counters
  uint64_t submitted = 0;            // commands appended so far
  uint64_t done = 0;                 // commands known complete
  uint64_t armed = 0;                // `sync` is appended behind this many commands (0: not)
  // Cleanups (temporaries, callback events) run by drain once `done` reaches the position.
  std::vector<std::pair<uint64_t, std::function<void()>>> deferred;
  CallbackQueue* callbacks = nullptr;  // started by the first stream_add_callback
  // Host-signal waits appended and perhaps not yet satisfied (host_signal.cc), pruned at each
  // new wait: while one is unsatisfied, stream_destroy retires the stream instead of draining it.
  std::vector<std::pair<std::shared_ptr<HostSignal>, uint64_t>> signal_waits;
};

struct Event {
  int32_t device = 0;
  uint32_t flags = 0;
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t handle = nullptr;
  std::atomic<bool> recorded{false};
};

enum class Kind { kDevice, kHost, kIpc };
struct Allocation {
  void* base = nullptr;
  size_t size = 0;
  Kind kind = Kind::kDevice;
  int32_t device = -1;
};

struct DeviceKernels;  // module.cc
struct UserModule;     // module_entries.cc: a module loaded through module_load
struct UserKernel;     // module_entries.cc: a kernel of one

struct Backend {
  void* library = nullptr;
  Loader loader;
  std::vector<ze_context_handle_t> contexts;
  std::vector<Device> devices;
  std::mutex mutex;  // guards the maps and sets below
  std::map<uintptr_t, Allocation> memory;
  std::vector<size_t> allocated;  // bytes of device memory this process holds, per device
  // Handles are never-reused serials (tagged), so a destroyed handle is detected, not reused.
  uint64_t next_handle = 1;
  std::unordered_map<uint64_t, Stream*> streams;  // handle -> stream
  std::unordered_map<uint64_t, Event*> events;
  // Events destroyed or re-recorded while pending: released once they complete (reap_events).
  std::vector<Event*> retired;
  // Host signals by handle (host_signal.cc), and streams destroyed while waiting on one nobody had
  // raised: released by reap_streams once idle, or at the last finalize.
  std::unordered_map<uint64_t, std::shared_ptr<HostSignal>> signals;
  std::vector<Stream*> retired_streams;
  // Kernel modules per device, built on first use (module.cc); guarded by kernels_mutex.
  std::mutex kernels_mutex;
  std::map<int32_t, std::shared_ptr<DeviceKernels>> kernels;
  // Modules and kernels of module_load / module_get_function, by tagged handle; guarded by mutex.
  std::unordered_map<uint64_t, std::shared_ptr<UserModule>> user_modules;
  std::unordered_map<uint64_t, std::shared_ptr<UserKernel>> user_kernels;
};

Backend* current();
const char* no_device_reason();  // why device_count is 0
tsr_status require(const char* operation, Backend** out);
tsr_status check_device(const Backend& backend, const char* operation, int32_t device);
std::optional<Allocation> find_allocation(Backend& backend, const void* ptr);
tsr_status lookup_stream(Backend& backend, const char* operation, tsr_stream handle, Stream** out);
// Removes and returns a live handle's object (NULL when not live).
Stream* take_stream(Backend& backend, tsr_stream handle);
Event* take_event(Backend& backend, tsr_event handle);
tsr_status lookup_event(Backend& backend, const char* operation, tsr_event handle, Event** out);
void destroy_stream(Stream* stream);
void destroy_event(Event* event);
// Releases retired events that have completed (all of them, waiting, when `wait`).
void reap_events(Backend& backend, bool wait);
void stop_callbacks(Stream& stream);  // callback.cc: after the last drain, joins the worker
// host_signal.cc: true while a host-signal wait appended to `stream` is unsatisfied.
bool waits_on_host_signal(Stream& stream);
// host_signal.cc: raises and forgets every signal (the last finalize, before streams go).
void release_host_signals(Backend& backend);
// stream.cc: destroys the retired streams that are idle now (all of them, waiting, when `all`).
void reap_streams(Backend& backend, bool all = false);
// Runs the deferred cleanups whose position the stream has passed. Caller holds stream.mutex.
void run_deferred(Stream& stream, bool all);

// Appends one command to `s` (in order on the immediate list) under s.mutex; `append` returns the
// ze_result_t of the call named `call`.
template <typename Append>
tsr_status submit(Stream& s, const char* operation, const char* call, Append&& append) {
  std::lock_guard lock(s.mutex);
  ze_result_t r = append();
  if (r != ZE_RESULT_SUCCESS) return fail_ze(r, operation, call);
  ++s.submitted;
  return TSR_OK;
}
tsr_status describe_device(const Loader& z, Device& device);  // devices.cc, at init
// module_entries.cc: destroys every module left (the last finalize, before the contexts).
void release_user_modules(Backend& backend);

// The text of a module build log (trailing NULs and newlines trimmed), destroying the log; ""
// for a NULL log. module.cc (the backend's own kernels) and module_entries.cc (users') share it.
std::string take_build_log(ze_module_build_log_handle_t log);

// Entries (backend_abi.h semantics), gathered by entry.cc.
namespace api {
int32_t device_count(const char** out_reason);
tsr_status device_properties(int32_t device, tsr_device_properties* out);
tsr_status memory_info(int32_t device, size_t* out_free, size_t* out_total);
tsr_status device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can_access);
tsr_status device_enable_peer_access(int32_t device, int32_t peer);
tsr_status device_malloc(int32_t device, size_t bytes, void** out_ptr);
tsr_status device_free(int32_t device, void* ptr);
tsr_status host_malloc_pinned(size_t bytes, void** out_ptr);
tsr_status host_free_pinned(void* ptr);
tsr_status pointer_attributes(const void* ptr, tsr_pointer_attributes* out);
tsr_status memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream);
tsr_status memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream);
tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream stream);
tsr_status stream_create(int32_t device, int32_t priority, tsr_stream* out_stream);
tsr_status stream_destroy(tsr_stream stream);
tsr_status stream_synchronize(tsr_stream stream);
tsr_status stream_query(tsr_stream stream);
tsr_status stream_wait_event(tsr_stream stream, tsr_event event);
tsr_status stream_add_callback(tsr_stream stream, tsr_host_fn fn, void* user_data);
tsr_status stream_add_callback_with_message(tsr_stream stream, tsr_host_msg_fn fn, void* user_data);
tsr_status host_signal_create(int32_t device, tsr_host_signal* out_signal);
tsr_status host_signal_destroy(tsr_host_signal signal);
tsr_status host_signal_raise(tsr_host_signal signal, uint64_t value);
tsr_status host_signal_query(tsr_host_signal signal, uint64_t* out_value);
tsr_status stream_wait_host_signal(tsr_stream stream, tsr_host_signal signal, uint64_t value);
tsr_status event_create(int32_t device, uint32_t flags, tsr_event* out_event);
tsr_status event_destroy(tsr_event event);
tsr_status event_record(tsr_event event, tsr_stream stream);
tsr_status event_synchronize(tsr_event event);
tsr_status event_query(tsr_event event);
tsr_status event_elapsed_time(tsr_event start, tsr_event end, float* out_ms);
tsr_status ipc_get_handle(void* device_ptr, tsr_ipc_handle* out_handle);
tsr_status ipc_open_handle(int32_t device, const tsr_ipc_handle* handle, void** out_ptr);
tsr_status ipc_close_handle(void* ptr);
tsr_status reduce_async(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                        tsr_dtype dtype, tsr_reduce_op op, tsr_stream stream);
tsr_status cast_async(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                      size_t count, tsr_stream stream);
tsr_status module_load(int32_t device, int32_t format, const void* image, size_t image_bytes,
                       const char* name, tsr_module* out_module);
tsr_status module_unload(tsr_module module);
tsr_status module_get_function(tsr_module module, const char* name, tsr_function* out_function);
tsr_status launch(tsr_stream stream, tsr_function function, const tsr_launch_config* config,
                  const tsr_kernel_arg* args, size_t arg_count);
}  // namespace api

}  // namespace tessera::ze
