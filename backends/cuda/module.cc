// Kernel modules (backend_abi.h, minor 3): module_load, module_get_function, launch and
// module_unload over the driver's module API (cuModuleLoadData / cuModuleLoadDataEx for PTX,
// cuModuleGetFunction, cuLaunchKernel, cuModuleUnload), resolved with dlsym from the driver library
// as host signals are (the CUDA runtime has no module API), or over the runtime's own calls where
// the stack has them (HIP: TSR_RT_MODULE_CALLS in its runtime header; runtime_names.h).
//
// Modules live in the device's primary context, the one the runtime uses for everything else: each
// entry makes the device current (DeviceGuard) and binds its primary context to the thread
// (rtFree(NULL), the runtime's documented way to initialise it), so driver calls see it.
//
// A launch is checked before anything is enqueued: dimensions against the device's limits and the
// function's own maximum block size, shared memory against the device's (opt-in) maximum, and the
// arguments' count and sizes against the kernel's parameters when the driver can tell
// (cuFuncGetParamInfo, CUDA 12.4+). Older drivers and HIP cannot: their launches pass the arguments
// unchecked, as cuLaunchKernel itself does.
#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api.h"
#include "driver_library.h"
#include "errors.h"
#include "state.h"

// Bits (1u << tsr_module_format) of the formats this build hands to the module loader (CMake's
// MODULE_FORMATS): CUBIN and PTX for CUDA.
#ifndef TESSERA_CUDA_MODULE_FORMATS
#define TESSERA_CUDA_MODULE_FORMATS ((1u << TSR_MODULE_CUDA_CUBIN) | (1u << TSR_MODULE_CUDA_PTX))
#endif

