#include "stream.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>

#include "api.h"
#include "callback_thread.h"
#include "errors.h"
#include "host_signal.h"
#include "state.h"

namespace tessera::host {
namespace {

thread_local const Stream* t_worker_stream = nullptr;

// The ABI's bound on one busy wait (one minute).
constexpr uint64_t kMaxBusyWaitMicroseconds = 60'000'000;

}  // namespace

Stream::Stream(int32_t device, int32_t priority, CallbackThread* callback_thread)
    : device_(device), priority_(std::clamp(priority, -1, 0)), callback_thread_(callback_thread) {}

Stream::~Stream() {
  close_and_join();
}

void Stream::start() {
  worker_ = std::thread([this] { run(); });
}

tsr_status Stream::enqueue(const char* operation, bool always_run, Work work) {
  return enqueue_task(Task{operation, always_run, std::move(work)});
}

tsr_status Stream::enqueue_task(Task task) {
  {
    std::lock_guard lock(mutex_);
    if (closing_) {
      return fail(TSR_INVALID_ARGUMENT, "%s: the stream has been destroyed", task.operation);
    }
    if (task.callback) ++callbacks_pending_;
    queue_.push_back(std::move(task));
    ++enqueued_;
  }
  work_cv_.notify_one();
  return TSR_OK;
}

tsr_status Stream::enqueue_callback(const char* operation, Callback fn) {
  Work work = [this, fn = std::move(fn)](tsr_status stream_status, std::string*) {
    // Only this worker sets the sticky error, so the message matches stream_status.
    const std::string message = stream_status == TSR_OK ? std::string() : failure_message();
    if (callback_thread_ == nullptr) {
      fn(stream_status, message.c_str());
    } else {
      callback_thread_->run(this, [&] { fn(stream_status, message.c_str()); });
    }
    return TSR_OK;
  };
  return enqueue_task(Task{operation, /*always_run=*/true, std::move(work), /*callback=*/true});
}

tsr_status Stream::enqueue_signal_wait(const char* operation, std::shared_ptr<HostSignal> signal,
                                       uint64_t value, tsr_host_signal handle) {
  // Always runs, as event waits do: work recorded after it (events, callbacks) must not
  // complete before the host says so, even on a failed stream.
  return enqueue(
      operation, /*always_run=*/true,
      [this, signal = std::move(signal), value, handle](tsr_status, std::string* message) {
        return wait_for_signal(signal, value, handle, message);
      });
}

tsr_status Stream::wait_for_signal(const std::shared_ptr<HostSignal>& signal, uint64_t value,
                                   tsr_host_signal handle, std::string* message) {
  // Registered before the wait checks cancel_waits_: close_and_join either sees the registration
  // and wakes the signal, or set the flag before this lock and the wait sees it.
  {
    std::lock_guard lock(mutex_);
    waiting_on_ = signal;
  }
  uint64_t seen = 0;
  HostSignal::WaitResult result = signal->wait(value, cancel_waits_, &seen);
  {
    std::lock_guard lock(mutex_);
    waiting_on_.reset();
  }
  char text[256];
  switch (result) {
    case HostSignal::WaitResult::kReached: return TSR_OK;
    case HostSignal::WaitResult::kDestroyed:
      std::snprintf(text, sizeof text,
                    "host signal %p was destroyed while the stream waited for it to reach %llu "
                    "(it was at %llu)",
                    static_cast<void*>(handle), static_cast<unsigned long long>(value),
                    static_cast<unsigned long long>(seen));
      break;
    case HostSignal::WaitResult::kCancelled:
      std::snprintf(text, sizeof text,
                    "the stream was destroyed while it waited for host signal %p to reach %llu (it "
                    "was at %llu); the work after the wait was skipped",
                    static_cast<void*>(handle), static_cast<unsigned long long>(value),
                    static_cast<unsigned long long>(seen));
      // Nobody can synchronize a destroyed stream: say it where it will be seen.
      log(TSR_LOG_WARN, "host device %d: stream_destroy: %s", device_, text);
      break;
  }
  *message = text;
  return TSR_CANCELLED;
}

std::string Stream::failure_message() {
  std::lock_guard lock(mutex_);
  return error_message_;
}

tsr_status Stream::check_waitable_from_callback_thread(const char* operation) {
  if (!on_shared_callback_thread()) return TSR_OK;
  std::lock_guard lock(mutex_);
  if (callbacks_pending_ == 0) return TSR_OK;
  return fail(TSR_FAILED_PRECONDITION,
              "%s: called from a host callback while the stream it waits for has a callback "
              "queued; callbacks share one thread (TESSERA_HOST_CALLBACK_THREADS=1), so that "
              "callback could never run (would deadlock)",
              operation);
}

tsr_status Stream::synchronize() {
  if (on_worker_thread()) {
    return fail(TSR_FAILED_PRECONDITION,
                "stream_synchronize: called from a host callback of the same stream (would "
                "deadlock)");
  }
  if (tsr_status s = check_waitable_from_callback_thread("stream_synchronize"); s != TSR_OK) {
    return s;
  }
  std::unique_lock lock(mutex_);
  uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
  if (error_ != TSR_OK) return fail_with_message(error_, error_message_.c_str());
  return TSR_OK;
}

tsr_status Stream::query() {
  std::lock_guard lock(mutex_);
  if (completed_ < enqueued_) return TSR_NOT_READY;
  if (error_ != TSR_OK) return fail_with_message(error_, error_message_.c_str());
  return TSR_OK;
}

void Stream::wait_idle() {
  if (on_worker_thread()) return;
  if (on_shared_callback_thread()) {
    // Called by a free from a callback: a queued callback of this stream cannot run until the
    // caller returns. There is no status to return here, so say it before the wait hangs.
    std::lock_guard lock(mutex_);
    if (callbacks_pending_ > 0) {
      log(TSR_LOG_ERROR,
          "host device %d: a host callback waits for a stream (a free waits for every stream) "
          "that has a callback queued; callbacks share one thread "
          "(TESSERA_HOST_CALLBACK_THREADS=1), so that callback cannot run and this waits forever "
          "(free memory outside callbacks)",
          device_);
    }
  }
  std::unique_lock lock(mutex_);
  uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
}

void Stream::close_and_join() {
  std::shared_ptr<HostSignal> waiting;
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    cancel_waits_.store(true, std::memory_order_release);
    waiting = waiting_on_;
  }
  work_cv_.notify_all();
  if (waiting != nullptr) waiting->wake();
  if (worker_.joinable() && !on_worker_thread()) worker_.join();
}

