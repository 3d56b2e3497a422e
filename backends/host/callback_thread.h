// The one shared callback thread of callback_threads=1 (TESSERA_HOST_CALLBACK_THREADS=1): every
// host callback of the process runs on it, in the order stream workers reach their callbacks,
// the way CUDA runs host functions on one runtime thread. A stream's worker hands its callback
// over and waits for it to return before running later work, so a callback that blocks holds
// its own stream and every other stream's callbacks. Default mode (0) has no such thread: each
// stream runs its callbacks on its own worker.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera::host {

class Stream;

class CallbackThread {
 public:
  // Starts the thread ("tsr-host-cb"). Throws std::system_error when it cannot be created.
  CallbackThread();
  // Runs what is queued, then joins. Callers join every stream first (their workers may be
  // waiting in run()).
  ~CallbackThread();
  CallbackThread(const CallbackThread&) = delete;
  CallbackThread& operator=(const CallbackThread&) = delete;

  // Runs `fn` on the shared thread as a callback of `stream` (current_worker_stream() there
  // returns `stream` meanwhile, so the same-stream deadlock checks hold) and blocks until it
  // returns. Rethrows what `fn` threw, on the calling thread. Thread-safe.
  void run(const Stream* stream, const std::function<void()>& fn);

 private:
  struct Job {
    const Stream* stream;
    const std::function<void()>* fn;
    std::exception_ptr error;
    bool done = false;
  };

  void loop();

  std::mutex mutex_;
  std::condition_variable work_cv_;  // the thread waits for jobs
  std::condition_variable done_cv_;  // run() waits for its job
  std::deque<Job*> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// True on the shared callback thread (callback_threads=1), where a wait for any stream that
// still has a callback queued can never end.
bool on_shared_callback_thread();

}  // namespace tessera::host
