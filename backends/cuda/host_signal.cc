// Host signals (backend_abi.h, minor 2): a 64-bit word in mapped pinned memory that the host raises
// with an atomic store and a stream waits on with the "wait until *word >= value" stream memory
// operation, so a host-driven operation (a collective) sits on a stream without holding a host
// thread. The wait comes from the driver (cuStreamWaitValue64_v2 through dlopen, the CUDA runtime
// has none) or, on stacks that have it in the runtime (HIP), from TSR_RT_STREAM_WAIT_VALUE64
// (runtime_names.h).
//
// The device compares (int64_t)(*word - value) >= 0, so the word holds min(counter, 2^63 - 1) and
// waits above 2^63 - 1 are refused: every accepted wait is then exact, and 2^63 - 1 releases all of
// them. The full 64-bit counter lives on the host for host_signal_query.
//
// Words are 64-byte slots in 4 KiB pages, never freed before the last finalize: freeing pinned
// memory may synchronise the device, which would block while any other stream waits on a signal.
// A destroyed signal releases its waiters (word = 2^63 - 1) and its slot is reused only after
// every stream that waited on it is past the wait (an event recorded behind each wait).
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "api.h"
#include "driver_library.h"
#include "errors.h"
#include "state.h"

// CUDA's CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (for the _v2 wait) and its _V1 twin
// (for the unversioned legacy wait); a clone with other numbers overrides them.
#ifndef TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64
#define TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64 122
#endif
#ifndef TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64_V1
#define TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64_V1 93
#endif

