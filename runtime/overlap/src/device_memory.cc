#include "device_memory.h"

#include <cstdint>
#include <sstream>

namespace tessera::overlap {
namespace {

std::string address(const void* ptr) {
  std::ostringstream out;
  out << ptr;
  return out.str();
}

}  // namespace

Status check_device_range(const hal::Device& device, const void* ptr, size_t bytes,
                          const std::string& what) {
  const auto& api = device.backend()->api();
  if (ptr == nullptr || api.pointer_attributes == nullptr) return Status();
  tsr_pointer_attributes attrs{};
  attrs.struct_size = sizeof attrs;
  if (Status s = device.backend()->check(api.pointer_attributes(ptr, &attrs), "pointer_attributes");
      !s.ok()) {
    return s.with_context(what);
  }
  const bool device_memory = attrs.type == TSR_MEMORY_DEVICE || attrs.type == TSR_MEMORY_DEVICE_IPC;
  if (!device_memory) {
    if (device.has(TSR_CAP_HOST_ACCESSIBLE)) return Status();  // the device reads host memory
    return invalid_argument(
        what + ": " + address(ptr) + " is " +
        (attrs.type == TSR_MEMORY_HOST_PINNED
             ? "pinned host memory"
             : "not device memory of backend '" + device.backend_name() + "' (host memory?)") +
        ", but the memory of device " + device.id() +
        " is not host-accessible: pass device memory of " + device.id() +
        " (hal::Device::allocate)");
  }
  if (attrs.device != device.index()) {
    return invalid_argument(what + ": " + address(ptr) + " is device memory of " +
                            device.backend_name() + ":" + std::to_string(attrs.device) +
                            ", not of the engine's device " + device.id());
  }
  const auto at = reinterpret_cast<uintptr_t>(ptr) - reinterpret_cast<uintptr_t>(attrs.base);
  if (at + bytes > attrs.size) {
    return invalid_argument(what + ": " + std::to_string(bytes) + " bytes at offset " +
                            std::to_string(at) + " run past the end of its allocation of " +
                            std::to_string(attrs.size) + " bytes on " + device.id());
  }
  return Status();
}

Status download(const hal::Stream& stream, const void* device_src, size_t count,
                std::vector<float>& out) {
  out.resize(count);
  if (count == 0) return Status();
  TSR_RETURN_IF_ERROR(stream.copy(out.data(), device_src, count * sizeof(float)));
  return stream.synchronize();
}

Status upload(const hal::Stream& stream, void* device_dst, const std::vector<float>& in) {
  if (in.empty()) return Status();
  TSR_RETURN_IF_ERROR(stream.copy(device_dst, in.data(), in.size() * sizeof(float)));
  return stream.synchronize();
}

}  // namespace tessera::overlap
