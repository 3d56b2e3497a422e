#include "memory_check.h"

#include <optional>
#include <string>

#include "tessera/hal/pointer_info.h"

namespace tessera::ckpt {
namespace {

// nullopt: the backend has no pointer_attributes, or it failed (then nothing can be told either).
std::optional<hal::PointerInfo> info_of(const hal::Device& device, const void* data) {
  auto info = hal::pointer_info(*device.backend(), data);
  if (!info.ok() || !info->queried) return std::nullopt;
  return *info;
}

}  // namespace

Status check_device_memory(const hal::Device& device, std::string_view name, const void* data,
                           size_t bytes) {
  if (bytes == 0) return Status();
  const std::string tensor = "tensor '" + std::string(name) + "': ";
  if (data == nullptr) return invalid_argument(tensor + "null device pointer");
  const std::optional<hal::PointerInfo> a = info_of(device, data);
  if (!a) return Status();
  if (!a->is_device() || a->device != device.index()) {
    return invalid_argument(tensor + hal::pointer_text(data) + " is " +
                            hal::describe_pointer(*a, device.backend_name()) +
                            ", not device memory of the checkpointer's device " + device.id());
  }
  return hal::check_extent(*a, data, bytes, device.backend_name(),
                           "tensor '" + std::string(name) + "'");
}

Status check_host_memory(const hal::Device& device, std::string_view name, const void* data) {
  if (data == nullptr || device.has(TSR_CAP_HOST_ACCESSIBLE)) return Status();
  const std::optional<hal::PointerInfo> a = info_of(device, data);
  if (!a || !a->is_device()) return Status();
  return invalid_argument("tensor '" + std::string(name) + "': " + hal::pointer_text(data) +
                          " is " + hal::describe_pointer(*a, device.backend_name()) +
                          ", which the CPU cannot read (" + device.id() +
                          " is discrete); register it with add_device_tensor");
}

bool is_device_memory(const hal::Device& device, const void* data) {
  if (data == nullptr) return false;
  const std::optional<hal::PointerInfo> a = info_of(device, data);
  return a && a->is_device();
}

}  // namespace tessera::ckpt
