// Events: event_record enqueues a marker on a stream; the marker completes (and takes its
// timestamp) when the stream's worker reaches it. An event holds only its latest marker, so
// re-recording replaces the capture while waits already enqueued keep the marker they captured.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

class Stream;
struct Backend;

// One recorded point on a stream. Thread-safe.
class Marker {
 public:
  explicit Marker(const Stream* stream) : stream_(stream) {}

  // Called by the stream's worker when all earlier work is done: stamps the time and wakes
  // waiters.
  void complete();
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until complete().
  void wait();
  // The completion time; valid once done().
  std::chrono::steady_clock::time_point time() const { return time_; }
  // The stream the marker was recorded on (only compared, never dereferenced).
  const Stream* stream() const { return stream_; }

 private:
  const Stream* const stream_;
  std::atomic<bool> done_{false};
  std::chrono::steady_clock::time_point time_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

class Event {
 public:
  Event(int32_t device, uint32_t flags) : device_(device), flags_(flags) {}

  int32_t device() const { return device_; }
  bool timing_disabled() const { return (flags_ & TSR_EVENT_DISABLE_TIMING) != 0; }

  // The latest capture, or null when never recorded. Thread-safe.
  std::shared_ptr<Marker> marker() const {
    std::lock_guard lock(mutex_);
    return marker_;
  }
  void set_marker(std::shared_ptr<Marker> marker) {
    std::lock_guard lock(mutex_);
    marker_ = std::move(marker);
  }

 private:
  const int32_t device_;
  const uint32_t flags_;
  mutable std::mutex mutex_;
  std::shared_ptr<Marker> marker_;
};

tsr_event event_handle(uint64_t id);
uint64_t event_id(tsr_event handle);

// Sets *out to the live event behind `handle`, or fails with TSR_INVALID_ARGUMENT naming
// `operation` and `param`. Thread-safe.
tsr_status lookup_event(Backend& backend, const char* operation, const char* param,
                        tsr_event handle, std::shared_ptr<Event>* out);

}  // namespace tessera::host
