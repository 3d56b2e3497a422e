#include "callback_thread.h"

#include <pthread.h>

#include "stream.h"

namespace tessera::host {
namespace {

thread_local bool t_shared_callback_thread = false;

}  // namespace

bool on_shared_callback_thread() {
  return t_shared_callback_thread;
}

CallbackThread::CallbackThread() {
  thread_ = std::thread([this] { loop(); });
}

CallbackThread::~CallbackThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CallbackThread::run(const Stream* stream, const std::function<void()>& fn) {
  Job job{stream, &fn, nullptr, false};
  {
    std::unique_lock lock(mutex_);
    queue_.push_back(&job);
    work_cv_.notify_one();
    done_cv_.wait(lock, [&] { return job.done; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

void CallbackThread::loop() {
  t_shared_callback_thread = true;
  pthread_setname_np(pthread_self(), "tsr-host-cb");
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) break;  // stopping and drained
      job = queue_.front();
      queue_.pop_front();
    }
    set_current_callback_stream(job->stream);
    try {
      (*job->fn)();
    } catch (...) {
      job->error = std::current_exception();
    }
    set_current_callback_stream(nullptr);
    {
      std::lock_guard lock(mutex_);
      job->done = true;
    }
    // Several workers may wait at once, each for its own job.
    done_cv_.notify_all();
  }
}

}  // namespace tessera::host
