#include "device_memory.h"

#include "tessera/hal/pointer_info.h"

namespace tessera::overlap {

Status check_device_range(const hal::Device& device, const void* ptr, size_t bytes,
                          const std::string& what) {
  if (ptr == nullptr) return Status();
  auto info = hal::pointer_info(*device.backend(), ptr);
  if (!info.ok()) return info.status().with_context(what);
  if (!info->queried) return Status();
  if (!info->is_device()) {
    if (device.has(TSR_CAP_HOST_ACCESSIBLE)) return Status();  // the device reads host memory
    return invalid_argument(
        what + ": " + hal::pointer_text(ptr) + " is " +
        (info->kind == hal::PointerKind::kPinnedHost
             ? "pinned host memory"
             : "not device memory of backend '" + device.backend_name() + "' (host memory?)") +
        ", but the memory of device " + device.id() +
        " is not host-accessible: pass device memory of " + device.id() +
        " (hal::Device::allocate)");
  }
  if (info->device != device.index()) {
    return invalid_argument(what + ": " + hal::pointer_text(ptr) + " is " +
                            hal::describe_pointer(*info, device.backend_name()) +
                            ", not of the engine's device " + device.id());
  }
  return hal::check_extent(*info, ptr, bytes, device.backend_name(), what);
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
