// Host signals (backend_abi.h, minor 2) on Level Zero: a counter on the host and one event per
// awaited value. stream_wait_host_signal appends zeCommandListAppendWaitOnEvents on the event for
// its value (made on first use, shared by every stream waiting for that value); raise signals,
// with zeEventHostSignal, the events of every value it reaches and forgets them. An event lives
// until it is signalled and every stream that waits on it is past the wait (the stream's deferred
// cleanups hold it), so the device never waits on a freed event.
//
// Destroy releases the waiters (signals every pending event) rather than failing their streams:
// a Level Zero command list cannot be failed from the host. A stream destroyed while it waits on a
// signal nobody raised is retired, not drained (destroy would block until the raise), and released
// once it is idle (reap_streams) or at the last finalize, which raises every signal first.
#include <algorithm>
#include <map>
#include <memory>

#include "ze.h"

namespace tessera::ze {

namespace {

constexpr uint64_t kSignalTag = 0x9;

struct SignalEvent {
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t event = nullptr;
  SignalEvent() = default;
  SignalEvent(const SignalEvent&) = delete;
  SignalEvent& operator=(const SignalEvent&) = delete;
  ~SignalEvent() {
    if (event != nullptr) (void)ze().zeEventDestroy(event);
    if (pool != nullptr) (void)ze().zeEventPoolDestroy(pool);
  }
};

ze_result_t make_signal_event(const Device& d, std::shared_ptr<SignalEvent>* out) {
  auto e = std::make_shared<SignalEvent>();
  ze_event_pool_desc_t pool_desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                                 ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  ze_device_handle_t device = d.handle;
  ze_result_t r = ze().zeEventPoolCreate(d.context, &pool_desc, 1, &device, &e->pool);
  if (r != ZE_RESULT_SUCCESS) return r;
  // Host scope on the wait: the device invalidates its caches after the host's signal, so what
  // the host wrote before raising is what the released work reads.
  ze_event_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST,
                       ZE_EVENT_SCOPE_FLAG_HOST};
  r = ze().zeEventCreate(e->pool, &desc, &e->event);
  if (r == ZE_RESULT_SUCCESS) *out = std::move(e);
  return r;
}

}  // namespace

struct HostSignal {
  int32_t device = 0;
  std::atomic<uint64_t> counter{0};  // read without the mutex by query and by waits already met
  std::mutex mutex;                  // guards the fields below; held only briefly, never on device
  bool destroyed = false;
  std::map<uint64_t, std::shared_ptr<SignalEvent>> pending;  // value -> event not yet signalled

  // counter = max(counter, value); signals and forgets the events of the values reached.
  void raise(uint64_t value) {
    std::lock_guard lock(mutex);
    if (value <= counter.load(std::memory_order_relaxed)) return;
    counter.store(value, std::memory_order_release);
    auto end = pending.upper_bound(value);
    for (auto it = pending.begin(); it != end; ++it)
      (void)ze().zeEventHostSignal(it->second->event);
    pending.erase(pending.begin(), end);
  }
};

namespace {

tsr_status lookup_signal(Backend& b, const char* op, tsr_host_signal handle,
                         std::shared_ptr<HostSignal>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: signal is NULL", op);
  const uint64_t id = uint64_t(reinterpret_cast<uintptr_t>(handle));
  std::lock_guard lock(b.mutex);
  auto it = (id & 0xf) == kSignalTag ? b.signals.find(id) : b.signals.end();
  if (it == b.signals.end()) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: signal %p is not a live level_zero host signal (destroyed, or never created)",
                op, static_cast<void*>(handle));
  }
  *out = it->second;
  return TSR_OK;
}

}  // namespace

bool waits_on_host_signal(Stream& s) {
  std::lock_guard lock(s.mutex);
  for (const auto& [signal, value] : s.signal_waits) {
    if (signal->counter.load(std::memory_order_acquire) < value) return true;
  }
  return false;
}

void release_host_signals(Backend& b) {
  std::vector<std::shared_ptr<HostSignal>> all;
  {
    std::lock_guard lock(b.mutex);
    for (auto& [id, signal] : b.signals) all.push_back(std::move(signal));
    b.signals.clear();
  }
  for (auto& signal : all) signal->raise(UINT64_MAX);
}

