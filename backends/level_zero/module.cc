// Builds the embedded SPIR-V modules per device (zeModuleCreate from IL), creates kernels by name
// with a group size from zeKernelSuggestGroupSize, and launches them on a stream.
#include <algorithm>
#include <string>

#include "kernels.h"

namespace tessera::ze {

#if !TESSERA_ZE_HAVE_KERNELS
const SpirvModule kSpirvModules[] = {{"", false, nullptr, 0}};
const size_t kSpirvModuleCount = 0;
#endif

namespace {

// f32 AVG divides once: ask for a correctly rounded division (OpenCL allows 2.5 ulp without it).
// Drivers that refuse the flag build the module without it (the CTS allows 2 ulp for AVG).
constexpr const char* kBuildFlags = "-cl-fp32-correctly-rounded-divide-sqrt";
// Group counts beyond this add nothing: the kernels loop over the rest with a grid stride.
constexpr uint64_t kMaxGroups = 1u << 16;

struct Kernel {
  ze_kernel_handle_t handle = nullptr;
  uint32_t group_size = 1;
};

struct Module {
  ze_module_handle_t handle = nullptr;
  bool tried = false;
  std::string failure;  // why it could not be built; empty when built
};

}  // namespace

// The modules and kernels of one device. `mutex` guards them, and is held from setting a kernel's
// arguments to appending its launch (arguments are kernel state). Lock order: Stream::mutex first.
struct DeviceKernels {
  std::mutex mutex;
  std::map<const SpirvModule*, Module> modules;
  std::map<std::string, Kernel> kernels;

  ~DeviceKernels() {
    for (auto& [name, k] : kernels) (void)ze().zeKernelDestroy(k.handle);
    for (auto& [spirv, m] : modules) {
      if (m.handle != nullptr) (void)ze().zeModuleDestroy(m.handle);
    }
  }
};

namespace {

void build(const Device& d, const SpirvModule& spirv, Module& m) {
  m.tried = true;
  if (spirv.fp64) {
    ze_device_module_properties_t props{};
    props.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
    if (ze().zeDeviceGetModuleProperties(d.handle, &props) == ZE_RESULT_SUCCESS &&
        !(props.flags & ZE_DEVICE_MODULE_FLAG_FP64)) {
      m.failure = "the device has no f64 support (ZE_DEVICE_MODULE_FLAG_FP64 not set)";
      return;
    }
  }
  std::string first_failure;
  for (const char* flags : {kBuildFlags, ""}) {
    ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                          nullptr,
                          ZE_MODULE_FORMAT_IL_SPIRV,
                          spirv.size,
                          spirv.data,
                          flags,
                          nullptr};
    ze_module_build_log_handle_t log_handle = nullptr;
    ze_result_t r = ze().zeModuleCreate(d.context, d.handle, &desc, &m.handle, &log_handle);
    std::string text = take_build_log(log_handle);
    if (r == ZE_RESULT_SUCCESS) {
      if (*flags == '\0') {
        log(TSR_LOG_WARN, "level_zero: %s module built without %s (%s)", spirv.family, kBuildFlags,
            first_failure.c_str());
      }
      return;
    }
    m.handle = nullptr;
    std::string failure = std::string("zeModuleCreate failed: ") + result_name(r);
    if (!text.empty()) failure += ": " + text;
    if (first_failure.empty()) first_failure = failure;
    m.failure = failure;
  }
}

// The kernel `name` of (family, fp64) on device `device`, built on first use. Caller holds
// dk.mutex.
tsr_status find_kernel(Backend& b, DeviceKernels& dk, int32_t device, const char* operation,
                       const char* family, bool fp64, const char* name, Kernel** out) {
  if (auto it = dk.kernels.find(name); it != dk.kernels.end()) {
    *out = &it->second;
    return TSR_OK;
  }
  const SpirvModule* spirv = nullptr;
  for (size_t i = 0; i < kSpirvModuleCount; ++i) {
    if (kSpirvModules[i].fp64 == fp64 && std::string(kSpirvModules[i].family) == family) {
      spirv = &kSpirvModules[i];
    }
  }
  if (spirv == nullptr) {
    return fail(TSR_UNIMPLEMENTED, "%s: the %s%s kernels were not built into this library",
                operation, family, fp64 ? " (f64)" : "");
  }
  Module& m = dk.modules[spirv];
  if (!m.tried) build(b.devices[size_t(device)], *spirv, m);
  if (m.handle == nullptr) {
    return fail(TSR_UNIMPLEMENTED, "%s: the %s%s kernel module cannot be built on device %d: %s",
                operation, family, fp64 ? " (f64)" : "", device, m.failure.c_str());
  }
  Kernel k;
  ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
  TSR_ZE_CHECK(operation, zeKernelCreate, m.handle, &desc, &k.handle);
  uint32_t x = 1, y = 1, z = 1;
  ze_result_t r = ze().zeKernelSuggestGroupSize(k.handle, 1u << 20, 1, 1, &x, &y, &z);
  if (r == ZE_RESULT_SUCCESS) r = ze().zeKernelSetGroupSize(k.handle, x, 1, 1);
  if (r != ZE_RESULT_SUCCESS) {
    (void)ze().zeKernelDestroy(k.handle);
    return fail_ze(r, operation, "zeKernelSuggestGroupSize/zeKernelSetGroupSize");
  }
  k.group_size = std::max(x, 1u);
  *out = &dk.kernels.emplace(name, k).first->second;
  return TSR_OK;
}

DeviceKernels& kernels_of(Backend& b, int32_t device) {
  std::lock_guard lock(b.kernels_mutex);
  auto& slot = b.kernels[device];
  if (!slot) slot = std::make_shared<DeviceKernels>();
  return *slot;
}

}  // namespace

tsr_status launch_kernel(Backend& b, Stream& s, const char* operation, const char* family,
                         bool fp64, const char* name, std::initializer_list<KernelArg> args,
                         uint64_t count) {
  DeviceKernels& dk = kernels_of(b, s.device);
  Kernel* k = nullptr;
  {
    std::lock_guard lock(dk.mutex);
    if (tsr_status st = find_kernel(b, dk, s.device, operation, family, fp64, name, &k);
        st != TSR_OK) {
      return st;
    }
  }
  const uint64_t groups =
      std::min<uint64_t>((count + k->group_size - 1) / k->group_size, kMaxGroups);
  const ze_group_count_t launch{uint32_t(groups), 1, 1};
  return submit(s, operation, "zeKernelSetArgumentValue/zeCommandListAppendLaunchKernel", [&] {
    std::lock_guard lock(dk.mutex);
    uint32_t index = 0;
    for (const KernelArg& arg : args) {
      ze_result_t r = ze().zeKernelSetArgumentValue(k->handle, index++, arg.size, arg.value);
      if (r != ZE_RESULT_SUCCESS) return r;
    }
    return ze().zeCommandListAppendLaunchKernel(s.list, k->handle, &launch, nullptr, 0, nullptr);
  });
}

}  // namespace tessera::ze
