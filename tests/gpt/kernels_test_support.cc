#include "kernels_test_support.h"

#include <cstdlib>
#include <string>

namespace tessera::gpt::testing {

Device* shared_device() {
  static Device* device = []() -> Device* {
    // TESSERA_TEST_BACKEND=cuda (bench/gpu_check.sh) runs the same checks on a GPU's image.
    const char* chosen = std::getenv("TESSERA_TEST_BACKEND");
    const std::string backend = chosen != nullptr && *chosen != '\0' ? chosen : "host";
    hal::PlatformOptions options;
    options.registry.selection = backend;
    auto platform = hal::Platform::create(options);
    if (!platform.ok()) {
      std::fprintf(stderr, "platform: %s\n", platform.status().to_string().c_str());
      return nullptr;
    }
    auto d = std::make_unique<Device>();
    d->platform = platform.value();
    auto host = d->platform->device(backend, 0);
    if (!host.ok()) {
      std::fprintf(stderr, "%s:0: %s\n", backend.c_str(), host.status().to_string().c_str());
      return nullptr;
    }
    d->device.emplace(host.value());
    auto stream = d->device->create_stream();
    auto kernels = GptKernels::load(*d->device);
    if (!stream.ok() || !kernels.ok()) {
      std::fprintf(stderr, "stream: %s; kernels: %s\n", stream.status().to_string().c_str(),
                   kernels.status().to_string().c_str());
      return nullptr;
    }
    d->stream.emplace(std::move(stream.value()));
    d->kernels = kernels.value();
    return d.release();  // lives until the process exits, as the backend does
  }();
  return device;
}

std::string dtype_param_name(const ::testing::TestParamInfo<uint32_t>& info) {
  return dtype_name(info.param);
}

}  // namespace tessera::gpt::testing