namespace api {

tsr_status host_signal_create(int32_t device, tsr_host_signal* out_signal) {
  static constexpr const char* kOp = "host_signal_create";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (out_signal == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_signal is NULL", kOp);
    reap_streams(*b);
    auto signal = std::make_shared<HostSignal>();
    signal->device = device;
    std::lock_guard lock(b->mutex);
    const uint64_t id = (b->next_handle++ << 4) | kSignalTag;
    b->signals.emplace(id, std::move(signal));
    *out_signal = reinterpret_cast<tsr_host_signal>(uintptr_t(id));
    return TSR_OK;
  });
}

tsr_status host_signal_destroy(tsr_host_signal handle) {
  static constexpr const char* kOp = "host_signal_destroy";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*b, kOp, handle, &signal); s != TSR_OK) return s;
    {
      std::lock_guard lock(b->mutex);
      if (b->signals.erase(uint64_t(reinterpret_cast<uintptr_t>(handle))) == 0) {
        return fail(TSR_INVALID_ARGUMENT, "%s: signal %p was destroyed concurrently", kOp,
                    static_cast<void*>(handle));
      }
    }
    {
      std::lock_guard lock(signal->mutex);
      signal->destroyed = true;
    }
    signal->raise(UINT64_MAX);  // releases every waiter: none hangs on a signal nobody can raise
    reap_streams(*b);
    return TSR_OK;
  });
}

tsr_status host_signal_raise(tsr_host_signal handle, uint64_t value) {
  static constexpr const char* kOp = "host_signal_raise";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*b, kOp, handle, &signal); s != TSR_OK) return s;
    signal->raise(value);
    return TSR_OK;
  });
}

tsr_status host_signal_query(tsr_host_signal handle, uint64_t* out_value) {
  static constexpr const char* kOp = "host_signal_query";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_signal(*b, kOp, handle, &signal); s != TSR_OK) return s;
    if (out_value == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_value is NULL", kOp);
    *out_value = signal->counter.load(std::memory_order_acquire);
    return TSR_OK;
  });
}

tsr_status stream_wait_host_signal(tsr_stream stream_handle, tsr_host_signal signal_handle,
                                   uint64_t value) {
  static constexpr const char* kOp = "stream_wait_host_signal";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    Stream* s = nullptr;
    if (tsr_status st = lookup_stream(*b, kOp, stream_handle, &s); st != TSR_OK) return st;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status st = lookup_signal(*b, kOp, signal_handle, &signal); st != TSR_OK) return st;
    if (s->device != signal->device) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: the stream is on device %d, the signal was created for device %d (its "
                  "events live in that device's pools)",
                  kOp, s->device, signal->device);
    }
    std::shared_ptr<SignalEvent> event;
    {
      std::lock_guard lock(signal->mutex);
      if (signal->destroyed) {
        return fail(TSR_INVALID_ARGUMENT, "%s: signal %p was destroyed concurrently", kOp,
                    static_cast<void*>(signal_handle));
      }
      if (signal->counter.load(std::memory_order_relaxed) >= value) return TSR_OK;  // met
      std::shared_ptr<SignalEvent>& slot = signal->pending[value];
      if (slot == nullptr) {
        if (ze_result_t r = make_signal_event(b->devices[size_t(s->device)], &slot);
            r != ZE_RESULT_SUCCESS) {
          signal->pending.erase(value);
          return fail_ze(r, kOp, "zeEventCreate");
        }
      }
      event = slot;  // a raise after this point signals it: the wait below cannot be missed
    }
    std::lock_guard lock(s->mutex);
    ze_event_handle_t wait = event->event;
    if (ze_result_t r = ze().zeCommandListAppendWaitOnEvents(s->list, 1, &wait);
        r != ZE_RESULT_SUCCESS) {
      return fail_ze(r, kOp, "zeCommandListAppendWaitOnEvents");
    }
    ++s->submitted;
    // The event stays alive until the stream is past the wait.
    s->deferred.emplace_back(s->submitted, [event] {});
    std::erase_if(s->signal_waits, [](const auto& w) {
      return w.first->counter.load(std::memory_order_acquire) >= w.second;
    });
    s->signal_waits.emplace_back(std::move(signal), value);
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::ze
