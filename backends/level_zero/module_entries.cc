// Kernel modules (backend_abi.h, minor 3) on Level Zero: module_load is zeModuleCreate from SPIR-V
// (the build log in the message when the driver refuses it), module_get_function zeKernelCreate,
// launch zeKernelSetGroupSize + zeKernelSetArgumentValue per argument +
// zeCommandListAppendLaunchKernel on the stream's immediate command list, module_unload
// zeKernelDestroy + zeModuleDestroy. A kernel's group size and arguments are kernel state, so a
// kernel's mutex is held from setting them to appending the launch (lock order: Stream::mutex,
// then UserKernel::mutex, as module.cc does). Level Zero cannot report a kernel's argument sizes
// ahead of time: the count is checked against zeKernelGetProperties, and a size the driver refuses
// (ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE) is INVALID_ARGUMENT naming the argument, with
// nothing appended. OpenCL C kernels declare their local memory, so shared_bytes is only checked
// against the device's maximum.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ze.h"

namespace tessera::ze {

constexpr uint64_t kModuleTag = 0xA, kKernelTag = 0xF;

struct UserModule {
  ze_module_handle_t handle = nullptr;
  int32_t device = 0;
  std::string name;
  std::vector<uint64_t> kernels;  // handle ids handed out; guarded by Backend::mutex
  ~UserModule() {
    if (handle != nullptr) (void)ze().zeModuleDestroy(handle);
  }
};

struct UserKernel {
  ze_kernel_handle_t handle = nullptr;
  std::shared_ptr<UserModule> module;  // destroyed after the kernel
  std::string name;
  uint32_t arg_count = 0;
  std::mutex mutex;  // group size and arguments are kernel state: held until the launch is appended
  ~UserKernel() {
    if (handle != nullptr) (void)ze().zeKernelDestroy(handle);
  }
};

void release_user_modules(Backend& b) {
  std::lock_guard lock(b.mutex);
  b.user_kernels.clear();  // kernels first: each holds its module
  b.user_modules.clear();
}

std::string take_build_log(ze_module_build_log_handle_t log) {
  std::string text;
  if (log == nullptr) return text;
  size_t size = 0;
  if (ze().zeModuleBuildLogGetString(log, &size, nullptr) == ZE_RESULT_SUCCESS && size > 1) {
    text.resize(size);
    if (ze().zeModuleBuildLogGetString(log, &size, text.data()) != ZE_RESULT_SUCCESS) text.clear();
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  }
  (void)ze().zeModuleBuildLogDestroy(log);
  return text;
}

namespace {

template <typename T>
tsr_status find(Backend& b, std::unordered_map<uint64_t, std::shared_ptr<T>>& table, uint64_t tag,
                const char* op, const char* what, const void* handle, std::shared_ptr<T>* out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", op, what);
  const uint64_t id = uint64_t(reinterpret_cast<uintptr_t>(handle));
  std::lock_guard lock(b.mutex);
  auto it = (id & 0xf) == tag ? table.find(id) : table.end();
  if (it == table.end()) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is not a live level_zero %s (unloaded, or never created)", op, what,
                handle, what);
  }
  *out = it->second;
  return TSR_OK;
}

bool has_zero(const tsr_dim3& d) {
  return d.x == 0 || d.y == 0 || d.z == 0;
}

