// fakert's fake driver modules (fakert_runtime.h, fakecuModule*/fakecuLaunchKernel): what the CUDA
// backend's module entries resolve with dlsym (backends/cuda/module.cc). The fake has no GPU, so
// it runs the host format of backend_abi.h (an ELF shared object for this CPU exporting
// tessera_host_module_v1), loaded from memory with memfd + dlopen, and refuses a cubin, a fatbin
// or PTX saying why. A launch copies the argument bytes (their sizes are the kernel's, as the real
// driver takes them from the kernel's parameters) and runs the kernel once per block, in order, on
// the stream's worker thread.
#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fakert_internal.h"
#include "fakert_runtime.h"
#include "tessera/hal/backend_abi.h"

using namespace fakert_internal;

struct fakecuModule_st;

struct fakecuFunction_st {
  fakecuModule_st* module = nullptr;
  const tsr_host_kernel_desc* desc = nullptr;
  int max_dynamic_shared = 48 << 10;  // raised by FuncSetAttribute up to the opt-in limit
};

struct fakecuModule_st {
  void* library = nullptr;  // dlopen handle of the image
  const tsr_host_module* table = nullptr;
  std::map<std::string, std::unique_ptr<fakecuFunction_st>> functions;  // by name, on demand
};

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kOutOfMemory = 2;
constexpr int kInvalidHandle = 400;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxSharedOptin = 96 << 10;  // fakertDevAttrMaxSharedMemoryPerBlockOptin
constexpr size_t kMaxImageBytes = size_t(1) << 30;

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
constexpr uint16_t kHostMachine = EM_NONE;
#endif
constexpr uint16_t kMachineCuda = 190;         // EM_CUDA: a cubin
constexpr uint32_t kFatbinMagic = 0xBA55ED50;  // a fatbin (fatBinaryCtl.h)

// Why the calling thread's last image was refused; fakecuGetErrorString appends it to the text of
// an image error, as a driver's log would carry it.
thread_local char t_reason[512] = "";

int refuse(int result, const char* format, ...) __attribute__((format(printf, 2, 3)));
int refuse(int result, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_reason, sizeof t_reason, format, args);
  va_end(args);
  return result;
}

bool looks_like_ptx(const char* text) {
  for (const char* key : {".version", ".target", "//"}) {
    if (std::strncmp(text, key, std::strlen(key)) == 0) return true;
  }
  return std::strstr(text, ".version") != nullptr && std::strstr(text, ".target") != nullptr;
}

// The size of an ELF64 image without being told: the end of its section or program header table,
// whichever is further (sections are last in what linkers write), as a driver sizes a cubin.
size_t elf_size(const Elf64_Ehdr& header) {
  const uint64_t sections = header.e_shoff + uint64_t(header.e_shnum) * header.e_shentsize;
  const uint64_t programs = header.e_phoff + uint64_t(header.e_phnum) * header.e_phentsize;
  return size_t(sections > programs ? sections : programs);
}

// Checks the image is a host ELF shared object and sets *bytes to its size; a refusal says what
// the image is instead.
int classify(const void* image, size_t* bytes) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic == kFatbinMagic) {
    return refuse(FAKECU_ERROR_NO_BINARY_FOR_GPU,
                  "a CUDA fatbin: fakert has no GPU and runs only host-format images "
                  "(TSR_MODULE_HOST_ELF)");
  }
  const auto* ident = static_cast<const unsigned char*>(image);
  if (std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    if (looks_like_ptx(static_cast<const char*>(image))) {
      return refuse(
          FAKECU_ERROR_NO_BINARY_FOR_GPU,
          "PTX: fakert has no GPU to JIT-compile it for; it runs only host-format images");
    }
    return refuse(FAKECU_ERROR_INVALID_IMAGE,
                  "neither an ELF image nor a fatbin (first bytes %02x %02x %02x %02x)", ident[0],
                  ident[1], ident[2], ident[3]);
  }
  if (ident[EI_CLASS] != ELFCLASS64) {
    return refuse(FAKECU_ERROR_INVALID_IMAGE, "a 32-bit ELF image: fakert loads 64-bit ones only");
  }
  Elf64_Ehdr header;
  std::memcpy(&header, image, sizeof header);
  if (header.e_machine == kMachineCuda) {
    return refuse(FAKECU_ERROR_NO_BINARY_FOR_GPU,
                  "a CUDA cubin (ELF machine EM_CUDA): fakert has no GPU and runs only "
                  "host-format images (TSR_MODULE_HOST_ELF)");
  }
  if (header.e_machine != kHostMachine || header.e_type != ET_DYN) {
    return refuse(FAKECU_ERROR_INVALID_IMAGE,
                  "an ELF image for machine %u, type %u: fakert runs shared objects (ET_DYN) for "
                  "this CPU (machine %u)",
                  unsigned(header.e_machine), unsigned(header.e_type), unsigned(kHostMachine));
  }
  *bytes = elf_size(header);
  if (*bytes < sizeof header || *bytes > kMaxImageBytes) {
    return refuse(FAKECU_ERROR_INVALID_IMAGE, "an ELF image whose headers give %zu bytes", *bytes);
  }
  return kSuccess;
}

