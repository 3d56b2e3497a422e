// Host signals (ABI minor 2): a 64-bit counter the host raises and streams wait on, like a
// timeline semaphore. A wait occupies the waiting stream's worker on a condition variable, never
// the callback thread, so host-driven work (a collective run by a proxy thread) sits on a stream
// without holding any other backend thread. Raising takes the signal's lock only briefly and never
// waits for a stream, so it may be called from a host callback.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

struct Backend;

class HostSignal {
 public:
  explicit HostSignal(int32_t device) : device_(device) {}

  int32_t device() const { return device_; }

  // Counter = max(counter, value); wakes every waiter to re-check. Thread-safe.
  void raise(uint64_t value);
  // The counter now. Thread-safe.
  uint64_t value() const;
  // Marks the signal destroyed: every wait not yet satisfied, now or later, ends with
  // kDestroyed. Thread-safe.
  void destroy();
  // Wakes every waiter to re-check its cancel flag (a stream that is being destroyed).
  void wake();

  enum class WaitResult { kReached, kDestroyed, kCancelled };
  // Blocks until the counter is >= target (kReached, preferred when several hold), the signal is
  // destroyed, or `cancel` is set (the caller sets it and then calls wake()). *seen = the counter
  // when the wait ended.
  WaitResult wait(uint64_t target, const std::atomic<bool>& cancel, uint64_t* seen);

 private:
  const int32_t device_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t value_ = 0;
  bool destroyed_ = false;
};

tsr_host_signal host_signal_handle(uint64_t id);
uint64_t host_signal_id(tsr_host_signal handle);

// Sets *out to the live signal behind `handle`, or fails with TSR_INVALID_ARGUMENT (NULL, never
// created, destroyed, or not a host signal) naming `operation`. Thread-safe.
tsr_status lookup_host_signal(Backend& backend, const char* operation, tsr_host_signal handle,
                              std::shared_ptr<HostSignal>* out);

}  // namespace tessera::host