namespace tessera::cuda {

constexpr uint64_t kWordMax = uint64_t(INT64_MAX);  // the largest value the device compares exactly
constexpr size_t kPageBytes = 4096;
constexpr size_t kSlotBytes = 64;  // one cache line per signal: raises of different signals
                                   // do not contend

struct HostSignal {
  int32_t device = 0;
  uint64_t* word = nullptr;          // min(counter, kWordMax), read by the device
  std::atomic<uint64_t> counter{0};  // what host_signal_query reports
  std::mutex mutex;                  // guards the fields below; held while a wait is enqueued
  bool destroyed = false;
  bool untracked = false;  // a wait was enqueued without its event: never reuse the slot
  struct Mark {
    uint64_t stream;  // the stream's handle id: never reused, unlike the runtime's pointer
    int32_t device;
    rtEvent_t event;  // recorded behind this stream's latest wait on the signal
  };
  std::vector<Mark> marks;
};

struct SignalPool {
  HandleTable<HostSignal> live{kSignalTag};
  std::mutex mutex;  // guards the vectors below
  std::vector<void*> pages;
  std::vector<uint64_t*> free_words;                 // slots no device reads any more
  std::vector<std::shared_ptr<HostSignal>> retired;  // destroyed, streams maybe still waiting
};

namespace {

// Raises *word to max(*word, min(value, kWordMax)) with a release store: whatever the host wrote
// before the raise is visible to the work the wait releases. Lock-free, never blocks.
void raise_word(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t> ref(*word);
  const uint64_t target = std::min(value, kWordMax);
  uint64_t old = ref.load(std::memory_order_relaxed);
  while (old < target && !ref.compare_exchange_weak(old, target, std::memory_order_release,
                                                    std::memory_order_relaxed)) {
  }
}

void raise_counter(HostSignal& signal, uint64_t value) {
  uint64_t old = signal.counter.load(std::memory_order_relaxed);
  while (old < value && !signal.counter.compare_exchange_weak(old, value, std::memory_order_acq_rel,
                                                              std::memory_order_relaxed)) {
  }
  raise_word(signal.word, value);
}

// ---- the wait operation ---------------------------------------------------------------------

#ifdef TSR_RT_STREAM_WAIT_VALUE64
// The runtime has it (HIP): nothing to resolve.
const char* wait_unavailable_reason() {
  return nullptr;
}
tsr_status device_can_wait(int32_t device, const char* op) {
  int supported = 0;
  rtError_t error = TSR_RT_CAN_WAIT_VALUE64(device, &supported);
  if (error != rtSuccess) return fail_runtime(error, op, "the stream wait-value attribute query");
  if (!supported) {
    return fail(TSR_UNIMPLEMENTED,
                "%s: device %d cannot wait on a memory value (the runtime's stream wait-value "
                "attribute is 0)",
                op, device);
  }
  return TSR_OK;
}
tsr_status enqueue_wait(const char* op, rtStream_t stream, void* device_ptr, uint64_t value) {
  rtError_t error = TSR_RT_STREAM_WAIT_VALUE64(stream, device_ptr, value);
  if (error != rtSuccess) return fail_runtime(error, op, "the runtime's stream wait-value");
  return TSR_OK;
}
#else
// The driver's stream memory operations, resolved once with dlopen (no link-time dependency, so
// the plugin still loads without a driver). CUresult is an int; CUstream is the runtime's stream.
struct DriverWait {
  int (*wait)(rtStream_t stream, unsigned long long address, unsigned long long value,
              unsigned flags) = nullptr;
  int (*device_get)(int* device, int ordinal) = nullptr;
  int (*attribute)(int* value, int attribute, int device) = nullptr;
  int (*error_name)(int result, const char** text) = nullptr;
  int (*error_string)(int result, const char** text) = nullptr;
  int support_attribute = 0;
  char wait_name[96] = "";
  char why[768] = "";  // why `wait` is NULL
};

const DriverWait& driver_wait() {
  static const DriverWait* resolved = [] {
    auto* d = new DriverWait;  // lives as long as the process, as the driver library does
    void* library =
        open_driver_library("the runtime has no stream wait-value call", d->why, sizeof d->why);
    if (library == nullptr) return d;
    resolve_driver_symbol(library, "StreamWaitValue64_v2", &d->wait);
    d->support_attribute = TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64;
    std::snprintf(d->wait_name, sizeof d->wait_name, "%sStreamWaitValue64_v2",
                  TESSERA_CUDA_DRIVER_PREFIX);
    if (d->wait == nullptr) {  // drivers before CUDA 11.7: the legacy call, opt-in per device
      resolve_driver_symbol(library, "StreamWaitValue64", &d->wait);
      d->support_attribute = TESSERA_CUDA_DRIVER_ATTR_MEM_OPS_64_V1;
      std::snprintf(d->wait_name, sizeof d->wait_name, "%sStreamWaitValue64",
                    TESSERA_CUDA_DRIVER_PREFIX);
    }
    resolve_driver_symbol(library, "DeviceGet", &d->device_get);
    resolve_driver_symbol(library, "DeviceGetAttribute", &d->attribute);
    resolve_driver_symbol(library, "GetErrorName", &d->error_name);
    resolve_driver_symbol(library, "GetErrorString", &d->error_string);
    if (d->wait == nullptr || d->device_get == nullptr || d->attribute == nullptr) {
      d->wait = nullptr;
      std::snprintf(d->why, sizeof d->why,
                    "%s has no %sStreamWaitValue64[_v2], %sDeviceGet or %sDeviceGetAttribute",
                    TESSERA_CUDA_DRIVER_LIBRARY, TESSERA_CUDA_DRIVER_PREFIX,
                    TESSERA_CUDA_DRIVER_PREFIX, TESSERA_CUDA_DRIVER_PREFIX);
    }
    return d;  // the library stays open: its functions are called until the process ends
  }();
  return *resolved;
}

const char* wait_unavailable_reason() {
  const DriverWait& d = driver_wait();
  return d.wait ? nullptr : d.why;
}

tsr_status fail_driver(int result, const char* op, const char* call) {
  const DriverWait& d = driver_wait();
  const char* name = "?";
  const char* text = "?";
  if (d.error_name) (void)d.error_name(result, &name);
  if (d.error_string) (void)d.error_string(result, &text);
  return fail(result == 801 /* CUDA_ERROR_NOT_SUPPORTED */ ? TSR_UNIMPLEMENTED : TSR_INTERNAL,
              "%s: %s failed: %s (%s, %d)", op, call, text ? text : "?", name ? name : "?", result);
}

tsr_status device_can_wait(int32_t device, const char* op) {
  const DriverWait& d = driver_wait();
  int handle = 0;
  int supported = 0;
  if (int r = d.device_get(&handle, device); r != 0) return fail_driver(r, op, "DeviceGet");
  if (int r = d.attribute(&supported, d.support_attribute, handle); r != 0) {
    return fail_driver(r, op, "DeviceGetAttribute");
  }
  if (!supported) {
    return fail(TSR_UNIMPLEMENTED,
                "%s: device %d does not support 64-bit stream memory operations (driver "
                "attribute %d is 0; %s needs it)",
                op, device, d.support_attribute, d.wait_name);
  }
  return TSR_OK;
}

tsr_status enqueue_wait(const char* op, rtStream_t stream, void* device_ptr, uint64_t value) {
  const DriverWait& d = driver_wait();
  constexpr unsigned kGeq = 0;  // CU_STREAM_WAIT_VALUE_GEQ
  if (int r = d.wait(stream, reinterpret_cast<uintptr_t>(device_ptr), value, kGeq); r != 0) {
    return fail_driver(r, op, d.wait_name);
  }
  return TSR_OK;
}
#endif

// ---- slots and retirement -------------------------------------------------------------------

tsr_status take_slot(SignalPool& pool, int32_t device, const char* op, uint64_t** out) {
  std::lock_guard lock(pool.mutex);
  if (pool.free_words.empty()) {
    DeviceGuard guard;
    if (tsr_status s = guard.enter(op, device); s != TSR_OK) return s;
    void* page = nullptr;
    // Mapped, so the device can read it; portable, so every device can.
    TSR_RT_CHECK(op, rtHostAlloc, &page, kPageBytes, rtHostAllocMapped | rtHostAllocPortable);
    pool.pages.push_back(page);
    for (size_t offset = kPageBytes; offset >= kSlotBytes; offset -= kSlotBytes) {
      pool.free_words.push_back(
          reinterpret_cast<uint64_t*>(static_cast<char*>(page) + offset - kSlotBytes));
    }
  }
  *out = pool.free_words.back();
  pool.free_words.pop_back();
  // No device reads a free slot: a plain reset is safe.
  std::atomic_ref<uint64_t>(**out).store(0, std::memory_order_relaxed);
  return TSR_OK;
}

void destroy_mark_event(const HostSignal::Mark& mark) {
  DeviceGuard guard;
  if (guard.enter("host_signal_destroy", mark.device) != TSR_OK) return;
  (void)rtEventDestroy(mark.event);
}

// Returns the slots of retired signals that nobody uses any more and that every stream that waited
// on them has passed. Never waits. With `all` (last finalize, streams synchronised) takes them all.
void sweep(SignalPool& pool, bool all) {
  std::lock_guard lock(pool.mutex);
  auto& retired = pool.retired;
  for (size_t i = 0; i < retired.size();) {
    HostSignal& signal = *retired[i];
    bool done = all || retired[i].use_count() == 1;  // a raise may still hold it
    bool reusable = !signal.untracked;
    for (size_t m = 0; done && m < signal.marks.size(); ++m) {
      rtError_t error = rtEventQuery(signal.marks[m].event);
      if (error == rtErrorNotReady)
        done = false;
      else if (error != rtSuccess)
        reusable = false;  // the device is in an unknown state
    }
    (void)rtGetLastError();
    if (!done) {
      ++i;
      continue;
    }
    for (const auto& mark : signal.marks) destroy_mark_event(mark);
    if (reusable) pool.free_words.push_back(signal.word);
    retired[i] = std::move(retired.back());
    retired.pop_back();
  }
}

tsr_status lookup_signal(Backend& backend, const char* op, tsr_host_signal handle,
                         std::shared_ptr<HostSignal>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: signal is NULL", op);
  std::shared_ptr<HostSignal> signal =
      backend.signals->live.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (signal == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: signal %p is not a live host signal of the %s backend (destroyed, or never "
                "created)",
                op, static_cast<void*>(handle), kBackendName);
  }
  *out = std::move(signal);
  return TSR_OK;
}

// Records (or re-records) this stream's event behind the wait just enqueued. Caller holds
// signal.mutex and has the stream's device current.
tsr_status mark_wait(HostSignal& signal, uint64_t stream_id, const Stream& stream, const char* op) {
  auto it = std::find_if(signal.marks.begin(), signal.marks.end(),
                         [&](const HostSignal::Mark& m) { return m.stream == stream_id; });
  if (it == signal.marks.end()) {
    rtEvent_t event = nullptr;
    TSR_RT_CHECK(op, rtEventCreateWithFlags, &event, rtEventDisableTiming);
    signal.marks.push_back({stream_id, stream.device, event});
    it = signal.marks.end() - 1;
  }
  TSR_RT_CHECK(op, rtEventRecord, it->event, stream.raw);
  return TSR_OK;
}

}  // namespace

// ---- pool lifecycle (state.cc) --------------------------------------------------------------

SignalPool* create_signal_pool() {
  return new SignalPool;
}

void release_host_signals(SignalPool* pool) {
  for (std::shared_ptr<HostSignal>& signal : pool->live.clear()) {
    raise_counter(*signal, UINT64_MAX);
    std::lock_guard lock(pool->mutex);
    pool->retired.push_back(std::move(signal));
  }
}

void destroy_signal_pool(SignalPool* pool) {
  sweep(*pool, true);
  for (void* page : pool->pages) (void)rtFreeHost(page);
  (void)rtGetLastError();
  delete pool;
}

bool waits_on_host_signal(Stream& stream) {
  std::lock_guard lock(stream.signal_mutex);
  for (const auto& [signal, value] : stream.signal_waits) {
    if (signal->counter.load(std::memory_order_acquire) < value) return true;
  }
  return false;
}

bool host_signals_available() {
  const char* why = wait_unavailable_reason();
  if (why != nullptr) {
    log(TSR_LOG_INFO, "%s backend: host signals unavailable (entries NULL): %s", kBackendName, why);
  }
  return why == nullptr;
}

// ---- entries ----------------------------------------------------------------------------------

namespace api {

tsr_status host_signal_create(int32_t device, tsr_host_signal* out_signal) {
  static constexpr const char* kOp = "host_signal_create";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (out_signal == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_signal is NULL", kOp);
    if (tsr_status s = device_can_wait(device, kOp); s != TSR_OK) return s;
    SignalPool& pool = *backend->signals;
    sweep(pool, false);
    auto signal = std::make_shared<HostSignal>();
    signal->device = device;
    if (tsr_status s = take_slot(pool, device, kOp, &signal->word); s != TSR_OK) return s;
    *out_signal = reinterpret_cast<tsr_host_signal>(uintptr_t(pool.live.insert(std::move(signal))));
    return TSR_OK;
  });
}

tsr_status host_signal_destroy(tsr_host_signal handle) {
  static constexpr const char* kOp = "host_signal_destroy";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: signal is NULL", kOp);
    SignalPool& pool = *backend->signals;
    std::shared_ptr<HostSignal> signal =
        pool.live.remove(uint64_t(reinterpret_cast<uintptr_t>(handle)));
    if (signal == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: signal %p is not a live host signal of the %s backend (destroyed, or "
                  "never created)",
                  kOp, static_cast<void*>(handle), kBackendName);
    }
    {
      std::lock_guard lock(signal->mutex);  // no wait is being enqueued on it now
      signal->destroyed = true;
    }
    // A stream cannot be failed from the host here: its waiters are released instead, so none
    // hangs (the host backend fails them with CANCELLED; both end the wait).
    raise_counter(*signal, UINT64_MAX);
    {
      std::lock_guard lock(pool.mutex);
      pool.retired.push_back(std::move(signal));
    }
    sweep(pool, false);
    return TSR_OK;
  });
}