tsr_status check_dims(const char* op, const UserKernel& k, const ze_device_compute_properties_t& c,
                      const tsr_launch_config& config) {
  if (has_zero(config.grid) || has_zero(config.block)) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: grid (%u, %u, %u) and block (%u, %u, %u) must be at least 1 in "
                "each dimension",
                op, k.name.c_str(), config.grid.x, config.grid.y, config.grid.z, config.block.x,
                config.block.y, config.block.z);
  }
  const uint32_t block[3] = {config.block.x, config.block.y, config.block.z};
  const uint32_t grid[3] = {config.grid.x, config.grid.y, config.grid.z};
  const uint32_t max_block[3] = {c.maxGroupSizeX, c.maxGroupSizeY, c.maxGroupSizeZ};
  const uint32_t max_grid[3] = {c.maxGroupCountX, c.maxGroupCountY, c.maxGroupCountZ};
  for (int i = 0; i < 3; ++i) {
    if (max_block[i] && block[i] > max_block[i]) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: block.%c is %u, the device's limit is %u",
                  op, k.name.c_str(), "xyz"[i], block[i], max_block[i]);
    }
    if (max_grid[i] && grid[i] > max_grid[i]) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: grid.%c is %u, the device's limit is %u",
                  op, k.name.c_str(), "xyz"[i], grid[i], max_grid[i]);
    }
  }
  const uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  if (c.maxTotalGroupSize && threads > c.maxTotalGroupSize) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: %llu work-items per group, the device's limit is %u", op,
                k.name.c_str(), static_cast<unsigned long long>(threads), c.maxTotalGroupSize);
  }
  if (c.maxSharedLocalMemory && config.shared_bytes > c.maxSharedLocalMemory) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: kernel %s: %u bytes of shared (local) memory per group, the device's limit "
                "is %u",
                op, k.name.c_str(), config.shared_bytes, c.maxSharedLocalMemory);
  }
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status module_load(int32_t device, int32_t format, const void* image, size_t image_bytes,
                       const char* name, tsr_module* out_module) {
  static constexpr const char* kOp = "module_load";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (out_module == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_module is NULL", kOp);
    if (image == nullptr || image_bytes == 0) {
      return fail(TSR_INVALID_ARGUMENT, "%s: image is %s", kOp,
                  image == nullptr ? "NULL" : "empty (image_bytes 0)");
    }
    const std::string label = name && *name ? std::string(name) : std::string("image");
    if (format != TSR_MODULE_SPIRV) {
      return fail(TSR_UNIMPLEMENTED,
                  "%s: %s: the level_zero backend loads SPIR-V modules only (format %d, "
                  "TSR_MODULE_SPIRV is %d)",
                  kOp, label.c_str(), format, int(TSR_MODULE_SPIRV));
    }
    const Device& d = b->devices[size_t(device)];
    ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                          nullptr,
                          ZE_MODULE_FORMAT_IL_SPIRV,
                          image_bytes,
                          static_cast<const uint8_t*>(image),
                          "",
                          nullptr};
    auto module = std::make_shared<UserModule>();
    module->device = device;
    module->name = label;
    ze_module_build_log_handle_t log_handle = nullptr;
    ze_result_t r = ze().zeModuleCreate(d.context, d.handle, &desc, &module->handle, &log_handle);
    const std::string build_log = take_build_log(log_handle);
    if (r != ZE_RESULT_SUCCESS) {
      module->handle = nullptr;
      return fail(status_of(r),
                  "%s: %s (SPIR-V, %zu bytes, device %d): zeModuleCreate failed: %s "
                  "(0x%x)%s%s",
                  kOp, label.c_str(), image_bytes, device, result_name(r), unsigned(r),
                  build_log.empty() ? "" : "; build log: ", build_log.c_str());
    }
    std::lock_guard lock(b->mutex);
    const uint64_t id = (b->next_handle++ << 4) | kModuleTag;
    b->user_modules.emplace(id, std::move(module));
    *out_module = reinterpret_cast<tsr_module>(uintptr_t(id));
    return TSR_OK;
  });
}

tsr_status module_unload(tsr_module handle) {
  static constexpr const char* kOp = "module_unload";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    std::shared_ptr<UserModule> module;
    if (tsr_status s = find(*b, b->user_modules, kModuleTag, kOp, "module", handle, &module);
        s != TSR_OK) {
      return s;
    }
    std::vector<std::shared_ptr<UserKernel>> kernels;  // destroyed outside the lock
    {
      std::lock_guard lock(b->mutex);
      b->user_modules.erase(uint64_t(reinterpret_cast<uintptr_t>(handle)));
      for (uint64_t id : module->kernels) {
        if (auto it = b->user_kernels.find(id); it != b->user_kernels.end()) {
          kernels.push_back(std::move(it->second));
          b->user_kernels.erase(it);
        }
      }
    }
    return TSR_OK;  // zeKernelDestroy, then zeModuleDestroy, when the last reference goes
  });
}

