// The C++ face of the HAL: a Platform owns the registry of backends and lists their devices.
//
//   auto platform = tessera::hal::Platform::create().value();
//   for (const auto& device : platform->devices()) { ... device.create_stream() ... }
//
// Devices, buffers, streams and events keep their backend alive (shared ownership), so they may
// outlive the Platform object itself. All objects are thread-compatible; the backend calls they
// make are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/registry.h"
#include "tessera/hal/stream.h"

namespace tessera::hal {

struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// One device of one backend. Cheap to copy.
class Device {
 public:
  Device(std::shared_ptr<Backend> backend, int32_t index, const tsr_device_properties& props)
      : backend_(std::move(backend)), index_(index), properties_(props) {}
  // Device `index` of `backend`, its properties queried now (device_properties): for code that
  // holds a backend and an index but no Platform, such as a caller's stream. The backend's error
  // (naming the device) when the query fails.
  static Result<Device> query(std::shared_ptr<Backend> backend, int32_t index);

  const std::string& backend_name() const { return backend_->name(); }
  int32_t index() const { return index_; }
  // "host:0", "cuda:3"
  std::string id() const { return backend_name() + ":" + std::to_string(index_); }
  const tsr_device_properties& properties() const { return properties_; }
  bool has(uint64_t capability) const { return (properties_.capabilities & capability) != 0; }
  // The kernel-module formats module_load takes on this device: bit (1u << tsr_module_format);
  // module_format_names() (module.h) spells them. 0 without kernel modules.
  uint32_t module_formats() const {
    return backend_->api().module_load ? properties_.module_formats : 0;
  }
  bool takes_module_format(int32_t format) const {
    return format > 0 && format < 32 && (module_formats() & (1u << format)) != 0;
  }
  const std::shared_ptr<Backend>& backend() const { return backend_; }

  // Device memory of `bytes` bytes (RESOURCE_EXHAUSTED beyond capacity).
  Result<DeviceBuffer> allocate(size_t bytes) const;
  // Page-locked host memory for asynchronous copies with this device's backend.
  Result<HostBuffer> allocate_host(size_t bytes) const;
  // priority: 0 normal, negative higher.
  Result<Stream> create_stream(int32_t priority = 0) const;
  Result<Event> create_event(bool timing = true) const;
  Result<MemoryInfo> memory_info() const;
  // Bytes this process holds through DeviceBuffer on this device, and their high-water mark
  // (memory_stats.h: what is counted). Thread-safe; shared by every copy of this Device.
  DeviceMemoryStats memory_stats() const { return backend_->memory_counters().stats(index_); }
  // Starts a new high-water mark from the bytes in use now.
  void reset_peak() const { backend_->memory_counters().reset_peak(index_); }

 private:
  std::shared_ptr<Backend> backend_;
  int32_t index_;
  tsr_device_properties properties_;
};

struct PlatformOptions {
  RegistryOptions registry;
};

class Platform {
 public:
  // Loads the backends (see Registry) and enumerates their devices. Fails only on malformed
  // options; a platform with zero devices is valid.
  static Result<std::shared_ptr<Platform>> create(const PlatformOptions& options = {});

  const Registry& registry() const { return *registry_; }
  // Every device of every enabled backend, in registry order.
  const std::vector<Device>& devices() const { return devices_; }
  // The devices of one backend (empty when it is not enabled).
  std::vector<Device> devices(std::string_view backend) const;
  // "host:1" or ("host", 1); NOT_FOUND naming the backend's state when absent.
  Result<Device> device(std::string_view backend, int32_t index) const;
  Result<Device> device(std::string_view id) const;

 private:
  Platform() = default;
  std::unique_ptr<Registry> registry_;
  std::vector<Device> devices_;
};

}  // namespace tessera::hal