namespace tessera::cuda {

// ---- the module calls -------------------------------------------------------------------------

namespace {

// CUDA's numbers (HIP uses the same for these).
constexpr int kResultNotFound = 500;            // CUDA_ERROR_NOT_FOUND / hipErrorNotFound
constexpr int kResultInvalidValue = 1;          // CUDA_ERROR_INVALID_VALUE
constexpr int kAttrMaxThreadsPerBlock = 0;      // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
constexpr int kAttrStaticSharedBytes = 1;       // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
constexpr int kAttrMaxDynamicSharedBytes = 8;   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kJitErrorLogBuffer = 5;           // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogBufferSizeBytes = 6;  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
constexpr size_t kJitLogBytes = 4096;

// Handles are the driver's (CUmodule, CUfunction) as void*; results are ints (CUresult).
struct ModuleCalls {
  int (*load)(void** module, const void* image) = nullptr;
  int (*load_ex)(void** module, const void* image, unsigned count, int* options,
                 void** values) = nullptr;  // PTX with a JIT log; NULL: no PTX
  int (*unload)(void* module) = nullptr;
  int (*get_function)(void** function, void* module, const char* name) = nullptr;
  int (*launch)(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared_bytes, rtStream_t stream, void** params,
                void** extra) = nullptr;
  int (*func_get_attribute)(int* value, int attribute, void* function) = nullptr;
  int (*func_set_attribute)(void* function, int attribute, int value) = nullptr;  // optional
  int (*param_info)(void* function, size_t index, size_t* offset, size_t* size) = nullptr;
  int (*error_name)(int result, const char** text) = nullptr;
  int (*error_string)(int result, const char** text) = nullptr;
  char why[512] = "";  // non-empty: the calls are not there, and why
};

#ifdef TSR_RT_MODULE_CALLS
int runtime_launch(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared_bytes, rtStream_t stream, void** params, void**) {
  return tsr_rt_module_launch(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params);
}
int runtime_error_name(int result, const char** text) {
  *text = rtGetErrorName(static_cast<rtError_t>(result));
  return 0;
}
int runtime_error_string(int result, const char** text) {
  *text = rtGetErrorString(static_cast<rtError_t>(result));
  return 0;
}

ModuleCalls* resolve_calls() {
  auto* c = new ModuleCalls;
  c->load = &tsr_rt_module_load;
  c->unload = &tsr_rt_module_unload;
  c->get_function = &tsr_rt_module_get_function;
  c->launch = &runtime_launch;
  c->func_get_attribute = &tsr_rt_func_get_attribute;
  c->error_name = &runtime_error_name;
  c->error_string = &runtime_error_string;
  return c;
}
#else
ModuleCalls* resolve_calls() {
  auto* c = new ModuleCalls;  // lives as long as the process, as the driver library does
  void* library = open_driver_library("the runtime has no module calls", c->why, sizeof c->why);
  if (library == nullptr) return c;
  resolve_driver_symbol(library, "ModuleLoadData", &c->load);
  resolve_driver_symbol(library, "ModuleLoadDataEx", &c->load_ex);
  resolve_driver_symbol(library, "ModuleUnload", &c->unload);
  resolve_driver_symbol(library, "ModuleGetFunction", &c->get_function);
  resolve_driver_symbol(library, "LaunchKernel", &c->launch);
  resolve_driver_symbol(library, "FuncGetAttribute", &c->func_get_attribute);
  resolve_driver_symbol(library, "FuncSetAttribute", &c->func_set_attribute);
  resolve_driver_symbol(library, "FuncGetParamInfo", &c->param_info);
  resolve_driver_symbol(library, "GetErrorName", &c->error_name);
  resolve_driver_symbol(library, "GetErrorString", &c->error_string);
  if (!c->load || !c->unload || !c->get_function || !c->launch || !c->func_get_attribute) {
    c->load = nullptr;
    std::snprintf(c->why, sizeof c->why,
                  "%s lacks %sModuleLoadData, %sModuleUnload, %sModuleGetFunction, %sLaunchKernel "
                  "or %sFuncGetAttribute",
                  TESSERA_CUDA_DRIVER_LIBRARY, TESSERA_CUDA_DRIVER_PREFIX,
                  TESSERA_CUDA_DRIVER_PREFIX, TESSERA_CUDA_DRIVER_PREFIX,
                  TESSERA_CUDA_DRIVER_PREFIX, TESSERA_CUDA_DRIVER_PREFIX);
  }
  return c;  // the library stays open: its functions are called until the process ends
}
#endif

const ModuleCalls& calls() {
  static const ModuleCalls* resolved = resolve_calls();
  return *resolved;
}

const char* format_name(int32_t format) {
  switch (format) {
    case TSR_MODULE_HOST_ELF: return "host ELF";
    case TSR_MODULE_CUDA_CUBIN: return "CUDA cubin/fatbin";
    case TSR_MODULE_CUDA_PTX: return "CUDA PTX";
    case TSR_MODULE_HIP_CODE_OBJ: return "HIP code object";
    case TSR_MODULE_SPIRV: return "SPIR-V";
  }
  return "unknown format";
}

// "<what> failed: <text> (<NAME>, <code>)" with the driver's (or runtime's) own words.
tsr_status fail_call(int result, tsr_status status, const char* what, const char* detail = "") {
  const ModuleCalls& c = calls();
  const char* name = nullptr;
  const char* text = nullptr;
  if (c.error_name) (void)c.error_name(result, &name);
  if (c.error_string) (void)c.error_string(result, &text);
  return fail(status, "%s failed: %s (%s, %d)%s", what, text ? text : "?", name ? name : "?",
              result, detail);
}

// The status an image the driver refused gets: the caller's image is at fault unless the driver
// ran out of memory or does not support the call.
tsr_status load_status(int result) {
  switch (result) {
    case 2: return TSR_RESOURCE_EXHAUSTED;  // CUDA_ERROR_OUT_OF_MEMORY
    case 801: return TSR_UNIMPLEMENTED;     // CUDA_ERROR_NOT_SUPPORTED
    case 3:                                 // CUDA_ERROR_NOT_INITIALIZED
    case 4:                                 // CUDA_ERROR_DEINITIALIZED
    case 201:                               // CUDA_ERROR_INVALID_CONTEXT
      return TSR_INTERNAL;
  }
  return TSR_INVALID_ARGUMENT;
}

}  // namespace

uint32_t module_formats() {
  const ModuleCalls& c = calls();
  if (c.load == nullptr) return 0;
  uint32_t formats = TESSERA_CUDA_MODULE_FORMATS;
  if (c.load_ex == nullptr) formats &= ~(1u << TSR_MODULE_CUDA_PTX);
  return formats;
}

// ---- modules and functions --------------------------------------------------------------------

struct Module {
  void* raw = nullptr;
  int32_t device = 0;
  std::string name;                 // the caller's name for the image, or "<format> image"
  std::mutex mutex;                 // guards the fields below
  std::vector<uint64_t> functions;  // handle ids handed out, invalidated by unload
  ~Module();
};

struct Function {
  void* raw = nullptr;
  std::shared_ptr<Module> module;
  std::string name;
  std::optional<std::vector<size_t>> params;  // parameter sizes, when the driver tells them
  uint32_t max_threads = 0;                   // the function's own limit (registers)
  uint32_t static_shared = 0;
  std::mutex mutex;             // guards dynamic_shared
  uint32_t dynamic_shared = 0;  // the dynamic shared bytes the function is allowed so far
};

Module::~Module() {
  if (raw == nullptr) return;
  DeviceGuard guard;
  if (guard.enter("module_unload", device) == TSR_OK) {
    (void)rtFree(nullptr);  // binds the primary context
    if (int r = calls().unload(raw); r != 0) {
      (void)fail_call(r, TSR_INTERNAL, "module_unload: the driver's module unload");
      log(TSR_LOG_WARN, "%s", last_error_message());
    }
  }
  (void)rtGetLastError();
}

void unload_all_modules(Backend& backend) {
  backend.functions.clear();
  backend.modules.clear();  // ~Module unloads
}

namespace {

// Makes `device` current with its primary context bound to the thread, for driver calls.
tsr_status enter_context(DeviceGuard& guard, const char* op, int32_t device) {
  if (tsr_status s = guard.enter(op, device); s != TSR_OK) return s;
  TSR_RT_CHECK(op, rtFree, nullptr);
  return TSR_OK;
}

tsr_status lookup_module(Backend& backend, const char* op, tsr_module handle,
                         std::shared_ptr<Module>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: module is NULL", op);
  *out = backend.modules.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (*out == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: module %p is not a loaded module of the %s backend (unloaded, or never "
                "loaded)",
                op, static_cast<void*>(handle), kBackendName);
  }
  return TSR_OK;
}

tsr_status lookup_function(Backend& backend, const char* op, tsr_function handle,
                           std::shared_ptr<Function>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: function is NULL", op);
  *out = backend.functions.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (*out == nullptr) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: function %p is not a function of a loaded module of the %s backend (its "
                "module was unloaded, or it was never returned by module_get_function)",
                op, static_cast<void*>(handle), kBackendName);
  }
  return TSR_OK;
}

// Loads PTX through the JIT with its error log captured, so a refusal says what is wrong.
tsr_status load_ptx(const char* op, const std::string& label, const void* image, size_t bytes,
                    void** out) {
  const ModuleCalls& c = calls();
  // The driver wants NUL-terminated text; the ABI allows the caller to leave the NUL out.
  std::string text(static_cast<const char*>(image), bytes);
  if (text.empty() || text.back() != '\0') text.push_back('\0');
  std::vector<char> log_buffer(kJitLogBytes, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void* values[] = {log_buffer.data(), reinterpret_cast<void*>(uintptr_t(log_buffer.size()))};
  int r = c.load_ex(out, text.data(), 2, options, values);
  if (r == 0) return TSR_OK;
  log_buffer.back() = '\0';
  std::string jit = log_buffer.data();
  while (!jit.empty() && (jit.back() == '\n' || jit.back() == ' ')) jit.pop_back();
  const std::string what = std::string(op) + ": " + label + ": " + TESSERA_CUDA_DRIVER_PREFIX +
                           "ModuleLoadDataEx (PTX JIT)";
  return fail_call(r, load_status(r), what.c_str(),
                   jit.empty() ? "" : ("; JIT error log: " + jit).c_str());
}

// An ELF image (a cubin, a code object) whose header tables end past `bytes`. The driver's load
// takes no size: it trusts the headers and would read past the end of a truncated image.
bool elf_truncated(const void* image, size_t bytes, uint64_t* out_needed) {
  Elf64_Ehdr h;
  if (bytes < SELFMAG || std::memcmp(image, ELFMAG, SELFMAG) != 0) return false;
  if (bytes < sizeof h) {
    *out_needed = sizeof h;
    return true;
  }
  std::memcpy(&h, image, sizeof h);
  const uint64_t sections = h.e_shoff + uint64_t(h.e_shnum) * h.e_shentsize;
  const uint64_t programs = h.e_phoff + uint64_t(h.e_phnum) * h.e_phentsize;
  *out_needed = std::max(sections, programs);
  return *out_needed > bytes;
}

tsr_status load_image(const char* op, int32_t format, const std::string& label, const void* image,
                      size_t bytes, void** out) {
  if (format == TSR_MODULE_CUDA_PTX) return load_ptx(op, label, image, bytes, out);
  if (uint64_t needed = 0; elf_truncated(image, bytes, &needed)) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s: truncated: its ELF headers describe %llu bytes, the image has %zu", op,
                label.c_str(), static_cast<unsigned long long>(needed), bytes);
  }
  int r = calls().load(out, image);
  if (r == 0) return TSR_OK;
  const std::string what = std::string(op) + ": " + label + ": the driver's module load";
  return fail_call(r, load_status(r), what.c_str());
}