tsr_status host_signal_raise(tsr_host_signal handle, uint64_t value) {
  static constexpr const char* kOp = "host_signal_raise";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*backend, kOp, handle, &signal); s != TSR_OK) return s;
    raise_counter(*signal, value);  // the device sees the word at its next poll
    return TSR_OK;
  });
}

tsr_status host_signal_query(tsr_host_signal handle, uint64_t* out_value) {
  static constexpr const char* kOp = "host_signal_query";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*backend, kOp, handle, &signal); s != TSR_OK) return s;
    if (out_value == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_value is NULL", kOp);
    *out_value = signal->counter.load(std::memory_order_acquire);
    return TSR_OK;
  });
}

tsr_status stream_wait_host_signal(tsr_stream stream_handle, tsr_host_signal signal_handle,
                                   uint64_t value) {
  static constexpr const char* kOp = "stream_wait_host_signal";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*backend, kOp, signal_handle, &signal); s != TSR_OK) return s;
    if (value > kWordMax) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: value %llu is above 2^63-1, the largest the device compares exactly "
                  "(it tests (int64_t)(counter - value) >= 0)",
                  kOp, (unsigned long long)value);
    }
    if (signal->counter.load(std::memory_order_acquire) >= value) return TSR_OK;  // already met
    std::lock_guard lock(signal->mutex);
    if (signal->destroyed) {
      return fail(TSR_INVALID_ARGUMENT, "%s: signal %p was destroyed concurrently", kOp,
                  static_cast<void*>(signal_handle));
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    void* device_ptr = nullptr;
    TSR_RT_CHECK(kOp, rtHostGetDevicePointer, &device_ptr, signal->word, 0);
    if (tsr_status s = enqueue_wait(kOp, stream->raw, device_ptr, value); s != TSR_OK) return s;
    {
      std::lock_guard waits_lock(stream->signal_mutex);
      auto& waits = stream->signal_waits;
      std::erase_if(waits, [](const auto& w) {
        return w.first->counter.load(std::memory_order_acquire) >= w.second;
      });
      waits.emplace_back(signal, value);
    }
    const uint64_t stream_id = uint64_t(reinterpret_cast<uintptr_t>(stream_handle));
    if (tsr_status s = mark_wait(*signal, stream_id, *stream, kOp); s != TSR_OK) {
      signal->untracked = true;  // the wait is enqueued but untracked: never reuse the slot
      return s;
    }
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
