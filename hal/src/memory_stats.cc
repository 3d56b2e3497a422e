#include "tessera/hal/memory_stats.h"

#include <algorithm>

namespace tessera::hal {

DeviceMemoryStats& DeviceMemoryCounters::slot(int32_t device) {
  if (static_cast<size_t>(device) >= devices_.size()) devices_.resize(size_t(device) + 1);
  return devices_[size_t(device)];
}

void DeviceMemoryCounters::add(int32_t device, uint64_t bytes) {
  if (device < 0) return;
  std::lock_guard lock(mutex_);
  DeviceMemoryStats& s = slot(device);
  s.in_use += bytes;
  s.peak = std::max(s.peak, s.in_use);
}

void DeviceMemoryCounters::remove(int32_t device, uint64_t bytes) {
  if (device < 0) return;
  std::lock_guard lock(mutex_);
  DeviceMemoryStats& s = slot(device);
  s.in_use -= std::min(s.in_use, bytes);
}

DeviceMemoryStats DeviceMemoryCounters::stats(int32_t device) const {
  std::lock_guard lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return {};
  return devices_[size_t(device)];
}

void DeviceMemoryCounters::reset_peak(int32_t device) {
  if (device < 0) return;
  std::lock_guard lock(mutex_);
  DeviceMemoryStats& s = slot(device);
  s.peak = s.in_use;
}

}  // namespace tessera::hal
