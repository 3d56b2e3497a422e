// Buffer classification: one pointer_attributes query per used buffer, then the refusals.
#include "memory_kind.h"

#include <algorithm>

#include "tessera/hal/pointer_info.h"

namespace tessera::coll {

Result<MemoryMode> parse_memory_mode(std::string_view text) {
  if (text == "auto" || text.empty()) return MemoryMode::kAuto;
  if (text == "host") return MemoryMode::kHost;
  if (text == "device") return MemoryMode::kDevice;
  return invalid_argument("memory '" + std::string(text) + "': expected auto, host or device");
}

std::string_view memory_mode_name(MemoryMode mode) {
  switch (mode) {
    case MemoryMode::kAuto: return "auto";
    case MemoryMode::kHost: return "host";
    case MemoryMode::kDevice: return "device";
  }
  return "?";
}

Result<DevicePath> parse_device_path(std::string_view text) {
  if (text == "auto" || text.empty()) return DevicePath::kAuto;
  if (text == "native") return DevicePath::kNative;
  if (text == "staged") return DevicePath::kStaged;
  return invalid_argument("device path '" + std::string(text) +
                          "': expected auto, native or staged");
}

std::string_view device_path_name(DevicePath path) {
  switch (path) {
    case DevicePath::kAuto: return "auto";
    case DevicePath::kNative: return "native";
    case DevicePath::kStaged: return "staged";
  }
  return "?";
}

std::string_view route_name(DeviceRoute route) {
  switch (route) {
    case DeviceRoute::kHost: return "host";
    case DeviceRoute::kStaged: return "staged";
    case DeviceRoute::kNative: return "native";
  }
  return "?";
}

OpExtents op_extents(const OpDesc& d, int rank, int size) {
  const size_t e = hal::dtype_size(d.dtype);
  const size_t n = size_t(size);
  auto span_of = [](const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
    size_t end = 0;
    for (size_t i = 0; i < counts.size() && i < displs.size(); ++i) {
      if (counts[i] > 0) end = std::max(end, displs[i] + counts[i]);
    }
    return end;
  };
  OpExtents x;
  switch (d.kind) {
    case OpKind::kAllReduce: x.send = x.recv = d.count * e; break;
    case OpKind::kReduce:
      x.send = d.count * e;
      x.recv = rank == d.root ? d.count * e : 0;
      break;
    case OpKind::kBroadcast:
      x.send = rank == d.root ? d.count * e : 0;
      x.recv = d.count * e;
      break;
    case OpKind::kAllGather:
      x.send = d.count * e;
      x.recv = d.count * n * e;
      break;
    case OpKind::kAllGatherV:
      x.send = size_t(rank) < d.counts.size() ? d.counts[size_t(rank)] * e : 0;
      x.recv = span_of(d.counts, d.displs) * e;
      break;
    case OpKind::kReduceScatter:
      x.send = d.count * n * e;
      x.recv = d.count * e;
      break;
    case OpKind::kAllToAll: x.send = x.recv = d.count * n * e; break;
    case OpKind::kAllToAllV:
      x.send = span_of(d.counts, d.displs) * e;
      x.recv = span_of(d.recv_counts, d.recv_displs) * e;
      break;
    case OpKind::kSend: x.send = d.count * e; break;
    case OpKind::kRecv: x.recv = d.count * e; break;
    case OpKind::kBarrier: break;
  }
  return x;
}

namespace {

// One buffer: host or device memory of the target, or a refusal naming why.
Result<BufferMemory> classify_one(const std::string& op, const char* arg, const void* p,
                                  size_t bytes, const MemoryTarget& t) {
  if (!t.backend) {
    if (t.mode == MemoryMode::kDevice) {
      return invalid_argument(op + ": " + arg +
                              ": this communicator expects device memory (memory=device) but "
                              "was created without a device");
    }
    return BufferMemory::kHost;
  }
  TSR_ASSIGN_OR_RETURN(hal::PointerInfo info,
                       hal::pointer_info(*t.backend, p, op + ": pointer_attributes of " + arg));
  if (!info.is_device()) {
    if (t.mode == MemoryMode::kDevice) {
      return invalid_argument(
          op + ": " + arg + " (" + hal::pointer_text(p) + ") is " +
          (info.kind == hal::PointerKind::kPinnedHost ? "pinned host memory" : "host memory") +
          ", but this communicator expects device memory of " + t.id + " (memory=device)");
    }
    return BufferMemory::kHost;
  }
  const std::string owner = t.backend->name() + ":" + std::to_string(info.device);
  if (info.device != t.device) {
    return invalid_argument(op + ": " + arg + " is device memory of " + owner +
                            ", but this communicator runs on " + t.id);
  }
  TSR_RETURN_IF_ERROR(hal::check_extent(info, p, bytes, t.backend->name(), op + ": " + arg));
  if (!t.host_accessible) {
    if (t.mode == MemoryMode::kHost) {
      return invalid_argument(op + ": " + arg + " is device memory of " + owner +
                              " that the CPU cannot address, but this communicator expects host "
                              "memory (memory=host)");
    }
    if (!t.can_stage) {
      return invalid_argument(op + ": " + arg + " is device memory of " + owner +
                              " that the CPU cannot address, and this communicator was created "
                              "without a device to stage it through (Communicator::create with "
                              "the device)");
    }
  }
  return BufferMemory::kDevice;
}

}  // namespace

Result<BufferMemory> classify_buffers(const OpDesc& d, int rank, int size,
                                      const MemoryTarget& target) {
  const std::string op(op_name(d.kind));
  const OpExtents x = op_extents(d, rank, size);
  const char* send_name = d.kind == OpKind::kSend ? "buf" : "send";
  const char* recv_name = d.kind == OpKind::kRecv ? "buf" : "recv";
  std::optional<BufferMemory> send, recv;
  if (x.send > 0 && d.send != nullptr) {
    TSR_ASSIGN_OR_RETURN(send, classify_one(op, send_name, d.send, x.send, target));
  }
  if (x.recv > 0 && d.recv != nullptr) {
    TSR_ASSIGN_OR_RETURN(recv, classify_one(op, recv_name, d.recv, x.recv, target));
  }
  if (send && recv && *send != *recv) {
    auto name = [](BufferMemory m) {
      return m == BufferMemory::kDevice ? std::string("device memory") : std::string("host memory");
    };
    return invalid_argument(op + ": send is " + name(*send) + " but recv is " + name(*recv) +
                            (target.id.empty() ? std::string() : " (device " + target.id + ")") +
                            "; one call takes one kind of memory");
  }
  return send ? *send : recv.value_or(BufferMemory::kHost);
}

}  // namespace tessera::coll