bool Stream::on_worker_thread() const {
  return t_worker_stream == this;
}

void Stream::run() {
  t_worker_stream = this;
  char name[16];  // Linux limits thread names to 15 characters
  std::snprintf(name, sizeof name, "tsr-host-dev%d", device_);
  pthread_setname_np(pthread_self(), name);
  for (;;) {
    Task task;
    tsr_status status_before;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) break;  // closing and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      status_before = error_;
    }
    tsr_status result = TSR_OK;
    std::string message;
    if (status_before == TSR_OK || task.always_run) {
      try {
        result = task.work(status_before, &message);
      } catch (const std::bad_alloc&) {
        result = TSR_RESOURCE_EXHAUSTED;
        message = "out of host memory";
      } catch (const std::exception& e) {
        result = TSR_INTERNAL;
        message = e.what();
      } catch (...) {
        result = TSR_UNKNOWN;
        message = "unexpected non-standard exception";
      }
    }
    // Destroy captured state (buffers, markers) before the work counts as done, so a caller that
    // synchronized observes its releases.
    task.work = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (result != TSR_OK && error_ == TSR_OK) {
        error_ = result;
        error_message_ = std::string(task.operation) + ": " + message;
      }
      if (task.callback) --callbacks_pending_;
      ++completed_;
    }
    done_cv_.notify_all();
  }
  t_worker_stream = nullptr;
}

const Stream* current_worker_stream() {
  return t_worker_stream;
}

