// module_load, module_unload, module_get_function and launch for TSR_MODULE_HOST_ELF (module.h).
#include "module.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {
namespace {

constexpr const char* kFormatNames[] = {"unknown",  "host-elf",        "cuda-cubin",
                                        "cuda-ptx", "hip-code-object", "spirv"};
static_assert(sizeof kFormatNames / sizeof kFormatNames[0] == TSR_MODULE_FORMAT_COUNT);

// Arguments are copied into one block, each at a 16-byte boundary (any scalar or pointer type).
constexpr size_t kArgAlign = 16;

tsr_module module_handle(uint64_t id) {
  return reinterpret_cast<tsr_module>(uintptr_t(id));
}
uint64_t module_id(tsr_module handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}
tsr_function function_handle(uint64_t id) {
  return reinterpret_cast<tsr_function>(uintptr_t(id));
}
uint64_t function_id(tsr_function handle) {
  return uint64_t(reinterpret_cast<uintptr_t>(handle));
}

// dlerror's text with the memfd path it names replaced by the image's name.
std::string dlerror_naming(const std::string& fd_path, const std::string& name) {
  const char* err = dlerror();
  std::string text = err ? err : "unknown dlopen error";
  for (size_t at = text.find(fd_path); at != std::string::npos; at = text.find(fd_path, at)) {
    text.replace(at, fd_path.size(), name);
    at += name.size();
  }
  return text;
}

// Whether `offset + size` lies within `bytes` (no overflow).
bool within(uint64_t offset, uint64_t size, size_t bytes) {
  return offset <= bytes && size <= bytes - offset;
}

// Checks what dlopen trusts without checking: an image cut short maps pages past the end of the
// file, and touching them kills the process with SIGBUS. So the ELF header must be a 64-bit
// shared object for this machine, and every program and section header, and every segment's
// file bytes, must lie inside the image. Returns "" when it does, else why not.
std::string elf_image_problem(const void* image, size_t bytes) {
  Elf64_Ehdr eh;
  if (bytes < sizeof eh)
    return "it is " + std::to_string(bytes) + " bytes, shorter than an ELF header";
  std::memcpy(&eh, image, sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "not an ELF image (no ELF magic)";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_type != ET_DYN) {
    return "not a 64-bit ELF shared object";
  }
#if defined(__x86_64__)
  if (eh.e_machine != EM_X86_64)
    return "built for ELF machine " + std::to_string(eh.e_machine) + ", not x86-64";
#elif defined(__aarch64__)
  if (eh.e_machine != EM_AARCH64)
    return "built for ELF machine " + std::to_string(eh.e_machine) + ", not AArch64";
#endif
  if (eh.e_phentsize != sizeof(Elf64_Phdr) ||
      !within(eh.e_phoff, uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr), bytes)) {
    return "truncated or corrupt: its program headers lie outside its " + std::to_string(bytes) +
           " bytes";
  }
  if (eh.e_shnum > 0 && !within(eh.e_shoff, uint64_t(eh.e_shnum) * eh.e_shentsize, bytes)) {
    return "truncated: its section headers end past its " + std::to_string(bytes) + " bytes";
  }
  for (size_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, static_cast<const char*>(image) + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type != PT_NULL && !within(ph.p_offset, ph.p_filesz, bytes)) {
      return "truncated: segment " + std::to_string(i) + " ends at byte " +
             std::to_string(ph.p_offset + ph.p_filesz) + ", past its " + std::to_string(bytes) +
             " bytes";
    }
  }
  return "";
}

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

tsr_status lookup_module(Backend& backend, const char* operation, tsr_module handle,
                         std::shared_ptr<Module>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: module is NULL", operation);
  *out = backend.modules.find(module_id(handle));
  if (*out == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: module %p is not a loaded module of the host backend (unloaded, or never "
                "loaded)",
                operation, static_cast<void*>(handle));
  }
  return TSR_OK;
}

