#include "tessera/hal/module.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "tessera/common/log.h"
#include "tessera/hal/platform.h"

namespace tessera::hal {
namespace detail {

// The backend's module handle, unloaded when the Module and every Function taken from it are gone.
struct LoadedModule {
  std::shared_ptr<Backend> backend;
  int32_t device = -1;
  int32_t format = 0;
  std::string name;
  tsr_module handle = nullptr;

  ~LoadedModule() {
    if (handle == nullptr) return;
    Status status =
        backend->check(backend->api().module_unload(handle), "module_unload of '" + name + "'");
    if (!status.ok()) TSR_LOG(kError, "hal") << status.to_string();
  }
};

}  // namespace detail

namespace {

constexpr const char* kFormatNames[] = {"unknown",  "host-elf",        "cuda-cubin",
                                        "cuda-ptx", "hip-code-object", "spirv"};
static_assert(sizeof kFormatNames / sizeof kFormatNames[0] == TSR_MODULE_FORMAT_COUNT);

}  // namespace

const char* module_format_name(int32_t format) {
  if (format <= 0 || format >= TSR_MODULE_FORMAT_COUNT) return kFormatNames[0];
  return kFormatNames[format];
}

std::vector<std::string> module_format_list(uint32_t formats) {
  std::vector<std::string> out;
  for (int32_t format = 1; format < 32; ++format) {
    if ((formats & (1u << format)) != 0) out.emplace_back(module_format_name(format));
  }
  return out;
}

std::string module_format_names(uint32_t formats) {
  std::string out;
  for (const auto& name : module_format_list(formats)) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

LaunchConfig LaunchConfig::linear(uint64_t n, uint32_t block, uint32_t shared_bytes) {
  LaunchConfig config;
  const uint64_t per_block = block == 0 ? 1 : block;
  const uint64_t grid = n == 0 ? 1 : (n + per_block - 1) / per_block;
  // Beyond 2^32-1 blocks the launch is refused by the backend (grid.x too large), not wrapped.
  config.grid.x = grid > UINT32_MAX ? UINT32_MAX : uint32_t(grid);
  config.block.x = block;
  config.shared_bytes = shared_bytes;
  return config;
}

tsr_launch_config LaunchConfig::to_abi() const {
  tsr_launch_config out{};
  out.struct_size = sizeof out;
  out.grid = {grid.x, grid.y, grid.z};
  out.block = {block.x, block.y, block.z};
  out.shared_bytes = shared_bytes;
  return out;
}

int32_t Function::device() const {
  return module_ ? module_->device : -1;
}

const std::shared_ptr<Backend>& Function::backend() const {
  static const std::shared_ptr<Backend> kNone;
  return module_ ? module_->backend : kNone;
}

const std::string& Function::module_name() const {
  static const std::string kNone;
  return module_ ? module_->name : kNone;
}

Result<Module> Module::load(std::shared_ptr<Backend> backend, int32_t device, int32_t format,
                            std::span<const std::byte> image, std::string name) {
  if (!supported(*backend)) {
    return unimplemented(backend->name() + " does not support kernel modules (module_load is " +
                         "NULL in its table); cannot load '" + name + "'");
  }
  auto loaded = std::make_shared<detail::LoadedModule>();
  TSR_RETURN_IF_ERROR(
      backend->check(backend->api().module_load(device, format, image.data(), image.size(),
                                                name.c_str(), &loaded->handle),
                     "module_load of '" + name + "' (" + module_format_name(format) +
                         ") on device " + std::to_string(device)));
  loaded->backend = std::move(backend);
  loaded->device = device;
  loaded->format = format;
  loaded->name = std::move(name);
  Module module;
  module.module_ = std::move(loaded);
  return module;
}

Result<Module> Module::load(const Device& device, int32_t format, std::span<const std::byte> image,
                            std::string name) {
  return load(device.backend(), device.index(), format, image, std::move(name));
}

Result<Module> Module::load_file(std::shared_ptr<Backend> backend, int32_t device, int32_t format,
                                 const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return not_found("cannot read kernel image '" + path + "': " + std::strerror(errno));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return data_loss("error reading kernel image '" + path + "'");
  // PTX is text the driver compiles and must end with a NUL.
  if (format == TSR_MODULE_CUDA_PTX && (bytes.empty() || bytes.back() != '\0')) bytes.push_back(0);
  return load(std::move(backend), device, format, std::as_bytes(std::span(bytes)), path);
}

Result<Module> Module::load_file(const Device& device, int32_t format, const std::string& path) {
  return load_file(device.backend(), device.index(), format, path);
}

Result<Function> Module::function(std::string_view name) const {
  if (!module_) return failed_precondition("module_get_function on an empty module");
  const std::string kernel(name);
  Function function;
  TSR_RETURN_IF_ERROR(
      module_->backend->check(module_->backend->api().module_get_function(
                                  module_->handle, kernel.c_str(), &function.function_),
                              "module_get_function '" + kernel + "' in '" + module_->name + "'"));
  function.module_ = module_;
  function.name_ = kernel;
  return function;
}

const std::string& Module::name() const {
  static const std::string kNone;
  return module_ ? module_->name : kNone;
}
int32_t Module::device() const {
  return module_ ? module_->device : -1;
}
int32_t Module::format() const {
  return module_ ? module_->format : 0;
}
tsr_module Module::handle() const {
  return module_ ? module_->handle : nullptr;
}

}  // namespace tessera::hal
