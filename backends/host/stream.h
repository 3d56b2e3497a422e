// Streams: one worker thread per stream runs its work in enqueue order. Work that fails marks
// the stream with a sticky error; later work is skipped (except callbacks, event records, event
// waits and host-signal waits, which always run so nothing waiting on the stream hangs), and
// stream_synchronize returns the first failure. Host callbacks run on the worker, or on the one
// shared callback thread (callback_threads=1, callback_thread.h) while the worker waits for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

struct Backend;
class CallbackThread;
class HostSignal;

class Stream {
 public:
  // One unit of work, run on the worker thread. `stream_status` is the stream's sticky status
  // when the work starts (TSR_OK unless earlier work failed). Returning non-OK fails the stream;
  // *message then says why (the operation name is prefixed by the stream).
  using Work = std::function<tsr_status(tsr_status stream_status, std::string* message)>;

  // A host callback: the stream's sticky status and failure message ("" when OK; valid only
  // during the call).
  using Callback = std::function<void(tsr_status status, const char* message)>;

  // `callback_thread`: the shared callback thread (callback_threads=1), or null to run callbacks
  // on this stream's worker. It must outlive the stream's worker.
  Stream(int32_t device, int32_t priority, CallbackThread* callback_thread = nullptr);
  ~Stream();  // closes and joins the worker if still running
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Starts the worker thread. Throws std::system_error when no thread can be created.
  void start();

  // Appends work. `always_run` work runs even after the stream has failed. Fails with
  // TSR_INVALID_ARGUMENT once the stream is closed. Thread-safe.
  tsr_status enqueue(const char* operation, bool always_run, Work work);

  // Appends a host callback (always runs, also after a failure). On the shared callback thread
  // when there is one; the worker waits for it to return before running later work.
  tsr_status enqueue_callback(const char* operation, Callback fn);

  // Appends a wait: later work runs once `signal` reaches `value`. The wait occupies the worker.
  // It fails the stream with TSR_CANCELLED when the signal is destroyed before reaching the value
  // or when the stream is destroyed (close_and_join) first: stream_destroy never hangs on a
  // signal nobody raises. `handle` names the signal in messages.
  tsr_status enqueue_signal_wait(const char* operation, std::shared_ptr<HostSignal> signal,
                                 uint64_t value, tsr_host_signal handle);

  // The sticky failure message ("operation: why"), "" while the stream is OK. Thread-safe.
  std::string failure_message();

  // TSR_FAILED_PRECONDITION naming `operation` when the caller is the shared callback thread and
  // this stream still has a callback queued: waiting for this stream there would never end (that
  // callback needs the very thread that waits). TSR_OK otherwise. Thread-safe.
  tsr_status check_waitable_from_callback_thread(const char* operation);

  // Blocks until the work enqueued so far is done, then returns the sticky status (setting the
  // last error). TSR_FAILED_PRECONDITION when called from this stream's own worker (a callback),
  // which would deadlock. Thread-safe.
  tsr_status synchronize();

  // TSR_NOT_READY while work is pending; otherwise the sticky status. Thread-safe, non-blocking.
  tsr_status query();

  // Blocks until the work enqueued so far is done; ignores failures. No-op on the worker itself.
  void wait_idle();

  // Refuses further work, lets the worker finish what is queued, and joins it. A host-signal wait
  // that is not satisfied by then fails with TSR_CANCELLED (and the work after it is skipped as
  // after any failure) instead of blocking the join forever. Idempotent.
  void close_and_join();

  // True when the calling thread is this stream's worker.
  bool on_worker_thread() const;

  int32_t device() const { return device_; }
  int32_t priority() const { return priority_; }

 private:
  struct Task {
    const char* operation;
    bool always_run;
    Work work;
    bool callback = false;  // counted in callbacks_pending_
  };

  tsr_status enqueue_task(Task task);
  void run();
  // The body of a signal wait on the worker: registers the wait so close_and_join can cancel it.
  tsr_status wait_for_signal(const std::shared_ptr<HostSignal>& signal, uint64_t value,
                             tsr_host_signal handle, std::string* message);

  const int32_t device_;
  const int32_t priority_;
  CallbackThread* const callback_thread_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // worker waits for tasks
  std::condition_variable done_cv_;  // synchronize waits for completions
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool closing_ = false;
  uint64_t callbacks_pending_ = 0;  // callbacks enqueued and not yet returned
  // Set (with closing_) by close_and_join: an unsatisfied signal wait ends as cancelled.
  std::atomic<bool> cancel_waits_{false};
  std::shared_ptr<HostSignal> waiting_on_;  // the signal the worker waits on now, or null
  tsr_status error_ = TSR_OK;
  std::string error_message_;
  std::thread worker_;
};

// The stream whose worker is running on the calling thread, or whose callback the shared
// callback thread is running; null elsewhere.
const Stream* current_worker_stream();

// Used by the shared callback thread around each callback (null afterwards).
void set_current_callback_stream(const Stream* stream);

// Handle <-> id conversion (see handles.h).
tsr_stream stream_handle(uint64_t id);
uint64_t stream_id(tsr_stream handle);

// Sets *out to the live stream behind `handle`, or fails with TSR_INVALID_ARGUMENT (NULL, never
// created, destroyed, or not a stream) naming `operation`. Thread-safe.
tsr_status lookup_stream(Backend& backend, const char* operation, tsr_stream handle,
                         std::shared_ptr<Stream>* out);

// Waits until every live stream has finished the work enqueued before this call (skipping the
// caller's own stream when called from a callback). Used before memory is unmapped, as cudaFree
// synchronises the device, so queued work never touches freed memory. Thread-safe.
void drain_streams(Backend& backend);

// Closes and joins every stream (last finalize).
void shutdown_streams(Backend& backend);

}  // namespace tessera::host
