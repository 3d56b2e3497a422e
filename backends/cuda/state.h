// The backend's process-wide state between the first init and the last finalize, the handle
// tables for streams and events, the registry of allocations, and the helpers every entry point
// uses to reach them and to make a device current.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "runtime_names.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::cuda {

// ---- handles ----------------------------------------------------------------------------------
// Streams and events are handed out as never-reused 64-bit ids with a kind tag in the low bits,
// not as runtime pointers: a destroyed, forged or wrong-kind handle is reported as
// TSR_INVALID_ARGUMENT instead of reaching the runtime (where it would be undefined behaviour).

inline constexpr uint64_t kStreamTag = 0x5;
inline constexpr uint64_t kEventTag = 0xE;
inline constexpr uint64_t kSignalTag = 0x9;
inline constexpr uint64_t kModuleTag = 0xA;
inline constexpr uint64_t kFunctionTag = 0xF;

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(uint64_t tag) : tag_(tag) {}
  uint64_t insert(std::shared_ptr<T> object);
  std::shared_ptr<T> find(uint64_t id) const;  // null when unknown, destroyed or another kind
  std::shared_ptr<T> remove(uint64_t id);      // null when not live
  std::vector<std::shared_ptr<T>> clear();

 private:
  const uint64_t tag_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<T>> objects_;
};

struct HostSignal;  // host_signal.cc

struct Stream {
  rtStream_t raw = nullptr;
  int32_t device = 0;
  // Host-signal waits enqueued here and perhaps not yet satisfied (host_signal.cc), pruned at
  // each new wait. While one is unsatisfied, destroying the stream does not synchronise it (that
  // would block until someone raises the signal): the runtime releases the stream once its work
  // is done, as cudaStreamDestroy does with a busy stream.
  std::mutex signal_mutex;
  std::vector<std::pair<std::shared_ptr<HostSignal>, uint64_t>> signal_waits;
  ~Stream();  // waits for the stream's work (but see signal_waits), then destroys it
};

struct Event {
  rtEvent_t raw = nullptr;
  int32_t device = 0;
  uint32_t flags = 0;                 // TSR_EVENT_*
  std::atomic<bool> recorded{false};  // elapsed time needs both events recorded
  ~Event();
};

// ---- memory registry --------------------------------------------------------------------------

enum class AllocationKind { kDevice, kPinned, kRegistered, kIpc };
const char* allocation_kind_name(AllocationKind kind);

struct Allocation {
  void* base = nullptr;
  size_t size = 0;  // 0 for an IPC mapping whose size the runtime cannot tell
  AllocationKind kind = AllocationKind::kDevice;
  int32_t device = -1;  // -1 for host memory
};

// Every range this backend handed out or registered, by base address. Thread-safe.
class MemoryRegistry {
 public:
  bool insert(const Allocation& allocation);              // false when it overlaps a known range
  std::optional<Allocation> find(const void* ptr) const;  // the range containing ptr
  std::optional<Allocation> take(const void* base, AllocationKind kind);
  std::vector<Allocation> take_all();

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> by_base_;
};

// ---- the backend ------------------------------------------------------------------------------

// What a launch may ask of a device (module.cc checks against it); 0 where the runtime did not say.
struct LaunchLimits {
  uint32_t threads_per_block = 0;
  uint32_t block[3] = {0, 0, 0};
  uint32_t grid[3] = {0, 0, 0};
  uint32_t shared_bytes = 0;  // per block, the opt-in maximum where the stack has one
};

struct DeviceInfo {
  tsr_device_properties properties{};  // filled once at init
  int32_t least_priority = 0;          // the runtime's range: least is 0, greatest negative
  int32_t greatest_priority = 0;
  LaunchLimits limits;
};

struct Module;    // module.cc: a loaded image
struct Function;  // module.cc: a kernel of one

struct SignalPool;  // host_signal.cc: live and retired host signals, their pinned pages

struct Backend {
  std::vector<DeviceInfo> devices;
  MemoryRegistry memory;
  HandleTable<Stream> streams{kStreamTag};
  HandleTable<Event> events{kEventTag};
  void* driver = nullptr;  // dlopen handle of the driver library, when one is configured
  // cuMemGetAddressRange from the driver, when it has one: sizes IPC mappings.
  int (*address_range)(unsigned long long* base, size_t* size, unsigned long long ptr) = nullptr;
  SignalPool* signals = nullptr;  // created at init, freed at the last finalize
  HandleTable<Module> modules{kModuleTag};
  HandleTable<Function> functions{kFunctionTag};
};