// What the driver says about a new function: its parameters (when it can tell), its own maximum
// block size and its static shared memory.
tsr_status describe_function(const char* op, Function& f) {
  const ModuleCalls& c = calls();
  int value = 0;
  if (int r = c.func_get_attribute(&value, kAttrMaxThreadsPerBlock, f.raw); r != 0) {
    return fail_call(r, TSR_INTERNAL, (std::string(op) + ": the function attribute query").c_str());
  }
  f.max_threads = uint32_t(std::max(value, 0));
  value = 0;
  if (c.func_get_attribute(&value, kAttrStaticSharedBytes, f.raw) == 0) {
    f.static_shared = uint32_t(std::max(value, 0));
  }
  value = 0;
  if (c.func_get_attribute(&value, kAttrMaxDynamicSharedBytes, f.raw) == 0) {
    f.dynamic_shared = uint32_t(std::max(value, 0));
  }
  if (c.param_info == nullptr) return TSR_OK;  // before CUDA 12.4, and HIP: unchecked
  std::vector<size_t> sizes;
  for (size_t i = 0;; ++i) {
    size_t offset = 0;
    size_t size = 0;
    int r = c.param_info(f.raw, i, &offset, &size);
    if (r == kResultInvalidValue) break;  // past the last parameter
    if (r != 0) return TSR_OK;            // the driver cannot tell for this function: unchecked
    sizes.push_back(size);
  }
  f.params = std::move(sizes);
  return TSR_OK;
}

