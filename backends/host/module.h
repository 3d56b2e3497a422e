// Kernel modules (ABI minor 3) for the host format, TSR_MODULE_HOST_ELF: an ELF shared object
// exporting tessera_host_module_v1, loaded from memory (memfd_create + dlopen of
// /proc/self/fd/N), its kernel table validated and copied at load. A launch copies its arguments,
// rewrites device pointers to the backend's own view of device memory (discrete mode) and runs
// every block on the stream's worker. A launch holds its function, and so its module, until it
// has run: module_unload with launches in flight is safe here (the image is closed after the last
// one), although the ABI asks callers to synchronize first, as CUDA does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

struct Backend;

// Limits a launch is checked against. They are those of a CUDA GPU without opt-in, so a kernel
// that runs on the host backend also fits a GPU's launch.
inline constexpr uint64_t kMaxThreadsPerBlock = 1024;
inline constexpr uint32_t kMaxSharedBytes = 48 * 1024;  // dynamic shared memory per block
inline constexpr uint32_t kMaxGridX = 0x7fffffff;       // grid.y and grid.z: 65535
inline constexpr uint32_t kMaxGridYZ = 65535;
inline constexpr size_t kMaxKernelArgBytes = 4096;  // all arguments of one kernel together

// One kernel of a loaded module, copied from the image's tsr_host_kernel_desc.
struct HostKernel {
  std::string name;
  tsr_host_kernel_fn fn = nullptr;
  std::vector<size_t> arg_sizes;
};

// A loaded image. Closing it (dlclose, close of the memfd) happens in the destructor, when the
// handle has been unloaded and the last launch holding it has run.
class Module {
 public:
  Module(int32_t device, std::string name) : device_(device), name_(std::move(name)) {}
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Loads `bytes` of `image` (copied into a memfd), checks and copies the kernel table.
  // TSR_INVALID_ARGUMENT naming the image for anything dlopen or the table check refuses.
  tsr_status load(const void* image, size_t bytes);

  int32_t device() const { return device_; }
  const std::string& name() const { return name_; }
  const std::vector<HostKernel>& kernels() const { return kernels_; }
  // The function handle of each kernel, same order; filled by module_load.
  std::vector<uint64_t> function_ids;

 private:
  tsr_status check_table(const tsr_host_module* table);

  const int32_t device_;
  const std::string name_;  // the image's name for messages
  int fd_ = -1;             // kept open while loaded, so /proc/self/fd/N names only this image
  void* handle_ = nullptr;
  std::vector<HostKernel> kernels_;
};

// A kernel handle: the module it lives in (kept loaded while a launch holds it) and its index.
struct Function {
  std::shared_ptr<Module> module;
  size_t index = 0;
  const HostKernel& kernel() const { return module->kernels()[index]; }
};

// "host-elf", "cuda-cubin", ...; "unknown" outside the enum.
const char* module_format_name(int32_t format);

}  // namespace tessera::host
