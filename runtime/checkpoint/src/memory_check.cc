#include "memory_check.h"

#include <cstdio>
#include <optional>
#include <string>

namespace tessera::ckpt {
namespace {

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// nullopt: the backend has no pointer_attributes, or it failed (then nothing can be told either).
std::optional<tsr_pointer_attributes> attributes_of(const hal::Device& device, const void* data) {
  const auto query = device.backend()->api().pointer_attributes;
  if (query == nullptr) return std::nullopt;
  tsr_pointer_attributes a{};
  a.struct_size = sizeof a;
  if (query(data, &a) != TSR_OK) return std::nullopt;
  return a;
}

bool is_device_type(int32_t type) {
  return type == TSR_MEMORY_DEVICE || type == TSR_MEMORY_DEVICE_IPC;
}

// "device memory of host:1", "pinned host memory of the host backend", ...
std::string what_it_is(const hal::Device& device, const tsr_pointer_attributes& a) {
  const std::string& backend = device.backend_name();
  switch (a.type) {
    case TSR_MEMORY_DEVICE: return "device memory of " + backend + ":" + std::to_string(a.device);
    case TSR_MEMORY_DEVICE_IPC:
      return "an IPC mapping of device memory of " + backend + ":" + std::to_string(a.device);
    case TSR_MEMORY_HOST_PINNED: return "pinned host memory of the " + backend + " backend";
    default:
      return "memory the " + backend +
             " backend does not know (pageable host memory, or another backend's)";
  }
}

}  // namespace

Status check_device_memory(const hal::Device& device, std::string_view name, const void* data,
                           size_t bytes) {
  if (bytes == 0) return Status();
  const std::string tensor = "tensor '" + std::string(name) + "': ";
  if (data == nullptr) return invalid_argument(tensor + "null device pointer");
  const std::optional<tsr_pointer_attributes> a = attributes_of(device, data);
  if (!a) return Status();
  if (!is_device_type(a->type) || a->device != device.index()) {
    return invalid_argument(tensor + pointer_text(data) + " is " + what_it_is(device, *a) +
                            ", not device memory of the checkpointer's device " + device.id());
  }
  const auto* base = static_cast<const std::byte*>(a->base);
  const auto* at = static_cast<const std::byte*>(data);
  const size_t offset = static_cast<size_t>(at - base);
  if (offset > a->size || bytes > a->size - offset) {
    return invalid_argument(
        tensor + "its " + std::to_string(bytes) + " bytes at " + pointer_text(data) +
        " run past the end of the " + std::to_string(a->size) + "-byte allocation of " +
        device.id() + " at " + pointer_text(a->base) + " (offset " + std::to_string(offset) + ")");
  }
  return Status();
}

Status check_host_memory(const hal::Device& device, std::string_view name, const void* data) {
  if (data == nullptr || device.has(TSR_CAP_HOST_ACCESSIBLE)) return Status();
  const std::optional<tsr_pointer_attributes> a = attributes_of(device, data);
  if (!a || !is_device_type(a->type)) return Status();
  return invalid_argument("tensor '" + std::string(name) + "': " + pointer_text(data) + " is " +
                          what_it_is(device, *a) + ", which the CPU cannot read (" + device.id() +
                          " is discrete); register it with add_device_tensor");
}

bool is_device_memory(const hal::Device& device, const void* data) {
  if (data == nullptr) return false;
  const std::optional<tsr_pointer_attributes> a = attributes_of(device, data);
  return a && is_device_type(a->type);
}

}  // namespace tessera::ckpt