tsr_status lookup_function(Backend& backend, tsr_function handle, std::shared_ptr<Function>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "launch: function is NULL");
  *out = backend.functions.find(function_id(handle));
  if (*out == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch: function %p is not a kernel of a loaded module (its module was unloaded, "
                "or it was never obtained from module_get_function)",
                static_cast<void*>(handle));
  }
  return TSR_OK;
}

// Dimensions >= 1 within the grid limits, threads per block and shared bytes within theirs.
tsr_status check_config(const HostKernel& kernel, const tsr_launch_config* config) {
  const char* k = kernel.name.c_str();
  if (config == nullptr)
    return fail(TSR_INVALID_ARGUMENT, "launch of kernel '%s': config is NULL", k);
  constexpr size_t kEnd = offsetof(tsr_launch_config, shared_bytes) + sizeof(uint32_t);
  if (config->struct_size < kEnd) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s': config->struct_size is %zu, at least %zu expected", k,
                config->struct_size, kEnd);
  }
  const tsr_dim3& g = config->grid;
  const tsr_dim3& b = config->block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s': grid %ux%ux%u, block %ux%ux%u: every dimension must be "
                ">= 1",
                k, g.x, g.y, g.z, b.x, b.y, b.z);
  }
  if (g.x > kMaxGridX || g.y > kMaxGridYZ || g.z > kMaxGridYZ) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s': grid %ux%ux%u exceeds the limits %u x %u x %u", k, g.x, g.y,
                g.z, kMaxGridX, kMaxGridYZ, kMaxGridYZ);
  }
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (threads > kMaxThreadsPerBlock) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s': block %ux%ux%u is %llu threads, more than the %llu per "
                "block a device takes",
                k, b.x, b.y, b.z, static_cast<unsigned long long>(threads),
                static_cast<unsigned long long>(kMaxThreadsPerBlock));
  }
  if (config->shared_bytes > kMaxSharedBytes) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s': shared_bytes %u is more than the host device's limit of "
                "%u bytes per block",
                k, config->shared_bytes, kMaxSharedBytes);
  }
  return TSR_OK;
}

// The fields this minor knows, read one by one: the caller's struct may end at shared_bytes.
tsr_launch_config copy_config(const tsr_launch_config& config) {
  tsr_launch_config out{};
  out.struct_size = sizeof out;
  out.grid = config.grid;
  out.block = config.block;
  out.shared_bytes = config.shared_bytes;
  return out;
}

// A launch's own copy of its arguments: one block of bytes and a pointer to each argument in it.
struct LaunchArgs {
  std::unique_ptr<std::byte[]> storage;
  std::vector<const void*> pointers;
};

