// Streams: one worker thread per stream runs its work in enqueue order. Work that fails marks
// the stream with a sticky error; later work is skipped (except callbacks, event records and event
// waits, which always run so nothing waiting on the stream hangs), and stream_synchronize returns
// the first failure.
#pragma once

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

class Stream {
 public:
  // One unit of work, run on the worker thread. `stream_status` is the stream's sticky status
  // when the work starts (TSR_OK unless earlier work failed). Returning non-OK fails the stream;
  // *message then says why (the operation name is prefixed by the stream).
  using Work = std::function<tsr_status(tsr_status stream_status, std::string* message)>;

  Stream(int32_t device, int32_t priority);
  ~Stream();  // closes and joins the worker if still running
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Starts the worker thread. Throws std::system_error when no thread can be created.
  void start();

  // Appends work. `always_run` work runs even after the stream has failed. Fails with
  // TSR_INVALID_ARGUMENT once the stream is closed. Thread-safe.
  tsr_status enqueue(const char* operation, bool always_run, Work work);

  // Blocks until the work enqueued so far is done, then returns the sticky status (setting the
  // last error). TSR_FAILED_PRECONDITION when called from this stream's own worker (a callback),
  // which would deadlock. Thread-safe.
  tsr_status synchronize();

  // TSR_NOT_READY while work is pending; otherwise the sticky status. Thread-safe, non-blocking.
  tsr_status query();

  // Blocks until the work enqueued so far is done; ignores failures. No-op on the worker itself.
  void wait_idle();

  // Refuses further work, lets the worker finish what is queued, and joins it. Idempotent.
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
  };

  void run();

  const int32_t device_;
  const int32_t priority_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // worker waits for tasks
  std::condition_variable done_cv_;  // synchronize waits for completions
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool closing_ = false;
  tsr_status error_ = TSR_OK;
  std::string error_message_;
  std::thread worker_;
};

// The stream whose worker is running on the calling thread, or null.
const Stream* current_worker_stream();

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
