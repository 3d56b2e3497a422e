#include "event.h"

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {

void Marker::complete() {
  time_ = std::chrono::steady_clock::now();  // published by the release store below
  {
    std::lock_guard lock(mutex_);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Marker::wait() {
  if (done()) return;
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done(); });
}

tsr_event event_handle(uint64_t id) {
  return reinterpret_cast<tsr_event>(uintptr_t(id));
}
uint64_t event_id(tsr_event handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}

tsr_status lookup_event(Backend& backend, const char* operation, const char* param,
                        tsr_event handle, std::shared_ptr<Event>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, param);
  std::shared_ptr<Event> event = backend.events.find(event_id(handle));
  if (event == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is not a live event of the host backend (destroyed, or never created)",
                operation, param, static_cast<void*>(handle));
  }
  *out = std::move(event);
  return TSR_OK;
}

namespace {

// Waiting on a marker that only this thread's own stream can complete would never return.
tsr_status check_not_self_wait(const char* operation, const Marker& marker) {
  if (!marker.done() && marker.stream() == current_worker_stream()) {
    return fail(TSR_FAILED_PRECONDITION,
                "%s: called from a host callback of the stream the event was recorded on, before "
                "the event (would deadlock)",
                operation);
  }
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status event_create(int32_t device, uint32_t flags, tsr_event* out_event) {
  return guarded("event_create", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_create", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "event_create", device, &dev); s != TSR_OK) {
      return s;
    }
    if ((flags & ~uint32_t(TSR_EVENT_DISABLE_TIMING)) != 0) {
      return fail(TSR_INVALID_ARGUMENT, "event_create: unknown flags 0x%x", flags);
    }
    if (out_event == nullptr) return fail(TSR_INVALID_ARGUMENT, "event_create: out_event is NULL");
    *out_event = event_handle(backend->events.insert(std::make_shared<Event>(device, flags)));
    return TSR_OK;
  });
}

tsr_status event_destroy(tsr_event handle) {
  return guarded("event_destroy", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_destroy", &backend); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "event_destroy: event is NULL");
    // A pending marker stays alive in its stream's queue; only the handle goes away now.
    if (backend->events.remove(event_id(handle)) == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "event_destroy: event %p is not a live event of the host backend (destroyed, "
                  "or never created)",
                  static_cast<void*>(handle));
    }
    return TSR_OK;
  });
}

tsr_status event_record(tsr_event event_handle_in, tsr_stream stream_handle_in) {
  return guarded("event_record", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_record", &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, "event_record", "event", event_handle_in, &event);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, "event_record", stream_handle_in, &stream);
        s != TSR_OK) {
      return s;
    }
    auto marker = std::make_shared<Marker>(stream.get());
    // Publish the capture only once it is enqueued, so a failed enqueue leaves the old one.
    tsr_status s =
        stream->enqueue("event_record", /*always_run=*/true, [marker](tsr_status, std::string*) {
          marker->complete();
          return TSR_OK;
        });
    if (s != TSR_OK) return s;
    event->set_marker(std::move(marker));
    return TSR_OK;
  });
}

tsr_status event_synchronize(tsr_event handle) {
  return guarded("event_synchronize", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_synchronize", &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, "event_synchronize", "event", handle, &event);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Marker> marker = event->marker();
    if (marker == nullptr) return TSR_OK;  // never recorded: complete
    if (tsr_status s = check_not_self_wait("event_synchronize", *marker); s != TSR_OK) return s;
    marker->wait();
    return TSR_OK;
  });
}

tsr_status event_query(tsr_event handle) {
  return guarded("event_query", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_query", &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, "event_query", "event", handle, &event);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Marker> marker = event->marker();
    return marker == nullptr || marker->done() ? TSR_OK : TSR_NOT_READY;
  });
}

tsr_status event_elapsed_time(tsr_event start, tsr_event end, float* out_ms) {
  return guarded("event_elapsed_time", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("event_elapsed_time", &backend); s != TSR_OK) return s;
    std::shared_ptr<Event> first, second;
    if (tsr_status s = lookup_event(*backend, "event_elapsed_time", "start", start, &first);
        s != TSR_OK) {
      return s;
    }
    if (tsr_status s = lookup_event(*backend, "event_elapsed_time", "end", end, &second);
        s != TSR_OK) {
      return s;
    }
    if (out_ms == nullptr) return fail(TSR_INVALID_ARGUMENT, "event_elapsed_time: out_ms is NULL");
    if (first->timing_disabled() || second->timing_disabled()) {
      return fail(TSR_FAILED_PRECONDITION,
                  "event_elapsed_time: the %s event was created with TSR_EVENT_DISABLE_TIMING",
                  first->timing_disabled() ? "start" : "end");
    }
    std::shared_ptr<Marker> a = first->marker(), b = second->marker();
    if (a == nullptr || b == nullptr) {
      return fail(TSR_FAILED_PRECONDITION,
                  "event_elapsed_time: the %s event was never recorded, so it has no time",
                  a == nullptr ? "start" : "end");
    }
    if (!a->done() || !b->done()) return TSR_NOT_READY;
    std::chrono::duration<double, std::milli> ms = b->time() - a->time();
    *out_ms = float(ms.count());
    return TSR_OK;
  });
}

tsr_status stream_wait_event(tsr_stream stream_handle_in, tsr_event event_handle_in) {
  return guarded("stream_wait_event", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("stream_wait_event", &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, "stream_wait_event", stream_handle_in, &stream);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Event> event;
    if (tsr_status s =
            lookup_event(*backend, "stream_wait_event", "event", event_handle_in, &event);
        s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Marker> marker = event->marker();
    // Never recorded, or already complete: nothing to wait for.
    if (marker == nullptr || marker->done()) return TSR_OK;
    // A marker on the same stream is ordered before the wait already.
    if (marker->stream() == stream.get()) return TSR_OK;
    return stream->enqueue("stream_wait_event", /*always_run=*/true,
                           [marker](tsr_status, std::string*) {
                             marker->wait();
                             return TSR_OK;
                           });
  });
}

}  // namespace api
}  // namespace tessera::host
