// Test support: the ModelState of model_state.h held in device memory of a (discrete) host
// device. The tests fill and read the device tensors only through stream copies via the host
// vectors of `host`, so on a discrete device (TESSERA_HOST_DEVICES=N:discrete) nothing here or in
// the checkpointer may dereference them. Header-only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model_state.h"
#include "tessera/hal/platform.h"

namespace tessera::ckpt::testing {

// The host backend alone with `devices` discrete devices (device pointers fault on CPU access)
// and one shared callback thread, whatever the environment says.
inline Result<std::shared_ptr<hal::Platform>> discrete_platform(int devices = 1) {
  hal::PlatformOptions popts;
  popts.registry.selection = "host";
  popts.registry.init_options["host"] =
      "devices=" + std::to_string(devices) + ";discrete=1;callback_threads=1";
  return hal::Platform::create(popts);
}

struct DeviceModel {
  explicit DeviceModel(hal::Device d, hal::Stream s) : device(std::move(d)), stream(std::move(s)) {}
  static Result<std::unique_ptr<DeviceModel>> create(const hal::Device& device) {
    TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
    return std::make_unique<DeviceModel>(device, std::move(stream));
  }

  hal::Device device;
  hal::Stream stream;
  std::vector<hal::DeviceBuffer> buffers;  // one per model tensor, registered
  ModelState host;                         // the staging copies and the blobs

  // Allocates the tensors on the device, fills them with the pattern of `step` (zeros when
  // step < 0) and registers them as device tensors (blobs as host strings).
  Status register_in(StateRegistry& reg, const Layout& layout, int rank, int64_t step) {
    host.tensors.clear();
    buffers.clear();
    for (const auto& spec : model_tensors()) {
      bool replicated;
      Slice slice = model_slice(spec, layout, rank, &replicated);
      host.tensors.push_back(
          step >= 0 ? pattern(spec, slice, step)
                    : std::vector<std::byte>(slice.elements() * hal::dtype_size(spec.dtype)));
      TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buffer, device.allocate(host.tensors.back().size()));
      buffers.push_back(std::move(buffer));
      TSR_RETURN_IF_ERROR(reg.add_device_tensor(spec.name, spec.dtype, spec.shape, slice,
                                                buffers.back(), replicated));
      if (auto p = model_placement(spec)) TSR_RETURN_IF_ERROR(reg.set_placement(spec.name, *p));
    }
    TSR_RETURN_IF_ERROR(upload());
    host.rng = step >= 0 ? ModelState::rng_of(rank, step) : "";
    host.cursor = step >= 0 ? ModelState::cursor_of(step) : "";
    TSR_RETURN_IF_ERROR(reg.add_blob("rng", &host.rng));
    return reg.add_blob("cursor", &host.cursor, /*replicated=*/true);
  }

  // Overwrites the device tensors (and blobs) with the pattern of `step`.
  Status fill(const Layout& layout, int rank, int64_t step) {
    host.fill(layout, rank, step);
    return upload();
  }

  // "" when every device byte is the pattern of `step` (read back through the stream).
  std::string check(const Layout& layout, int rank, int64_t step, int rng_rank) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      Status s = stream.copy(host.tensors[i].data(), buffers[i].data(), host.tensors[i].size());
      if (!s.ok()) return "download of tensor " + std::to_string(i) + ": " + s.to_string();
    }
    if (Status s = stream.synchronize(); !s.ok()) return "download: " + s.to_string();
    return host.check(layout, rank, step, rng_rank);
  }

 private:
  Status upload() {
    for (size_t i = 0; i < buffers.size(); ++i) {
      TSR_RETURN_IF_ERROR(
          stream.copy(buffers[i].data(), host.tensors[i].data(), host.tensors[i].size()));
    }
    return stream.synchronize();
  }
};

}  // namespace tessera::ckpt::testing