// Checks count and sizes against the kernel's table, then copies the arguments. In discrete mode
// an argument of pointer size whose value lies in a device allocation or IPC mapping becomes the
// address of the same byte in the backend's accessible view (the kernel runs on the "device" and
// sees device memory as the device does). Pointers inside larger arguments (structs) are not
// rewritten, as a GPU kernel sees the device addresses it was given.
tsr_status copy_args(const Backend& backend, const Module& module, const HostKernel& kernel,
                     const tsr_kernel_arg* args, size_t arg_count, LaunchArgs* out) {
  const char* k = kernel.name.c_str();
  const char* m = module.name().c_str();
  if (arg_count != kernel.arg_sizes.size()) {
    return fail(TSR_INVALID_ARGUMENT,
                "launch of kernel '%s' (module '%s'): %zu argument(s) given, the kernel takes %zu",
                k, m, arg_count, kernel.arg_sizes.size());
  }
  if (arg_count > 0 && args == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "launch of kernel '%s' (module '%s'): args is NULL", k, m);
  }
  std::vector<size_t> offsets(arg_count);
  size_t total = 0;
  for (size_t i = 0; i < arg_count; ++i) {
    if (args[i].size != kernel.arg_sizes[i]) {
      return fail(TSR_INVALID_ARGUMENT,
                  "launch of kernel '%s' (module '%s'): argument %zu is %zu bytes, the kernel "
                  "takes %zu",
                  k, m, i, args[i].size, kernel.arg_sizes[i]);
    }
    if (args[i].value == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "launch of kernel '%s' (module '%s'): argument %zu: value is NULL", k, m, i);
    }
    offsets[i] = total;
    total += (args[i].size + kArgAlign - 1) / kArgAlign * kArgAlign;
  }
  out->storage = std::make_unique<std::byte[]>(total == 0 ? 1 : total);
  out->pointers.resize(arg_count);
  for (size_t i = 0; i < arg_count; ++i) {
    std::byte* slot = out->storage.get() + offsets[i];
    std::memcpy(slot, args[i].value, args[i].size);
    out->pointers[i] = slot;
    if (!backend.config.discrete || args[i].size != sizeof(void*)) continue;
    void* value;
    std::memcpy(&value, slot, sizeof value);
    std::optional<Allocation> allocation = backend.memory.find(value);
    if (!allocation || allocation->shadow == allocation->base ||
        (allocation->kind != AllocationKind::kDevice && allocation->kind != AllocationKind::kIpc)) {
      continue;
    }
    void* device_view = static_cast<char*>(allocation->shadow) +
                        (static_cast<char*>(value) - static_cast<char*>(allocation->base));
    std::memcpy(slot, &device_view, sizeof device_view);
  }
  return TSR_OK;
}

// Runs every block of one launch, x fastest, on the calling thread (the stream's worker).
tsr_status run_blocks(const Function& function, const tsr_launch_config& config,
                      const LaunchArgs& args, std::string* message) {
  const HostKernel& kernel = function.kernel();
  // Shared memory is private to a block; blocks run one at a time, so one buffer serves all.
  auto shared = std::make_unique<std::byte[]>(config.shared_bytes == 0 ? 1 : config.shared_bytes);
  tsr_host_kernel_call call{};
  call.struct_size = sizeof call;
  call.grid = config.grid;
  call.block = config.block;
  call.shared = config.shared_bytes == 0 ? nullptr : shared.get();
  call.shared_bytes = config.shared_bytes;
  call.args = args.pointers.data();
  call.arg_count = args.pointers.size();
  for (uint32_t z = 0; z < config.grid.z; ++z) {
    for (uint32_t y = 0; y < config.grid.y; ++y) {
      for (uint32_t x = 0; x < config.grid.x; ++x) {
        call.block_index = tsr_dim3{x, y, z};
        const char* why = nullptr;
        const int rc = kernel.fn(&call, &why);
        if (rc == 0) continue;
        char text[512];
        std::snprintf(text, sizeof text,
                      "kernel '%s' (module '%s') returned %d in block (%u,%u,%u): %s",
                      kernel.name.c_str(), function.module->name().c_str(), rc, x, y, z,
                      why != nullptr && why[0] != '\0' ? why : "(the kernel gave no message)");
        *message = text;
        return TSR_ABORTED;
      }
    }
  }
  return TSR_OK;
}

}  // namespace

const char* module_format_name(int32_t format) {
  if (format <= 0 || format >= TSR_MODULE_FORMAT_COUNT) return kFormatNames[0];
  return kFormatNames[format];
}

Module::~Module() {
  if (handle_ != nullptr) dlclose(handle_);
  if (fd_ >= 0) close(fd_);
}

