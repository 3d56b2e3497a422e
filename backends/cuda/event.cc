// Events: one runtime event each. The backend remembers whether an event was created without
// timing and whether it was ever recorded, so elapsed_time can answer FAILED_PRECONDITION with a
// reason instead of the runtime's generic "invalid resource handle".
#include <memory>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::cuda {

Event::~Event() {
  DeviceGuard guard;
  if (guard.enter("event_destroy", device) != TSR_OK) return;
  (void)rtEventDestroy(raw);  // a pending event is released once it completes
  (void)rtGetLastError();
}

namespace api {

tsr_status event_create(int32_t device, uint32_t flags, tsr_event* out_event) {
  static constexpr const char* kOp = "event_create";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if ((flags & ~uint32_t(TSR_EVENT_DISABLE_TIMING)) != 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", kOp, flags);
    }
    if (out_event == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_event is NULL", kOp);
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    auto event = std::make_shared<Event>();
    event->device = device;
    event->flags = flags;
    const unsigned raw_flags = (flags & TSR_EVENT_DISABLE_TIMING) ? unsigned(rtEventDisableTiming)
                                                                  : unsigned(rtEventDefault);
    rtError_t error = rtEventCreateWithFlags(&event->raw, raw_flags);
    if (error != rtSuccess) {
      event->raw = nullptr;
      return fail_runtime(error, kOp, TSR_RT_NAME(rtEventCreateWithFlags));
    }
    *out_event = reinterpret_cast<tsr_event>(uintptr_t(backend->events.insert(std::move(event))));
    return TSR_OK;
  });
}

tsr_status event_destroy(tsr_event handle) {
  static constexpr const char* kOp = "event_destroy";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: event is NULL", kOp);
    if (backend->events.remove(uint64_t(reinterpret_cast<uintptr_t>(handle))) == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: event %p is not a live event of the %s backend (destroyed, or never "
                  "created)",
                  kOp, static_cast<void*>(handle), kBackendName);
    }
    return TSR_OK;
  });
}

tsr_status event_record(tsr_event event_handle, tsr_stream stream_handle) {
  static constexpr const char* kOp = "event_record";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, kOp, "event", event_handle, &event); s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (event->device != stream->device) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: the event belongs to device %d and cannot capture a stream of device %d",
                  kOp, event->device, stream->device);
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtEventRecord, event->raw, stream->raw);
    event->recorded.store(true, std::memory_order_release);
    return TSR_OK;
  });
}

tsr_status event_synchronize(tsr_event handle) {
  static constexpr const char* kOp = "event_synchronize";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, kOp, "event", handle, &event); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtEventSynchronize, event->raw);
    return TSR_OK;
  });
}

tsr_status event_query(tsr_event handle) {
  static constexpr const char* kOp = "event_query";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, kOp, "event", handle, &event); s != TSR_OK) return s;
    rtError_t error = rtEventQuery(event->raw);
    if (error == rtErrorNotReady) {
      (void)rtGetLastError();
      return TSR_NOT_READY;
    }
    if (error != rtSuccess) return fail_runtime(error, kOp, TSR_RT_NAME(rtEventQuery));
    return TSR_OK;
  });
}

tsr_status event_elapsed_time(tsr_event start, tsr_event end, float* out_ms) {
  static constexpr const char* kOp = "event_elapsed_time";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> first, second;
    if (tsr_status s = lookup_event(*backend, kOp, "start", start, &first); s != TSR_OK) return s;
    if (tsr_status s = lookup_event(*backend, kOp, "end", end, &second); s != TSR_OK) return s;
    if (out_ms == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ms is NULL", kOp);
    if ((first->flags | second->flags) & TSR_EVENT_DISABLE_TIMING) {
      return fail(TSR_FAILED_PRECONDITION,
                  "%s: the %s event was created with TSR_EVENT_DISABLE_TIMING", kOp,
                  (first->flags & TSR_EVENT_DISABLE_TIMING) ? "start" : "end");
    }
    const bool a = first->recorded.load(std::memory_order_acquire);
    const bool b = second->recorded.load(std::memory_order_acquire);
    if (!a || !b) {
      return fail(TSR_FAILED_PRECONDITION, "%s: the %s event was never recorded, so it has no time",
                  kOp, !a ? "start" : "end");
    }
    float ms = 0;
    rtError_t error = rtEventElapsedTime(&ms, first->raw, second->raw);
    if (error == rtErrorNotReady) {
      (void)rtGetLastError();
      return TSR_NOT_READY;
    }
    if (error != rtSuccess) return fail_runtime(error, kOp, TSR_RT_NAME(rtEventElapsedTime));
    *out_ms = ms;
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
