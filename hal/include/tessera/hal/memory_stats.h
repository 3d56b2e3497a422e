// Bytes of device memory held through DeviceBuffer, per device of one Backend object: in use now
// and the high-water mark. Every backend gets it, since the count lives in the C++ wrapper and
// not in the backend library. What it sees: each DeviceBuffer from construction (Device::allocate
// or adopting a device_malloc pointer) to release; not device_malloc calls made directly on the C
// table, nor a backend's own workspaces or a caching allocator's reserve (memory_info has those).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tessera::hal {

struct DeviceMemoryStats {
  uint64_t in_use = 0;  // bytes held by live DeviceBuffers now
  uint64_t peak = 0;    // highest in_use since the Backend opened or the last reset_peak
};

// The counters of one Backend object (a process that opens a backend twice counts each copy
// apart). Thread-safe: one mutex, taken once per allocation and free, which are not hot paths.
class DeviceMemoryCounters {
 public:
  void add(int32_t device, uint64_t bytes);
  void remove(int32_t device, uint64_t bytes);  // never below 0
  DeviceMemoryStats stats(int32_t device) const;
  // Sets the peak to the bytes in use now, so the next peak covers what follows.
  void reset_peak(int32_t device);

 private:
  DeviceMemoryStats& slot(int32_t device);  // grows the table; the caller holds mutex_
  mutable std::mutex mutex_;
  std::vector<DeviceMemoryStats> devices_;  // index: device; negative indices are not counted
};

}  // namespace tessera::hal
