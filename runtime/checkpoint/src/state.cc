#include "tessera/checkpoint/state.h"

#include "memory_check.h"
#include "utf8.h"

namespace tessera::ckpt {

int64_t Slice::elements() const {
  int64_t n = 1;
  for (int64_t l : len) n *= l;
  return n;
}

Slice full_slice(const std::vector<int64_t>& shape) {
  return Slice{std::vector<int64_t>(shape.size(), 0), shape};
}

Result<Slice> split_slice(const std::vector<int64_t>& shape, const Slice& of, int dim, int parts,
                          int index) {
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || parts <= 0 || index < 0 ||
      index >= parts) {
    return invalid_argument("split of dim " + std::to_string(dim) + " into " +
                            std::to_string(parts) + " parts (part " + std::to_string(index) +
                            ") is out of range");
  }
  if (of.len[dim] % parts != 0) {
    return invalid_argument("extent " + std::to_string(of.len[dim]) + " of dim " +
                            std::to_string(dim) + " does not split into " + std::to_string(parts) +
                            " parts");
  }
  Slice out = of;
  out.len[dim] = of.len[dim] / parts;
  out.offset[dim] = of.offset[dim] + index * out.len[dim];
  return out;
}

std::string slice_text(const Slice& slice) {
  std::string out = "[";
  for (size_t d = 0; d < slice.offset.size(); ++d) {
    if (d) out += ", ";
    out += std::to_string(slice.offset[d]) + ":" + std::to_string(slice.offset[d] + slice.len[d]);
  }
  return out + "]";
}

size_t TensorEntry::bytes() const {
  return static_cast<size_t>(slice.elements()) * hal::dtype_size(dtype);
}

Status StateRegistry::check_new_name(std::string_view name) const {
  if (name.empty()) return invalid_argument("state names must not be empty");
  // Names go into the manifest's and the agreement's JSON, which cannot hold invalid UTF-8.
  if (!valid_utf8(name)) {
    return invalid_argument("state name '" + escaped(name) + "' is not valid UTF-8");
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return already_exists("tensor '" + t.name + "' is already registered");
  }
  for (const auto& b : blobs_) {
    if (b.name == name) return already_exists("blob '" + b.name + "' is already registered");
  }
  return Status();
}

static Status check_slice(std::string_view name, const std::vector<int64_t>& shape,
                          const Slice& slice) {
  if (slice.offset.size() != shape.size() || slice.len.size() != shape.size()) {
    return invalid_argument("tensor '" + std::string(name) + "': slice has " +
                            std::to_string(slice.offset.size()) + " dims, shape has " +
                            std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || slice.offset[d] < 0 || slice.len[d] < 0 ||
        slice.offset[d] + slice.len[d] > shape[d]) {
      return invalid_argument("tensor '" + std::string(name) + "': slice " + slice_text(slice) +
                              " is outside its shape in dim " + std::to_string(d));
    }
  }
  return Status();
}

Status StateRegistry::add_host_tensor(std::string name, hal::DType dtype,
                                      std::vector<int64_t> shape, Slice slice, void* data,
                                      bool replicated) {
  TSR_RETURN_IF_ERROR(check_new_name(name));
  TSR_RETURN_IF_ERROR(check_slice(name, shape, slice));
  if (data == nullptr && slice.elements() > 0) {
    return invalid_argument("tensor '" + name + "': null data");
  }
  // The snapshot memcpy()s host tensors: device memory the CPU cannot read would fault there.
  if (device_) TSR_RETURN_IF_ERROR(check_host_memory(*device_, name, data));
  tensors_.push_back(TensorEntry{std::move(name), dtype, std::move(shape), std::move(slice),
                                 replicated, Memory::kHost, data, std::nullopt});
  return Status();
}

Status StateRegistry::add_device_tensor(std::string name, hal::DType dtype,
                                        std::vector<int64_t> shape, Slice slice,
                                        const hal::DeviceBuffer& buffer, bool replicated) {
  TSR_RETURN_IF_ERROR(check_new_name(name));
  TSR_RETURN_IF_ERROR(check_slice(name, shape, slice));
  const size_t bytes = static_cast<size_t>(slice.elements()) * hal::dtype_size(dtype);
  if (buffer.size() < bytes) {
    return invalid_argument("tensor '" + name + "': device buffer of " +
                            std::to_string(buffer.size()) + " bytes holds less than its slice (" +
                            std::to_string(bytes) + " bytes)");
  }
  if (device_ && buffer && buffer.device() != device_->index()) {
    return invalid_argument("tensor '" + name + "': the buffer is memory of device " +
                            std::to_string(buffer.device()) +
                            ", not of the checkpointer's device " + device_->id());
  }
  return add_checked_device_tensor(std::move(name), dtype, std::move(shape), std::move(slice),
                                   buffer.data(), replicated);
}