tsr_status module_get_function(tsr_module handle, const char* name, tsr_function* out_function) {
  static constexpr const char* kOp = "module_get_function";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    std::shared_ptr<UserModule> module;
    if (tsr_status s = find(*b, b->user_modules, kModuleTag, kOp, "module", handle, &module);
        s != TSR_OK) {
      return s;
    }
    if (name == nullptr || *name == '\0') {
      return fail(TSR_INVALID_ARGUMENT, "%s: name is %s", kOp, name ? "empty" : "NULL");
    }
    if (out_function == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: out_function is NULL", kOp);
    }
    auto kernel = std::make_shared<UserKernel>();
    kernel->module = module;
    kernel->name = name;
    ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
    ze_result_t r = ze().zeKernelCreate(module->handle, &desc, &kernel->handle);
    if (r == ZE_RESULT_ERROR_INVALID_KERNEL_NAME) {
      kernel->handle = nullptr;
      return fail(TSR_NOT_FOUND, "%s: module %s has no kernel named \"%s\"", kOp,
                  module->name.c_str(), name);
    }
    if (r != ZE_RESULT_SUCCESS) {
      kernel->handle = nullptr;
      return fail(status_of(r), "%s: kernel \"%s\" of module %s: zeKernelCreate failed: %s (0x%x)",
                  kOp, name, module->name.c_str(), result_name(r), unsigned(r));
    }
    ze_kernel_properties_t props{};
    props.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES;
    TSR_ZE_CHECK(kOp, zeKernelGetProperties, kernel->handle, &props);
    kernel->arg_count = props.numKernelArgs;
    std::lock_guard lock(b->mutex);
    const uint64_t id = (b->next_handle++ << 4) | kKernelTag;
    b->user_kernels.emplace(id, std::move(kernel));
    module->kernels.push_back(id);
    *out_function = reinterpret_cast<tsr_function>(uintptr_t(id));
    return TSR_OK;
  });
}

tsr_status launch(tsr_stream stream_handle, tsr_function function, const tsr_launch_config* config,
                  const tsr_kernel_arg* args, size_t arg_count) {
  static constexpr const char* kOp = "launch";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    Stream* stream = nullptr;
    if (tsr_status s = lookup_stream(*b, kOp, stream_handle, &stream); s != TSR_OK) return s;
    std::shared_ptr<UserKernel> k;
    if (tsr_status s = find(*b, b->user_kernels, kKernelTag, kOp, "function", function, &k);
        s != TSR_OK) {
      return s;
    }
    if (config == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: config is NULL", kOp);
    if (config->struct_size < sizeof(tsr_launch_config)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: config->struct_size is %zu (at least %zu)", kOp,
                  config->struct_size, sizeof(tsr_launch_config));
    }
    const int32_t device = k->module->device;
    if (stream->device != device) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: kernel %s belongs to a module on device %d, the stream to device %d", kOp,
                  k->name.c_str(), device, stream->device);
    }
    if (tsr_status s = check_dims(kOp, *k, b->devices[size_t(device)].compute, *config);
        s != TSR_OK) {
      return s;
    }
    if (arg_count != k->arg_count) {
      return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s takes %u arguments, %zu given", kOp,
                  k->name.c_str(), k->arg_count, arg_count);
    }
    for (size_t i = 0; i < arg_count; ++i) {
      if (args == nullptr || args[i].value == nullptr) {
        return fail(TSR_INVALID_ARGUMENT, "%s: kernel %s: argument %zu has a NULL value", kOp,
                    k->name.c_str(), i);
      }
    }
    // Which call failed, for the message: the argument's index, or the group size / append.
    size_t failed_arg = arg_count;
    const char* failed_call = "zeCommandListAppendLaunchKernel";
    const ze_group_count_t groups{config->grid.x, config->grid.y, config->grid.z};
    tsr_status s = submit(*stream, kOp, "the launch", [&] {
      std::lock_guard lock(k->mutex);
      ze_result_t r =
          ze().zeKernelSetGroupSize(k->handle, config->block.x, config->block.y, config->block.z);
      if (r != ZE_RESULT_SUCCESS) {
        failed_call = "zeKernelSetGroupSize";
        return r;
      }
      for (size_t i = 0; i < arg_count; ++i) {
        r = ze().zeKernelSetArgumentValue(k->handle, uint32_t(i), args[i].size, args[i].value);
        if (r != ZE_RESULT_SUCCESS) {
          failed_arg = i;
          return r;
        }
      }
      return ze().zeCommandListAppendLaunchKernel(stream->list, k->handle, &groups, nullptr, 0,
                                                  nullptr);
    });
    if (s == TSR_OK) return TSR_OK;
    const std::string detail = last_error_message();
    if (failed_arg < arg_count) {
      return fail(s,
                  "%s: kernel %s: argument %zu (%zu bytes) refused by zeKernelSetArgumentValue "
                  "(%s)",
                  kOp, k->name.c_str(), failed_arg, args[failed_arg].size, detail.c_str());
    }
    return fail(s, "%s: kernel %s: %s refused the launch (%s)", kOp, k->name.c_str(), failed_call,
                detail.c_str());
  });
}

}  // namespace api
}  // namespace tessera::ze