bool has_zero(const tsr_dim3& d) {
  return d.x == 0 || d.y == 0 || d.z == 0;
}

tsr_status check_dims(const char* op, const Function& f, const LaunchLimits& limits,
                      const tsr_launch_config& config) {
  if (has_zero(config.grid) || has_zero(config.block)) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: grid (%u, %u, %u) and block (%u, %u, %u) must be at least 1 in "
                "each dimension",
                op, f.name.c_str(), config.grid.x, config.grid.y, config.grid.z, config.block.x,
                config.block.y, config.block.z);
  }
  const uint32_t block[3] = {config.block.x, config.block.y, config.block.z};
  const uint32_t grid[3] = {config.grid.x, config.grid.y, config.grid.z};
  for (int i = 0; i < 3; ++i) {
    if (limits.block[i] && block[i] > limits.block[i]) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: block.%c is %u, the device's limit is %u",
                  op, f.name.c_str(), "xyz"[i], block[i], limits.block[i]);
    }
    if (limits.grid[i] && grid[i] > limits.grid[i]) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: grid.%c is %u, the device's limit is %u",
                  op, f.name.c_str(), "xyz"[i], grid[i], limits.grid[i]);
    }
  }
  const uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  uint32_t max_threads = limits.threads_per_block;
  if (f.max_threads && (max_threads == 0 || f.max_threads < max_threads)) {
    max_threads = f.max_threads;
  }
  if (max_threads && threads > max_threads) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: %llu threads per block, the limit is %u (device %u, this kernel "
                "%u)",
                op, f.name.c_str(), static_cast<unsigned long long>(threads), max_threads,
                limits.threads_per_block, f.max_threads);
  }
  const uint64_t shared = uint64_t(config.shared_bytes) + f.static_shared;
  if (limits.shared_bytes && shared > limits.shared_bytes) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: %u bytes of dynamic shared memory (+ %u static) per block, the "
                "device's limit is %u",
                op, f.name.c_str(), config.shared_bytes, f.static_shared, limits.shared_bytes);
  }
  return TSR_OK;
}