// The live backend, or NULL before the first init and after the last finalize.
Backend* current_backend();
tsr_status backend_init(const tsr_init_options* options);
void backend_finalize();
// Why there are no devices (init failed, or not initialised yet). Static storage.
const char* no_device_reason();

// Sets *out to the live backend, or fails with TSR_FAILED_PRECONDITION naming `operation`.
tsr_status require_backend(const char* operation, Backend** out);
// Fails with TSR_INVALID_ARGUMENT unless `index` is a device of `backend`.
tsr_status check_device(const Backend& backend, const char* operation, int32_t index);

tsr_status lookup_stream(Backend& backend, const char* operation, tsr_stream handle,
                         std::shared_ptr<Stream>* out);
tsr_status lookup_event(Backend& backend, const char* operation, const char* param,
                        tsr_event handle, std::shared_ptr<Event>* out);

// Makes `device` current on the calling thread for the guard's lifetime and restores the
// previous one afterwards, so the application's own current device is never changed.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  tsr_status enter(const char* operation, int32_t device);

 private:
  int previous_ = -1;
};

// Copies the first min(out->struct_size, full_size) bytes of `full` into `out`, keeping
// out->struct_size and zeroing what a newer caller has beyond full_size.
void copy_prefix(void* out, const void* full, size_t full_size);

// devices.cc: fills info for device `index` at init.
tsr_status describe_device(int32_t index, DeviceInfo* info);
// gemm.cc: loads the BLAS library (once); true when gemm_async can run.
bool gemm_available();
// gemm.cc: releases per-device BLAS handles (last finalize).
void gemm_shutdown();
// host_signal.cc: the pool of host signals, made at init. At the last finalize,
// release_host_signals raises every signal still alive or retired so no stream waits forever
// (before the streams are synchronised), and destroy_signal_pool frees what is left (after).
SignalPool* create_signal_pool();
void release_host_signals(SignalPool* pool);
void destroy_signal_pool(SignalPool* pool);
// host_signal.cc: whether this build and machine can wait on host signals at all (the driver's
// or the runtime's stream wait-value call is there); logs why not. Decides, once, whether the
// table's five host-signal entries are set. Devices that lack the feature refuse
// host_signal_create with TSR_UNIMPLEMENTED.
bool host_signals_available();
// host_signal.cc: true while a host-signal wait enqueued on `stream` is not yet satisfied.
bool waits_on_host_signal(Stream& stream);
// module.cc: the tsr_module_format bits module_load takes on this machine (0 when the driver or
// runtime lacks the module calls), and the unloading of every module left at the last finalize.
uint32_t module_formats();
void unload_all_modules(Backend& backend);

// ---- template definitions ---------------------------------------------------------------------

inline uint64_t next_handle_serial() {
  static std::atomic<uint64_t> serial{1};
  return serial.fetch_add(1, std::memory_order_relaxed);
}

template <typename T>
uint64_t HandleTable<T>::insert(std::shared_ptr<T> object) {
  uint64_t id = (next_handle_serial() << 4) | tag_;
  std::unique_lock lock(mutex_);
  objects_.emplace(id, std::move(object));
  return id;
}

template <typename T>
std::shared_ptr<T> HandleTable<T>::find(uint64_t id) const {
  if ((id & 0xf) != tag_) return nullptr;
  std::shared_lock lock(mutex_);
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : it->second;
}

template <typename T>
std::shared_ptr<T> HandleTable<T>::remove(uint64_t id) {
  std::unique_lock lock(mutex_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return nullptr;
  std::shared_ptr<T> object = std::move(it->second);
  objects_.erase(it);
  return object;
}

template <typename T>
std::vector<std::shared_ptr<T>> HandleTable<T>::clear() {
  std::unique_lock lock(mutex_);
  std::vector<std::shared_ptr<T>> out;
  for (auto& [id, object] : objects_) out.push_back(std::move(object));
  objects_.clear();
  return out;
}

}  // namespace tessera::cuda
