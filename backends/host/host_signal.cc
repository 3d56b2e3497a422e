#include "host_signal.h"

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {

void HostSignal::raise(uint64_t value) {
  {
    std::lock_guard lock(mutex_);
    if (value <= value_) return;  // the counter only grows: a lower value is a no-op
    value_ = value;
  }
  cv_.notify_all();
}

uint64_t HostSignal::value() const {
  std::lock_guard lock(mutex_);
  return value_;
}

void HostSignal::destroy() {
  {
    std::lock_guard lock(mutex_);
    destroyed_ = true;
  }
  cv_.notify_all();
}

void HostSignal::wake() {
  // Taking the lock orders this wake after a waiter's check of its cancel flag: the waiter either
  // saw the flag already, or is inside cv_.wait and receives the notification.
  { std::lock_guard lock(mutex_); }
  cv_.notify_all();
}

HostSignal::WaitResult HostSignal::wait(uint64_t target, const std::atomic<bool>& cancel,
                                        uint64_t* seen) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] {
    return value_ >= target || destroyed_ || cancel.load(std::memory_order_acquire);
  });
  *seen = value_;
  if (value_ >= target) return WaitResult::kReached;
  return destroyed_ ? WaitResult::kDestroyed : WaitResult::kCancelled;
}

tsr_host_signal host_signal_handle(uint64_t id) {
  return reinterpret_cast<tsr_host_signal>(uintptr_t(id));
}
uint64_t host_signal_id(tsr_host_signal handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}

tsr_status lookup_host_signal(Backend& backend, const char* operation, tsr_host_signal handle,
                              std::shared_ptr<HostSignal>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: host signal is NULL", operation);
  std::shared_ptr<HostSignal> signal = backend.host_signals.find(host_signal_id(handle));
  if (signal == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: host signal %p is not a live host signal of the host backend (destroyed, or "
                "never created)",
                operation, static_cast<void*>(handle));
  }
  *out = std::move(signal);
  return TSR_OK;
}

namespace api {

tsr_status host_signal_create(int32_t device, tsr_host_signal* out_signal) {
  static constexpr const char* kOp = "host_signal_create";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, kOp, device, &dev); s != TSR_OK) return s;
    if (out_signal == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_signal is NULL", kOp);
    *out_signal =
        host_signal_handle(backend->host_signals.insert(std::make_shared<HostSignal>(device)));
    return TSR_OK;
  });
}

tsr_status host_signal_destroy(tsr_host_signal handle) {
  static constexpr const char* kOp = "host_signal_destroy";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: host signal is NULL", kOp);
    std::shared_ptr<HostSignal> signal = backend->host_signals.remove(host_signal_id(handle));
    if (signal == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: host signal %p is not a live host signal of the host backend (destroyed, "
                  "or never created)",
                  kOp, static_cast<void*>(handle));
    }
    // Waits already enqueued hold the object; they fail now (or when reached) instead of hanging.
    signal->destroy();
    return TSR_OK;
  });
}

tsr_status host_signal_raise(tsr_host_signal handle, uint64_t value) {
  static constexpr const char* kOp = "host_signal_raise";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_host_signal(*backend, kOp, handle, &signal); s != TSR_OK) return s;
    signal->raise(value);
    return TSR_OK;
  });
}

tsr_status host_signal_query(tsr_host_signal handle, uint64_t* out_value) {
  static constexpr const char* kOp = "host_signal_query";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_host_signal(*backend, kOp, handle, &signal); s != TSR_OK) return s;
    if (out_value == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_value is NULL", kOp);
    *out_value = signal->value();
    return TSR_OK;
  });
}

tsr_status stream_wait_host_signal(tsr_stream stream_handle_in, tsr_host_signal signal_handle,
                                   uint64_t value) {
  static constexpr const char* kOp = "stream_wait_host_signal";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle_in, &stream); s != TSR_OK) {
      return s;
    }
    std::shared_ptr<HostSignal> signal;
    if (tsr_status s = lookup_host_signal(*backend, kOp, signal_handle, &signal); s != TSR_OK) {
      return s;
    }
    if (signal->device() != stream->device()) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: host signal %p belongs to device %d, the stream to device %d (a signal is "
                  "usable by streams of the device it was created for)",
                  kOp, static_cast<void*>(signal_handle), signal->device(), stream->device());
    }
    // The counter only grows: a wait satisfied now is satisfied when the worker reaches it.
    if (signal->value() >= value) return TSR_OK;
    return stream->enqueue_signal_wait(kOp, std::move(signal), value, signal_handle);
  });
}

}  // namespace api
}  // namespace tessera::host
