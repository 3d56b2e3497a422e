// Virtual devices: each is a slice of this process's host memory with its own capacity, so the
// host backend can emulate N accelerators with M bytes each on one machine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

class Device {
 public:
  // `capacity_source` is a static string naming where the capacity came from, for messages.
  // `discrete`: the device's memory is not CPU-addressable (Config::discrete).
  Device(int32_t index, uint64_t capacity, const char* capacity_source, bool discrete);

  int32_t index() const { return index_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Charges `bytes` against the capacity. TSR_RESOURCE_EXHAUSTED (with the usage in the message)
  // when it does not fit. Thread-safe (lock-free).
  tsr_status reserve(uint64_t bytes);
  // Returns bytes charged by reserve(). Thread-safe.
  void release(uint64_t bytes);

  // Fills every field of *out (struct_size included) for this device. Thread-safe.
  void describe(tsr_device_properties* out) const;

 private:
  const int32_t index_;
  const uint64_t capacity_;
  const char* const capacity_source_;
  const bool discrete_;
  std::atomic<uint64_t> used_{0};
};

// Capability flags a host device reports. In discrete mode TSR_CAP_HOST_ACCESSIBLE and
// TSR_CAP_HOST_REGISTER are off: device memory faults on CPU access and host_register is refused.
uint64_t host_capabilities(bool discrete);

}  // namespace tessera::host
