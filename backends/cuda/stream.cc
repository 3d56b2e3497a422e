// Streams: one runtime stream each (non-blocking with respect to the legacy default stream, so
// the application's default-stream work never serialises ours), with the priority clamped to the
// device's range. Host callbacks go through the runtime's host-function launch; callbacks with a
// message through its stream callback, which passes the stream's status.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::cuda {
namespace {

tsr_stream stream_handle(uint64_t id) {
  return reinterpret_cast<tsr_stream>(uintptr_t(id));
}

struct Callback {
  tsr_host_fn fn;
  void* user_data;
};

// Runs on the runtime's callback thread after the earlier work on the stream. The runtime gives
// host functions no status: a failed stream (a faulting kernel) poisons the whole context, and
// the runtime then does not run later host functions at all, so a callback that runs sees OK.
void run_callback(void* data) {
  std::unique_ptr<Callback> callback(static_cast<Callback*>(data));
  callback->fn(callback->user_data, TSR_OK);
}

struct MessageCallback {
  tsr_host_msg_fn fn;
  void* user_data;
};

// The runtime's stream callback, which does receive the stream's status (the earliest error of
// its work, when the runtime still runs callbacks after one). Looking the error's text up is a
// table read, not a call into the device, so it is allowed here.
void run_message_callback(rtStream_t, rtError_t error, void* data) {
  std::unique_ptr<MessageCallback> callback(static_cast<MessageCallback*>(data));
  if (error == rtSuccess) {
    callback->fn(callback->user_data, TSR_OK, "");
    return;
  }
  char message[512];
  std::snprintf(message, sizeof message,
                "%s stream: earlier work on the stream failed before this callback: %s (%s)",
                kBackendName, rtGetErrorString(error), rtGetErrorName(error));
  callback->fn(callback->user_data, status_of(error), message);
}

}  // namespace

Stream::~Stream() {
  DeviceGuard guard;
  if (guard.enter("stream_destroy", device) != TSR_OK) return;
  // Waiting for a host signal nobody has raised yet would block destroy indefinitely; the
  // runtime destroys a busy stream once its work is done.
  if (!waits_on_host_signal(*this)) (void)rtStreamSynchronize(raw);
  (void)rtStreamDestroy(raw);
  (void)rtGetLastError();
}

namespace api {

tsr_status stream_create(int32_t device, int32_t priority, tsr_stream* out_stream) {
  static constexpr const char* kOp = "stream_create";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (out_stream == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_stream is NULL", kOp);
    const DeviceInfo& info = backend->devices[size_t(device)];
    // Lower numbers are higher priorities, as in the ABI: greatest <= priority <= least.
    const int clamped =
        std::clamp(int(priority), int(info.greatest_priority), int(info.least_priority));
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    auto stream = std::make_shared<Stream>();
    stream->device = device;
    rtError_t error = rtStreamCreateWithPriority(&stream->raw, rtStreamNonBlocking, clamped);
    if (error != rtSuccess) {
      stream->raw = nullptr;
      return fail_runtime(error, kOp, TSR_RT_NAME(rtStreamCreateWithPriority));
    }
    *out_stream = stream_handle(backend->streams.insert(std::move(stream)));
    return TSR_OK;
  });
}

tsr_status stream_destroy(tsr_stream handle) {
  static constexpr const char* kOp = "stream_destroy";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    if (backend->streams.remove(uint64_t(reinterpret_cast<uintptr_t>(handle))) == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: stream %p was destroyed concurrently", kOp,
                  static_cast<void*>(handle));
    }
    // The runtime stream itself goes when the last user lets go (~Stream waits for its work).
    return TSR_OK;
  });
}

tsr_status stream_synchronize(tsr_stream handle) {
  static constexpr const char* kOp = "stream_synchronize";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtStreamSynchronize, stream->raw);
    return TSR_OK;
  });
}

tsr_status stream_query(tsr_stream handle) {
  static constexpr const char* kOp = "stream_query";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    rtError_t error = rtStreamQuery(stream->raw);
    if (error == rtErrorNotReady) {
      (void)rtGetLastError();
      return TSR_NOT_READY;
    }
    if (error != rtSuccess) return fail_runtime(error, kOp, TSR_RT_NAME(rtStreamQuery));
    return TSR_OK;
  });
}

tsr_status stream_wait_event(tsr_stream stream_handle_in, tsr_event event_handle_in) {
  static constexpr const char* kOp = "stream_wait_event";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle_in, &stream); s != TSR_OK) {
      return s;
    }
    std::shared_ptr<Event> event;
    if (tsr_status s = lookup_event(*backend, kOp, "event", event_handle_in, &event); s != TSR_OK) {
      return s;
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    // Works across devices; an event never recorded is complete, as the ABI asks.
    TSR_RT_CHECK(kOp, rtStreamWaitEvent, stream->raw, event->raw, 0);
    return TSR_OK;
  });
}

tsr_status stream_add_callback(tsr_stream handle, tsr_host_fn fn, void* user_data) {
  static constexpr const char* kOp = "stream_add_callback";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    if (fn == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: fn is NULL", kOp);
    auto callback = std::make_unique<Callback>(Callback{fn, user_data});
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtLaunchHostFunc, stream->raw, &run_callback, callback.get());
    callback.release();  // run_callback owns it now
    return TSR_OK;
  });
}

tsr_status stream_add_callback_with_message(tsr_stream handle, tsr_host_msg_fn fn,
                                            void* user_data) {
  static constexpr const char* kOp = "stream_add_callback_with_message";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    if (fn == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: fn is NULL", kOp);
    auto callback = std::make_unique<MessageCallback>(MessageCallback{fn, user_data});
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, stream->device); s != TSR_OK) return s;
    TSR_RT_CHECK(kOp, rtStreamAddCallback, stream->raw, &run_message_callback, callback.get(), 0);
    callback.release();  // run_message_callback owns it now
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
