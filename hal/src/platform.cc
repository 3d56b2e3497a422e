#include "tessera/hal/platform.h"

#include <cstring>

namespace tessera::hal {

Result<Device> Device::query(std::shared_ptr<Backend> backend, int32_t index) {
  tsr_device_properties props{};
  props.struct_size = sizeof(props);
  TSR_RETURN_IF_ERROR(backend->check(backend->api().device_properties(index, &props),
                                     "device_properties of device " + std::to_string(index)));
  return Device(std::move(backend), index, props);
}

Result<DeviceBuffer> Device::allocate(size_t bytes) const {
  void* ptr = nullptr;
  TSR_RETURN_IF_ERROR(backend_->check(backend_->api().device_malloc(index_, bytes, &ptr),
                                      "device_malloc on device " + std::to_string(index_)));
  return DeviceBuffer(backend_, index_, ptr, bytes);
}

Result<HostBuffer> Device::allocate_host(size_t bytes) const {
  void* ptr = nullptr;
  TSR_RETURN_IF_ERROR(
      backend_->check(backend_->api().host_malloc_pinned(bytes, &ptr), "host_malloc_pinned"));
  return HostBuffer(backend_, ptr, bytes);
}

Result<Stream> Device::create_stream(int32_t priority) const {
  tsr_stream stream = nullptr;
  TSR_RETURN_IF_ERROR(backend_->check(backend_->api().stream_create(index_, priority, &stream),
                                      "stream_create on device " + std::to_string(index_)));
  return Stream(backend_, index_, stream);
}

Result<Event> Device::create_event(bool timing) const {
  return Event::create(backend_, index_, timing);
}

Result<MemoryInfo> Device::memory_info() const {
  MemoryInfo info;
  TSR_RETURN_IF_ERROR(backend_->check(
      backend_->api().memory_info(index_, &info.free_bytes, &info.total_bytes), "memory_info"));
  return info;
}

Result<std::shared_ptr<Platform>> Platform::create(const PlatformOptions& options) {
  std::shared_ptr<Platform> platform(new Platform());
  TSR_ASSIGN_OR_RETURN(platform->registry_, Registry::create(options.registry));
  for (const auto& record : platform->registry_->records()) {
    if (record.state != BackendState::kEnabled) continue;
    for (int32_t i = 0; i < record.device_count; ++i) {
      TSR_ASSIGN_OR_RETURN(Device device, Device::query(record.backend, i));
      platform->devices_.push_back(std::move(device));
    }
  }
  return platform;
}

std::vector<Device> Platform::devices(std::string_view backend) const {
  std::vector<Device> out;
  for (const auto& device : devices_) {
    if (device.backend_name() == backend) out.push_back(device);
  }
  return out;
}

Result<Device> Platform::device(std::string_view backend, int32_t index) const {
  const BackendRecord* record = registry_->find(backend);
  if (record == nullptr) return not_found("no backend named '" + std::string(backend) + "'");
  if (record->state != BackendState::kEnabled) {
    return not_found("backend '" + std::string(backend) + "' is " +
                     std::string(backend_state_name(record->state)) + ": " + record->reason);
  }
  for (const auto& device : devices_) {
    if (device.backend_name() == backend && device.index() == index) return device;
  }
  return not_found("backend '" + std::string(backend) + "' has " +
                   std::to_string(record->device_count) + " device(s); no device " +
                   std::to_string(index));
}

Result<Device> Platform::device(std::string_view id) const {
  size_t colon = id.rfind(':');
  if (colon == std::string_view::npos) return device(id, 0);
  std::string_view index_text = id.substr(colon + 1);
  int32_t index = 0;
  for (char c : index_text) {
    if (c < '0' || c > '9' || index > 1'000'000) {
      return invalid_argument("device id '" + std::string(id) + "': expected <backend>:<index>");
    }
    index = index * 10 + (c - '0');
  }
  if (index_text.empty()) {
    return invalid_argument("device id '" + std::string(id) + "': expected <backend>:<index>");
  }
  return device(id.substr(0, colon), index);
}

}  // namespace tessera::hal