// dlopen from memory: the image goes to a memfd, opened by its /proc path.
int open_image(const void* image, size_t bytes, fakecuModule_st* module) {
  int fd = memfd_create("fakert-module", MFD_CLOEXEC);
  if (fd < 0) return refuse(kOutOfMemory, "memfd_create failed: %s", std::strerror(errno));
  const char* data = static_cast<const char*>(image);
  for (size_t done = 0; done < bytes;) {
    ssize_t n = write(fd, data + done, bytes - done);
    if (n <= 0) {
      close(fd);
      return refuse(kOutOfMemory, "writing the image to a memfd failed: %s", std::strerror(errno));
    }
    done += size_t(n);
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  module->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  close(fd);  // the mapping stays
  if (module->library == nullptr) {
    const char* why = dlerror();
    return refuse(FAKECU_ERROR_INVALID_IMAGE, "dlopen: %s", why ? why : "failed");
  }
  auto entry = reinterpret_cast<tsr_host_module_entry_fn>(
      dlsym(module->library, TSR_HOST_MODULE_ENTRY_POINT));
  module->table = entry ? entry() : nullptr;
  const char* problem = entry == nullptr           ? "exports no " TSR_HOST_MODULE_ENTRY_POINT
                        : module->table == nullptr ? "returned a NULL module table"
                        : module->table->abi_major != TSR_BACKEND_ABI_MAJOR
                            ? "was built for another ABI major"
                            : nullptr;
  if (problem != nullptr) {
    dlclose(module->library);
    module->library = nullptr;
    return refuse(FAKECU_ERROR_INVALID_IMAGE, "the host image %s", problem);
  }
  return kSuccess;
}

// One launch: the argument bytes copied at enqueue, then every block in order.
struct LaunchWork {
  const tsr_host_kernel_desc* desc;
  tsr_dim3 grid;
  tsr_dim3 block;
  uint32_t shared_bytes;
  std::vector<std::vector<unsigned char>> args;

  int run(const char** message) const {
    std::vector<const void*> pointers(args.size());
    for (size_t i = 0; i < args.size(); ++i) pointers[i] = args[i].data();
    std::vector<unsigned char> shared(shared_bytes);
    tsr_host_kernel_call call{};
    call.struct_size = sizeof call;
    call.grid = grid;
    call.block = block;
    call.shared = shared_bytes ? shared.data() : nullptr;
    call.shared_bytes = shared_bytes;
    call.args = pointers.data();
    call.arg_count = pointers.size();
    for (uint32_t z = 0; z < grid.z; ++z) {
      for (uint32_t y = 0; y < grid.y; ++y) {
        for (uint32_t x = 0; x < grid.x; ++x) {
          call.block_index = tsr_dim3{x, y, z};
          if (int code = desc->fn(&call, message); code != 0) return code;
        }
      }
    }
    return 0;
  }
};

}  // namespace

