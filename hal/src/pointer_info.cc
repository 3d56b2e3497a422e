#include "tessera/hal/pointer_info.h"

#include <cstdio>

namespace tessera::hal {

Result<PointerInfo> pointer_info(const Backend& backend, const void* ptr,
                                 std::string_view operation) {
  PointerInfo info;
  const auto query = backend.api().pointer_attributes;
  if (query == nullptr) return info;
  tsr_pointer_attributes attrs{};
  attrs.struct_size = sizeof attrs;
  attrs.type = TSR_MEMORY_UNKNOWN;
  attrs.device = -1;
  TSR_RETURN_IF_ERROR(backend.check(query(ptr, &attrs), operation));
  info.queried = true;
  switch (attrs.type) {
    case TSR_MEMORY_HOST_PINNED: info.kind = PointerKind::kPinnedHost; break;
    case TSR_MEMORY_DEVICE: info.kind = PointerKind::kDevice; break;
    case TSR_MEMORY_DEVICE_IPC: info.kind = PointerKind::kDeviceIpc; break;
    default: info.kind = PointerKind::kUnknown; break;
  }
  if (info.is_device()) info.device = attrs.device;
  info.base = attrs.base;
  info.size = attrs.size;
  return info;
}

std::string describe_pointer(const PointerInfo& info, std::string_view backend) {
  const std::string name(backend);
  const std::string owner = name + ":" + std::to_string(info.device);
  switch (info.kind) {
    case PointerKind::kDevice: return "device memory of " + owner;
    case PointerKind::kDeviceIpc: return "an IPC mapping of device memory of " + owner;
    case PointerKind::kPinnedHost: return "pinned host memory of the " + name + " backend";
    case PointerKind::kUnknown: break;
  }
  return "memory the " + name +
         " backend does not know (pageable host memory, or another backend's)";
}

std::string pointer_text(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

Status check_extent(const PointerInfo& info, const void* ptr, size_t bytes,
                    std::string_view backend, std::string_view what) {
  if (info.base == nullptr || info.size == 0) return Status();
  const auto* base = static_cast<const char*>(info.base);
  const auto* at = static_cast<const char*>(ptr);
  const size_t offset = at >= base ? size_t(at - base) : 0;
  if (at >= base && offset <= info.size && bytes <= info.size - offset) return Status();
  const std::string owner = info.is_device()
                                ? std::string(backend) + ":" + std::to_string(info.device)
                                : "the " + std::string(backend) + " backend";
  return invalid_argument(std::string(what) + ": " + std::to_string(bytes) + " bytes at offset " +
                          (at >= base ? std::to_string(offset) : "-" + std::to_string(base - at)) +
                          " run past the end of its " + std::to_string(info.size) +
                          "-byte allocation on " + owner);
}

}  // namespace tessera::hal
