// Kernel modules (backend ABI minor 3): an image of device code loaded onto one device, the
// kernels in it, and how a launch is shaped. Stream::launch (stream.h) enqueues a kernel.
//
//   auto module = hal::Module::load_file(device, TSR_MODULE_HOST_ELF, "kernels.so").value();
//   auto add = module.function("vector_add").value();
//   stream.launch(add, hal::LaunchConfig::linear(n, 256), a.data(), b.data(), c.data(), n);
//
// A Module and the Functions taken from it share the loaded image: it is unloaded when the last
// of them is destroyed. Work already enqueued that uses a kernel must have completed by then (the
// ABI's rule, as cuModuleUnload's): synchronize the streams first. Thread-compatible objects; the
// backend calls are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::hal {

class Device;

// "host-elf", "cuda-cubin", "cuda-ptx", "hip-code-object", "spirv"; "unknown" otherwise.
const char* module_format_name(int32_t format);
// The names of the formats whose bit (1u << format) is set in `formats` (tsr_device_properties::
// module_formats), in enum order; module_format_names joins them with ", " ("none" when empty).
std::vector<std::string> module_format_list(uint32_t formats);
std::string module_format_names(uint32_t formats);

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// Blocks per grid, threads per block and dynamic shared bytes per block.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0;

  // A one-dimensional launch covering `n` threads: grid.x = ceil(n / block) (at least 1).
  static LaunchConfig linear(uint64_t n, uint32_t block, uint32_t shared_bytes = 0);
  tsr_launch_config to_abi() const;
};

namespace detail {
struct LoadedModule;  // the backend handle and its unload, shared by a Module and its Functions
}

// One kernel of a loaded module. Cheap to copy; keeps the module loaded.
class Function {
 public:
  Function() = default;
  const std::string& name() const { return name_; }
  tsr_function handle() const { return function_; }
  int32_t device() const;
  const std::shared_ptr<Backend>& backend() const;
  // The module's name (its file, or the name given to load).
  const std::string& module_name() const;
  explicit operator bool() const { return function_ != nullptr; }

 private:
  friend class Module;
  std::shared_ptr<detail::LoadedModule> module_;
  tsr_function function_ = nullptr;
  std::string name_;
};

class Module {
 public:
  Module() = default;
  // Loads `image` (copied) of `format` onto `device` of `backend`; `name` names it in messages.
  // UNIMPLEMENTED when the backend has no kernel modules or the device does not take the format;
  // INVALID_ARGUMENT with the runtime's reason and the name for an image it refuses.
  static Result<Module> load(std::shared_ptr<Backend> backend, int32_t device, int32_t format,
                             std::span<const std::byte> image, std::string name);
  static Result<Module> load(const Device& device, int32_t format, std::span<const std::byte> image,
                             std::string name);
  // Reads `path` and loads it as above, the path as its name. NOT_FOUND naming the path when it
  // cannot be read.
  static Result<Module> load_file(std::shared_ptr<Backend> backend, int32_t device, int32_t format,
                                  const std::string& path);
  static Result<Module> load_file(const Device& device, int32_t format, const std::string& path);

  // The kernel called `name`; NOT_FOUND naming it and the module when there is none.
  Result<Function> function(std::string_view name) const;

  const std::string& name() const;
  int32_t device() const;
  int32_t format() const;
  tsr_module handle() const;
  explicit operator bool() const { return module_ != nullptr; }

  // Whether `backend` has the four kernel-module entries.
  static bool supported(const Backend& backend) { return backend.api().module_load != nullptr; }

 private:
  std::shared_ptr<detail::LoadedModule> module_;
};

// The ABI argument of each value: its bytes, by address (a device pointer is passed as a
// pointer, e.g. buffer.data() or a float*). The addresses are those of `values`, so the array
// must be used while they live: Stream::launch uses it within the call. Each value must be
// trivially copyable (a DeviceBuffer is not: pass its data()).
template <typename... Args>
std::array<tsr_kernel_arg, sizeof...(Args)> kernel_args(const Args&... values) {
  static_assert((std::is_trivially_copyable_v<Args> && ...),
                "kernel arguments are passed by their bytes: pass scalars, pointers or plain "
                "structs (buffer.data(), not the buffer)");
  return {tsr_kernel_arg{static_cast<const void*>(&values), sizeof(Args)}...};
}

}  // namespace tessera::hal