tsr_status Module::load(const void* image, size_t bytes) {
  const char* n = name_.c_str();
  if (const std::string problem = elf_image_problem(image, bytes); !problem.empty()) {
    return fail(TSR_INVALID_ARGUMENT, "module_load: host-elf image '%s' (%zu bytes) is refused: %s",
                n, bytes, problem.c_str());
  }
  fd_ = memfd_create(("tessera-module:" + name_.substr(0, 200)).c_str(), MFD_CLOEXEC);
  if (fd_ < 0) {
    return fail(errno == EMFILE || errno == ENFILE ? TSR_RESOURCE_EXHAUSTED : TSR_INTERNAL,
                "module_load of '%s': memfd_create failed: %s", n, std::strerror(errno));
  }
  if (!write_all(fd_, image, bytes)) {
    return fail(TSR_RESOURCE_EXHAUSTED, "module_load of '%s': cannot copy %zu bytes: %s", n, bytes,
                std::strerror(errno));
  }
  // The descriptor stays open while the module is loaded: glibc finds an already-loaded library
  // by its path, and a reused /proc/self/fd/N would hand back another image.
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "module_load: host-elf image '%s' (%zu bytes) cannot be loaded: %s", n, bytes,
                dlerror_naming(path, name_).c_str());
  }
  auto entry =
      reinterpret_cast<tsr_host_module_entry_fn>(dlsym(handle_, TSR_HOST_MODULE_ENTRY_POINT));
  if (entry == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "module_load: host-elf image '%s' exports no %s (not a Tessera host module)", n,
                TSR_HOST_MODULE_ENTRY_POINT);
  }
  return check_table(entry());
}

tsr_status Module::check_table(const tsr_host_module* table) {
  const char* n = name_.c_str();
  constexpr size_t kEnd = offsetof(tsr_host_module, kernels) + sizeof(void*);
  if (table == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "module_load: image '%s': %s returned NULL", n,
                TSR_HOST_MODULE_ENTRY_POINT);
  }
  if (table->struct_size < kEnd || table->abi_major != TSR_BACKEND_ABI_MAJOR) {
    return fail(TSR_INVALID_ARGUMENT,
                "module_load: image '%s': module table has struct_size %zu and abi_major %u; "
                "this backend takes struct_size >= %zu and abi_major %d",
                n, table->struct_size, table->abi_major, kEnd, TSR_BACKEND_ABI_MAJOR);
  }
  if (table->kernel_count > 0 && table->kernels == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "module_load: image '%s': %zu kernels but kernels is NULL", n,
                table->kernel_count);
  }
  for (size_t i = 0; i < table->kernel_count; ++i) {
    const tsr_host_kernel_desc& desc = table->kernels[i];
    if (desc.name == nullptr || desc.name[0] == '\0' || desc.fn == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "module_load: image '%s': kernel %zu has %s", n, i,
                  desc.fn == nullptr ? "no function (fn is NULL)" : "no name");
    }
    for (const HostKernel& earlier : kernels_) {
      if (earlier.name == desc.name) {
        return fail(TSR_INVALID_ARGUMENT, "module_load: image '%s': two kernels are named '%s'", n,
                    desc.name);
      }
    }
    if (desc.arg_count > 0 && desc.arg_sizes == nullptr) {
      return fail(TSR_INVALID_ARGUMENT,
                  "module_load: image '%s': kernel '%s' takes %zu arguments but arg_sizes is NULL",
                  n, desc.name, desc.arg_count);
    }
    HostKernel kernel{desc.name, desc.fn, {}};
    size_t total = 0;
    for (size_t a = 0; a < desc.arg_count; ++a) {
      const size_t size = desc.arg_sizes[a];
      if (size == 0 || size > kMaxKernelArgBytes - total) {
        return fail(TSR_INVALID_ARGUMENT,
                    "module_load: image '%s': kernel '%s' argument %zu is %zu bytes (each must be "
                    ">= 1 and all together <= %zu)",
                    n, desc.name, a, size, kMaxKernelArgBytes);
      }
      total += size;
      kernel.arg_sizes.push_back(size);
    }
    kernels_.push_back(std::move(kernel));
  }
  return TSR_OK;
}