Status StateRegistry::add_device_tensor(std::string name, hal::DType dtype,
                                        std::vector<int64_t> shape, Slice slice, void* data,
                                        bool replicated) {
  TSR_RETURN_IF_ERROR(check_new_name(name));
  TSR_RETURN_IF_ERROR(check_slice(name, shape, slice));
  return add_checked_device_tensor(std::move(name), dtype, std::move(shape), std::move(slice), data,
                                   replicated);
}

Status StateRegistry::add_checked_device_tensor(std::string name, hal::DType dtype,
                                                std::vector<int64_t> shape, Slice slice, void* data,
                                                bool replicated) {
  if (!device_) {
    return failed_precondition("tensor '" + name +
                               "' is in device memory but CheckpointOptions::device is unset");
  }
  const size_t bytes = static_cast<size_t>(slice.elements()) * hal::dtype_size(dtype);
  // Copies of another device's (or backend's) pointer on this device's stream would read the
  // wrong memory or fault; the backend knows which allocation a pointer belongs to.
  TSR_RETURN_IF_ERROR(check_device_memory(*device_, name, data, bytes));
  tensors_.push_back(TensorEntry{std::move(name), dtype, std::move(shape), std::move(slice),
                                 replicated, Memory::kDevice, data, std::nullopt});
  return Status();
}

Status StateRegistry::add_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape,
                                 Slice slice, void* data, bool replicated) {
  if (device_ && is_device_memory(*device_, data)) {
    return add_device_tensor(std::move(name), dtype, std::move(shape), std::move(slice), data,
                             replicated);
  }
  return add_host_tensor(std::move(name), dtype, std::move(shape), std::move(slice), data,
                         replicated);
}

Status StateRegistry::add_blob(BlobEntry blob) {
  TSR_RETURN_IF_ERROR(check_new_name(blob.name));
  if (!blob.get || !blob.set) return invalid_argument("blob '" + blob.name + "': get/set missing");
  blobs_.push_back(std::move(blob));
  return Status();
}

Status StateRegistry::add_blob(std::string name, std::string* value, bool replicated) {
  if (value == nullptr) return invalid_argument("blob '" + name + "': null string");
  return add_blob(BlobEntry{std::move(name), [value] { return *value; },
                            [value](std::string_view bytes) {
                              value->assign(bytes);
                              return Status();
                            },
                            replicated});
}

Status StateRegistry::set_placement(std::string_view name, Placement placement) {
  for (auto& t : tensors_) {
    if (t.name != name) continue;
    const int nd = static_cast<int>(t.shape.size());
    auto bad = [&](const char* field, int dim) {
      return invalid_argument("tensor '" + t.name + "': placement " + field + "=" +
                              std::to_string(dim) + " is outside its " + std::to_string(nd) +
                              " dims");
    };
    if (placement.tp_dim < -1 || placement.tp_dim >= nd) return bad("tp_dim", placement.tp_dim);
    if (placement.zero_dim < -1 || placement.zero_dim >= nd) {
      return bad("zero_dim", placement.zero_dim);
    }
    if (placement.expert_dim < -1 || placement.expert_dim >= nd) {
      return bad("expert_dim", placement.expert_dim);
    }
    if (placement.layer < -1) {
      return invalid_argument("tensor '" + t.name + "': placement layer=" +
                              std::to_string(placement.layer) + " must be >= -1");
    }
    if (placement.zero_stage < 1 || placement.zero_stage > 3) {
      return invalid_argument("tensor '" + t.name + "': placement zero_stage must be 1..3");
    }
    t.placement = placement;
    return Status();
  }
  return not_found("set_placement: no tensor '" + std::string(name) + "' is registered");
}

const TensorEntry* StateRegistry::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

size_t StateRegistry::total_tensor_bytes() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.bytes();
  return n;
}

}  // namespace tessera::ckpt