tsr_status check_args(const char* op, const Function& f, const tsr_kernel_arg* args,
                      size_t arg_count) {
  if (arg_count > 0 && args == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: args is NULL with arg_count %zu", op,
                f.name.c_str(), arg_count);
  }
  for (size_t i = 0; i < arg_count; ++i) {
    if (args[i].value == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: argument %zu has a NULL value", op,
                  f.name.c_str(), i);
    }
  }
  if (!f.params) return TSR_OK;  // the driver cannot tell: unchecked, as cuLaunchKernel is
  const std::vector<size_t>& params = *f.params;
  if (arg_count != params.size()) {
    return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s takes %zu arguments, %zu given", op,
                f.name.c_str(), params.size(), arg_count);
  }
  for (size_t i = 0; i < arg_count; ++i) {
    if (args[i].size != params[i]) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: kernel %s: argument %zu is %zu bytes, the kernel's parameter %zu is %zu "
                  "bytes",
                  op, f.name.c_str(), i, args[i].size, i, params[i]);
    }
  }
  return TSR_OK;
}

// Dynamic shared memory above the function's current allowance (48 KiB by default on CUDA) needs
// an opt-in per function, done once for the largest size asked so far.
tsr_status allow_dynamic_shared(const char* op, Function& f, uint32_t bytes) {
  const ModuleCalls& c = calls();
  std::lock_guard lock(f.mutex);
  if (bytes <= f.dynamic_shared || c.func_set_attribute == nullptr) return TSR_OK;
  if (int r = c.func_set_attribute(f.raw, kAttrMaxDynamicSharedBytes, int(bytes)); r != 0) {
    const std::string what = std::string(op) + ": kernel " + f.name + ": allowing " +
                             std::to_string(bytes) + " bytes of dynamic shared memory";
    return fail_call(r, TSR_INVALID_ARGUMENT, what.c_str());
  }
  f.dynamic_shared = bytes;
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status module_load(int32_t device, int32_t format, const void* image, size_t image_bytes,
                       const char* name, tsr_module* out_module) {
  static constexpr const char* kOp = "module_load";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (out_module == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_module is NULL", kOp);
    if (image == nullptr || image_bytes == 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s: image is %s", kOp,
                  image == nullptr ? "NULL" : "empty (image_bytes 0)");
    }
    const std::string label = name && *name ? std::string(name) : std::string("image");
    const bool known = format > 0 && format < TSR_MODULE_FORMAT_COUNT;
    if (!known || !(module_formats() & (1u << format))) {
      const char* why = calls().why[0] ? calls().why : "";
      return fail(TSR_UNIMPLEMENTED,
                  "%s: %s: device %d of the %s backend does not load %s modules (format %d; it "
                  "takes the formats with bits 0x%x)%s%s",
                  kOp, label.c_str(), device, kBackendName, known ? format_name(format) : "unknown",
                  format, module_formats(), *why ? ": " : "", why);
    }
    DeviceGuard guard;
    if (tsr_status s = enter_context(guard, kOp, device); s != TSR_OK) return s;
    auto module = std::make_shared<Module>();
    module->device = device;
    module->name = label;
    const std::string where = label + " (" + format_name(format) + ", " +
                              std::to_string(image_bytes) + " bytes, device " +
                              std::to_string(device) + ")";
    if (tsr_status s = load_image(kOp, format, where, image, image_bytes, &module->raw);
        s != TSR_OK) {
      module->raw = nullptr;
      return s;
    }
    *out_module =
        reinterpret_cast<tsr_module>(uintptr_t(backend->modules.insert(std::move(module))));
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
    backend->modules.remove(uint64_t(reinterpret_cast<uintptr_t>(handle)));
    std::vector<uint64_t> functions;
    {
      std::lock_guard lock(module->mutex);
      functions.swap(module->functions);
    }
    for (uint64_t id : functions) backend->functions.remove(id);
    // The driver's unload runs when the last reference goes: here, or after a launch that holds
    // the module right now returns.
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
    if (name == nullptr || *name == '\0') {
      return fail(TSR_INVALID_ARGUMENT, "%s: name is %s", kOp, name ? "empty" : "NULL");
    }
    if (out_function == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: out_function is NULL", kOp);
    }
    DeviceGuard guard;
    if (tsr_status s = enter_context(guard, kOp, module->device); s != TSR_OK) return s;
    auto function = std::make_shared<Function>();
    function->module = module;
    function->name = name;
    int r = calls().get_function(&function->raw, module->raw, name);
    if (r == kResultNotFound) {
      return fail(TSR_NOT_FOUND, "%s: module %s has no kernel named \"%s\"", kOp,
                  module->name.c_str(), name);
    }
    if (r != 0) {
      const std::string what =
          std::string(kOp) + ": kernel \"" + name + "\" of module " + module->name;
      return fail_call(r, TSR_INTERNAL, what.c_str());
    }
    if (tsr_status s = describe_function(kOp, *function); s != TSR_OK) return s;
    const uint64_t id = backend->functions.insert(function);
    {
      std::lock_guard lock(module->mutex);
      module->functions.push_back(id);
    }
    *out_function = reinterpret_cast<tsr_function>(uintptr_t(id));
    return TSR_OK;
  });
}