namespace api {

tsr_status module_load(int32_t device, int32_t format, const void* image, size_t image_bytes,
                       const char* name, tsr_module* out_module) {
  static constexpr const char* kOp = "module_load";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, kOp, device, &dev); s != TSR_OK) return s;
    if (out_module == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_module is NULL", kOp);
    const std::string image_name = name != nullptr && name[0] != '\0' ? name : "(unnamed image)";
    if (format != TSR_MODULE_HOST_ELF) {
      return fail(TSR_UNIMPLEMENTED,
                  "%s of '%s': host device %d takes module format host-elf (%d) only, not %s (%d)",
                  kOp, image_name.c_str(), device, int(TSR_MODULE_HOST_ELF),
                  module_format_name(format), format);
    }
    if (image == nullptr || image_bytes == 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s of '%s': the image is %s", kOp, image_name.c_str(),
                  image == nullptr ? "NULL" : "empty (0 bytes)");
    }
    auto module = std::make_shared<Module>(device, image_name);
    if (tsr_status s = module->load(image, image_bytes); s != TSR_OK) return s;
    for (size_t i = 0; i < module->kernels().size(); ++i) {
      module->function_ids.push_back(
          backend->functions.insert(std::make_shared<Function>(Function{module, i})));
    }
    *out_module = module_handle(backend->modules.insert(module));
    return TSR_OK;
  });
}

tsr_status module_unload(tsr_module handle) {
  static constexpr const char* kOp = "module_unload";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Module> module;
    if (tsr_status s = lookup_module(*backend, kOp, handle, &module); s != TSR_OK) return s;
    if (backend->modules.remove(module_id(handle)) == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: module %p was unloaded concurrently", kOp,
                  static_cast<void*>(handle));
    }
    // Launches already enqueued hold their function and so the image: it is closed after the
    // last of them has run, never under a running kernel.
    for (uint64_t id : module->function_ids) backend->functions.remove(id);
    return TSR_OK;
  });
}

tsr_status module_get_function(tsr_module handle, const char* name, tsr_function* out_function) {
  static constexpr const char* kOp = "module_get_function";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Module> module;
    if (tsr_status s = lookup_module(*backend, kOp, handle, &module); s != TSR_OK) return s;
    if (name == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: name is NULL", kOp);
    if (out_function == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: out_function is NULL", kOp);
    }
    std::string known;
    for (size_t i = 0; i < module->kernels().size(); ++i) {
      if (module->kernels()[i].name == name) {
        *out_function = function_handle(module->function_ids[i]);
        return TSR_OK;
      }
      if (known.size() < 400) known += (known.empty() ? "" : ", ") + module->kernels()[i].name;
    }
    return fail(TSR_NOT_FOUND, "%s: module '%s' has no kernel named '%s' (it has: %s)", kOp,
                module->name().c_str(), name, known.empty() ? "none" : known.c_str());
  });
}

tsr_status launch(tsr_stream stream_handle, tsr_function function_handle_in,
                  const tsr_launch_config* config, const tsr_kernel_arg* args, size_t arg_count) {
  static constexpr const char* kOp = "launch";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    std::shared_ptr<Function> function;
    if (tsr_status s = lookup_function(*backend, function_handle_in, &function); s != TSR_OK) {
      return s;
    }
    const HostKernel& kernel = function->kernel();
    if (stream->device() != function->module->device()) {
      return fail(TSR_INVALID_ARGUMENT,
                  "launch of kernel '%s': module '%s' is loaded on device %d, the stream is of "
                  "device %d",
                  kernel.name.c_str(), function->module->name().c_str(), function->module->device(),
                  stream->device());
    }
    if (tsr_status s = check_config(kernel, config); s != TSR_OK) return s;
    auto copied = std::make_shared<LaunchArgs>();
    if (tsr_status s =
            copy_args(*backend, *function->module, kernel, args, arg_count, copied.get());
        s != TSR_OK) {
      return s;
    }
    return stream->enqueue(kOp, /*always_run=*/false,
                           [fn = std::move(function), launch_config = copy_config(*config),
                            launch_args = std::move(copied)](tsr_status, std::string* message) {
                             return run_blocks(*fn, launch_config, *launch_args, message);
                           });
  });
}

}  // namespace api
}  // namespace tessera::host
