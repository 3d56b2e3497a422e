// Internals shared by fakert.cc (errors, devices, memory) and fakert_stream.cc (streams, events,
// copies): the thread's last error and current device, the live streams, and the stream and
// event objects behind fakertStream_t and fakertEvent_t.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "fakert_runtime.h"

namespace fakert_internal {

using Clock = std::chrono::steady_clock;

// Records `error` as the calling thread's last error (not NotReady) and returns it.
fakertError_t set_error(fakertError_t error);
int current_device();
bool valid_device(int device);
// The live streams, for the implicit synchronisation of Free and of the NULL stream.
void register_stream(fakertStream_t stream);
bool unregister_stream(fakertStream_t stream);
void synchronize_all();  // live streams, and destroyed ones whose work is still running
// Destroyed streams with work left (cudaStreamDestroy returns at once; the stream goes when its
// work is done): counted so that synchronize_all waits for them too.
void add_zombie();
void remove_zombie();
// Runs `work` on the stream, or right away (after every stream) for the NULL stream.
fakertError_t submit(fakertStream_t stream, std::function<void()> work);
// Mapped pinned memory has device addresses in a window of their own, host | kDeviceWindow: a
// non-canonical address on x86-64 and AArch64, so a CPU load from one faults.
inline constexpr uintptr_t kDeviceWindow = uintptr_t(1) << 60;
// The host address behind a device address of mapped pinned memory, with `bytes` inside the
// allocation; NULL when it is not one.
void* mapped_host_address(uintptr_t device_address, size_t bytes);

// Why the calling thread's last module load was refused (fakert_module.cc); "" when none was.
const char* last_module_reason();

// A point in a stream's work, completed by the worker when it gets there.
struct Marker {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point time;
  void complete() {
    std::lock_guard lock(mutex);
    time = Clock::now();
    done = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard lock(mutex);
    return done;
  }
};

}  // namespace fakert_internal

struct fakertStream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  size_t pending = 0;  // queued or running
  bool closing = false;
  bool detached = false;  // destroyed while busy: the worker deletes the stream when done
  // fakertErrorLaunchFailure once a host kernel failed on this stream (fakert_module.cc): sticky,
  // returned by synchronize and query from then on.
  std::atomic<int> failure{0};
  std::thread worker;

  fakertStream_st() {
    worker = std::thread([this] { run(); });
  }
  ~fakertStream_st() {
    {
      std::lock_guard lock(mutex);
      closing = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();  // not when the worker itself deletes a detached stream
  }
  void enqueue(std::function<void()> work) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(work));
      ++pending;
    }
    cv.notify_all();
  }
  void synchronize() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return pending == 0; });
  }
  bool idle() {
    std::lock_guard lock(mutex);
    return pending == 0;
  }
  // Lets the worker finish what is queued and then delete the stream (and the zombie count).
  void detach_when_done() {
    {
      std::lock_guard lock(mutex);
      closing = true;
      detached = true;
    }
    cv.notify_all();
  }
  void run() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return !queue.empty() || closing; });
        if (queue.empty()) {
          if (!detached) return;
          lock.unlock();
          worker.detach();
          delete this;  // nothing of the stream is touched after this
          fakert_internal::remove_zombie();
          return;
        }
        work = std::move(queue.front());
        queue.pop_front();
      }
      work();
      work = nullptr;
      {
        std::lock_guard lock(mutex);
        --pending;
      }
      cv.notify_all();
    }
  }
};

struct fakertEvent_st {
  unsigned flags = 0;
  std::mutex mutex;
  std::shared_ptr<fakert_internal::Marker> marker;  // the latest capture; null until recorded
  std::shared_ptr<fakert_internal::Marker> current() {
    std::lock_guard lock(mutex);
    return marker;
  }
};