tsr_status launch(tsr_stream stream_handle, tsr_function function_handle,
                  const tsr_launch_config* config, const tsr_kernel_arg* args, size_t arg_count) {
  static constexpr const char* kOp = "launch";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    std::shared_ptr<Function> f;
    if (tsr_status s = lookup_function(*backend, kOp, function_handle, &f); s != TSR_OK) return s;
    if (config == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: config is NULL", kOp);
    if (config->struct_size < sizeof(tsr_launch_config)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: config->struct_size is %zu (at least %zu)", kOp,
                  config->struct_size, sizeof(tsr_launch_config));
    }
    const int32_t device = f->module->device;
    if (stream->device != device) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: kernel %s belongs to a module on device %d, the stream to device %d", kOp,
                  f->name.c_str(), device, stream->device);
    }
    const LaunchLimits& limits = backend->devices[size_t(device)].limits;
    if (tsr_status s = check_dims(kOp, *f, limits, *config); s != TSR_OK) return s;
    if (tsr_status s = check_args(kOp, *f, args, arg_count); s != TSR_OK) return s;
    DeviceGuard guard;
    if (tsr_status s = enter_context(guard, kOp, device); s != TSR_OK) return s;
    if (tsr_status s = allow_dynamic_shared(kOp, *f, config->shared_bytes); s != TSR_OK) return s;
    // The driver copies the argument bytes before it returns, as the ABI promises the caller.
    std::vector<void*> params(arg_count);
    for (size_t i = 0; i < arg_count; ++i) params[i] = const_cast<void*>(args[i].value);
    int r = calls().launch(f->raw, config->grid.x, config->grid.y, config->grid.z, config->block.x,
                           config->block.y, config->block.z, config->shared_bytes, stream->raw,
                           arg_count ? params.data() : nullptr, nullptr);
    if (r != 0) {
      const std::string what = std::string(kOp) + ": kernel " + f->name + " of module " +
                               f->module->name + ": the driver's launch";
      return fail_call(r, r == 2 ? TSR_RESOURCE_EXHAUSTED : TSR_INVALID_ARGUMENT, what.c_str());
    }
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