void set_current_callback_stream(const Stream* stream) {
  t_worker_stream = stream;
}

tsr_stream stream_handle(uint64_t id) {
  return reinterpret_cast<tsr_stream>(uintptr_t(id));
}
uint64_t stream_id(tsr_stream handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}

tsr_status lookup_stream(Backend& backend, const char* operation, tsr_stream handle,
                         std::shared_ptr<Stream>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: stream is NULL", operation);
  std::shared_ptr<Stream> stream = backend.streams.find(stream_id(handle));
  if (stream == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: stream %p is not a live stream of the host backend (destroyed, or never "
                "created)",
                operation, static_cast<void*>(handle));
  }
  *out = std::move(stream);
  return TSR_OK;
}

void drain_streams(Backend& backend) {
  for (const auto& stream : backend.streams.snapshot()) stream->wait_idle();
}

void shutdown_streams(Backend& backend) {
  for (const auto& stream : backend.streams.clear()) stream->close_and_join();
}

namespace api {

tsr_status stream_create(int32_t device, int32_t priority, tsr_stream* out_stream) {
  return guarded("stream_create", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("stream_create", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "stream_create", device, &dev); s != TSR_OK) {
      return s;
    }
    if (out_stream == nullptr)
      return fail(TSR_INVALID_ARGUMENT, "stream_create: out_stream is NULL");
    auto stream = std::make_shared<Stream>(device, priority, backend->callback_thread.get());
    stream->start();
    *out_stream = stream_handle(backend->streams.insert(std::move(stream)));
    return TSR_OK;
  });
}

tsr_status stream_destroy(tsr_stream handle) {
  return guarded("stream_destroy", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("stream_destroy", &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, "stream_destroy", handle, &stream); s != TSR_OK) {
      return s;
    }
    if (stream->on_worker_thread()) {
      return fail(TSR_FAILED_PRECONDITION,
                  "stream_destroy: called from a host callback of the same stream (would "
                  "deadlock)");
    }
    if (tsr_status s = stream->check_waitable_from_callback_thread("stream_destroy"); s != TSR_OK) {
      return s;
    }
    if (backend->streams.remove(stream_id(handle)) == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "stream_destroy: stream %p was destroyed concurrently",
                  static_cast<void*>(handle));
    }
    stream->close_and_join();  // runs what is queued, then stops the worker
    return TSR_OK;
  });
}

tsr_status stream_synchronize(tsr_stream handle) {
  return guarded("stream_synchronize", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("stream_synchronize", &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, "stream_synchronize", handle, &stream);
        s != TSR_OK) {
      return s;
    }
    return stream->synchronize();
  });
}

tsr_status stream_query(tsr_stream handle) {
  return guarded("stream_query", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("stream_query", &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, "stream_query", handle, &stream); s != TSR_OK) {
      return s;
    }
    return stream->query();
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
    return stream->enqueue_callback(
        kOp, [fn, user_data](tsr_status status, const char*) { fn(user_data, status); });
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
    return stream->enqueue_callback(kOp, [fn, user_data](tsr_status status, const char* message) {
      fn(user_data, status, message);
    });
  });
}

tsr_status stream_busy_wait(tsr_stream handle, uint64_t microseconds) {
  static constexpr const char* kOp = "stream_busy_wait";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, handle, &stream); s != TSR_OK) return s;
    if (microseconds > kMaxBusyWaitMicroseconds) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %llu us is more than the limit of %llu us", kOp,
                  static_cast<unsigned long long>(microseconds),
                  static_cast<unsigned long long>(kMaxBusyWaitMicroseconds));
    }
    if (microseconds == 0) return TSR_OK;
    // The worker sleeps from the moment the work starts, as a kernel of that length would run:
    // the deadline is taken on the worker, not at enqueue time.
    return stream->enqueue(kOp, /*always_run=*/false, [microseconds](tsr_status, std::string*) {
      std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                    std::chrono::microseconds(microseconds));
      return TSR_OK;
    });
  });
}

}  // namespace api
}  // namespace tessera::host