extern "C" {

int fakecuModuleLoadData(fakecuModule* module, const void* image) {
  if (module == nullptr || image == nullptr) return kInvalidValue;
  t_reason[0] = '\0';
  size_t bytes = 0;
  if (int r = classify(image, &bytes); r != kSuccess) return r;
  auto created = std::make_unique<fakecuModule_st>();
  if (int r = open_image(image, bytes, created.get()); r != kSuccess) return r;
  *module = created.release();
  return kSuccess;
}

int fakecuModuleLoadDataEx(fakecuModule* module, const void* image, unsigned int num_options,
                           int* options, void** option_values) {
  if (module == nullptr || image == nullptr) return kInvalidValue;
  if (num_options > 0 && (options == nullptr || option_values == nullptr)) return kInvalidValue;
  t_reason[0] = '\0';
  size_t bytes = 0;
  int r = classify(image, &bytes);
  if (r == kSuccess) return fakecuModuleLoadData(module, image);
  // PTX would go through the JIT: say in its error log why there is none.
  if (looks_like_ptx(static_cast<const char*>(image))) {
    char* log = nullptr;
    size_t log_bytes = 0;
    for (unsigned i = 0; i < num_options; ++i) {
      if (options[i] == FAKECU_JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(option_values[i]);
      if (options[i] == FAKECU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
        log_bytes = size_t(reinterpret_cast<uintptr_t>(option_values[i]));
      }
    }
    if (log != nullptr && log_bytes > 0) {
      std::snprintf(log, log_bytes,
                    "fakert JIT: no GPU in the fake runtime, so no PTX can be compiled (it runs "
                    "only host-format images)");
    }
    return FAKECU_ERROR_INVALID_PTX;
  }
  return r;
}

int fakecuModuleUnload(fakecuModule module) {
  if (module == nullptr) return kInvalidHandle;
  if (module->library != nullptr) dlclose(module->library);
  delete module;
  return kSuccess;
}

int fakecuModuleGetFunction(fakecuFunction* function, fakecuModule module, const char* name) {
  if (function == nullptr || name == nullptr) return kInvalidValue;
  if (module == nullptr) return kInvalidHandle;
  if (auto it = module->functions.find(name); it != module->functions.end()) {
    *function = it->second.get();
    return kSuccess;
  }
  for (size_t i = 0; i < module->table->kernel_count; ++i) {
    const tsr_host_kernel_desc& desc = module->table->kernels[i];
    if (desc.name != nullptr && std::strcmp(desc.name, name) == 0) {
      auto created = std::make_unique<fakecuFunction_st>();
      created->module = module;
      created->desc = &desc;
      *function = created.get();
      module->functions.emplace(name, std::move(created));
      return kSuccess;
    }
  }
  return FAKECU_ERROR_NOT_FOUND;
}

int fakecuFuncGetAttribute(int* value, int attribute, fakecuFunction function) {
  if (value == nullptr) return kInvalidValue;
  if (function == nullptr) return kInvalidHandle;
  switch (attribute) {
    case FAKECU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = kMaxThreadsPerBlock; return kSuccess;
    case FAKECU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; return kSuccess;
    case FAKECU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = function->max_dynamic_shared;
      return kSuccess;
  }
  return kInvalidValue;
}

int fakecuFuncSetAttribute(fakecuFunction function, int attribute, int value) {
  if (function == nullptr) return kInvalidHandle;
  if (attribute != FAKECU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || value < 0 ||
      value > kMaxSharedOptin) {
    return kInvalidValue;
  }
  function->max_dynamic_shared = value;
  return kSuccess;
}

int fakecuFuncGetParamInfo(fakecuFunction function, size_t index, size_t* offset, size_t* size) {
  if (function == nullptr) return kInvalidHandle;
  if (index >= function->desc->arg_count) return kInvalidValue;  // as the driver: past the end
  size_t at = 0;  // each parameter aligned to its size (at most 8), as the ABI lays them out
  for (size_t i = 0; i <= index; ++i) {
    const size_t bytes = function->desc->arg_sizes[i];
    const size_t align = bytes >= 8 ? 8 : bytes >= 4 ? 4 : bytes >= 2 ? 2 : 1;
    at = (at + align - 1) / align * align;
    if (i < index) at += bytes;
  }
  if (offset) *offset = at;
  if (size) *size = function->desc->arg_sizes[index];
  return kSuccess;
}

int fakecuLaunchKernel(fakecuFunction function, unsigned int grid_x, unsigned int grid_y,
                       unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                       unsigned int block_z, unsigned int shared_bytes, fakertStream_t stream,
                       void** params, void** extra) {
  if (function == nullptr) return kInvalidHandle;
  if (extra != nullptr) return kInvalidValue;  // the backend passes kernelParams only
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0 ||
      uint64_t(block_x) * block_y * block_z > uint64_t(kMaxThreadsPerBlock) ||
      shared_bytes > unsigned(function->max_dynamic_shared)) {
    return kInvalidValue;
  }
  const tsr_host_kernel_desc* desc = function->desc;
  if (desc->arg_count > 0 && params == nullptr) return kInvalidValue;
  auto work = std::make_shared<LaunchWork>();
  work->desc = desc;
  work->grid = tsr_dim3{grid_x, grid_y, grid_z};
  work->block = tsr_dim3{block_x, block_y, block_z};
  work->shared_bytes = shared_bytes;
  for (size_t i = 0; i < desc->arg_count; ++i) {  // copied now, as cuLaunchKernel does
    const auto* bytes = static_cast<const unsigned char*>(params[i]);
    work->args.emplace_back(bytes, bytes + desc->arg_sizes[i]);
  }
  fakertError_t r = submit(stream, [work, stream] {
    const char* message = nullptr;
    if (int code = work->run(&message); code != 0) {
      std::fprintf(stderr, "fakert: host kernel %s failed with %d: %s\n", work->desc->name, code,
                   message ? message : "(no message)");
      if (stream != nullptr) stream->failure.store(fakertErrorLaunchFailure);
    }
  });
  return r == fakertSuccess ? kSuccess : kInvalidValue;
}

}  // extern "C"

namespace fakert_internal {

const char* last_module_reason() {
  return t_reason;
}

}  // namespace fakert_internal
