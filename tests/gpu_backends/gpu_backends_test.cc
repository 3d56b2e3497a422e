// The HIP and Level Zero backends (and, for the kernel-module entries, CUDA) on a machine without
// their hardware: they load, init fails
// with the right class of status and a non-empty reason, the table refuses work cleanly, and any
// TESSERA_BACKENDS selection that includes them builds a registry without crashing. On a machine
// with a driver but no device, or with devices, the same assertions hold (they accept the states
// such a machine gives).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "tessera/hal/backend_abi.h"
#include "tessera/hal/registry.h"

namespace tessera::hal {
namespace {

std::vector<std::string> built_backends() {
  std::vector<std::string> out;
  if (TESSERA_HAVE_HIP_BACKEND) out.push_back("hip");
  if (TESSERA_HAVE_LEVEL_ZERO_BACKEND) out.push_back("level_zero");
  return out;
}

bool exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

bool library_loads(const char* soname) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

std::unique_ptr<Registry> make_registry(const std::string& selection) {
  RegistryOptions options;
  options.selection = selection;
  options.search_dirs = {TESSERA_BUILD_BACKEND_DIR};
  auto registry = Registry::create(options);
  EXPECT_TRUE(registry.ok()) << selection << ": " << registry.status().to_string();
  return registry.ok() ? std::move(*registry) : nullptr;
}

// The state of a GPU backend on any machine: enabled with devices, or refused with a reason whose
// status says driver or device is missing.
void expect_sane(const BackendRecord& record) {
  SCOPED_TRACE(record.name + ": " + std::string(backend_state_name(record.state)) + ": " +
               record.reason);
  EXPECT_FALSE(record.path.empty()) << "the library was not found";
  if (record.state == BackendState::kEnabled) {
    EXPECT_GT(record.device_count, 0);
    return;
  }
  EXPECT_TRUE(record.state == BackendState::kInitFailed ||
              record.state == BackendState::kNoDevices);
  EXPECT_FALSE(record.reason.empty());
  EXPECT_EQ(record.device_count, 0);
  if (record.state == BackendState::kInitFailed) {
    EXPECT_TRUE(record.code == StatusCode::kNoDriver || record.code == StatusCode::kNoDevice)
        << "code " << int(record.code);
  }
}

TEST(GpuBackends, LoadAndReportWhyTheyHaveNoDevices) {
  const auto names = built_backends();
  if (names.empty()) GTEST_SKIP() << "neither hip nor level_zero is built";
  auto registry = make_registry("hip,level_zero");
  ASSERT_NE(registry, nullptr);
  for (const std::string& name : names) {
    const BackendRecord* record = registry->find(name);
    ASSERT_NE(record, nullptr) << name;
    expect_sane(*record);
  }
}

// Without /dev/kfd (the ROCm kernel driver) the HIP runtime is present but sees no device:
// NO_DEVICE with HIP's own message (hipGetErrorString: "hipErrorNoDevice" in HIP 5.2, a sentence
// in later releases).
TEST(GpuBackends, HipReportsNoDeviceWithoutTheKernelDriver) {
  if (!TESSERA_HAVE_HIP_BACKEND) GTEST_SKIP() << "hip is not built";
  if (exists("/dev/kfd")) GTEST_SKIP() << "/dev/kfd exists: this machine may have an AMD GPU";
  auto registry = make_registry("hip");
  ASSERT_NE(registry, nullptr);
  const BackendRecord* record = registry->find("hip");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->state, BackendState::kInitFailed) << record->reason;
  EXPECT_EQ(record->code, StatusCode::kNoDevice) << record->reason;
  EXPECT_FALSE(record->reason.empty());
}

// Without a Level Zero driver (Intel's libze_intel_gpu) zeInit fails: NO_DRIVER.
TEST(GpuBackends, LevelZeroReportsNoDriverWithoutADriver) {
  if (!TESSERA_HAVE_LEVEL_ZERO_BACKEND) GTEST_SKIP() << "level_zero is not built";
  if (library_loads("libze_intel_gpu.so.1")) GTEST_SKIP() << "a Level Zero driver is installed";
  auto registry = make_registry("level_zero");
  ASSERT_NE(registry, nullptr);
  const BackendRecord* record = registry->find("level_zero");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->state, BackendState::kInitFailed) << record->reason;
  EXPECT_EQ(record->code, StatusCode::kNoDriver) << record->reason;
  EXPECT_NE(record->reason.find("zeInit"), std::string::npos) << record->reason;
}

// The raw table: a failed init leaves a message, device_count gives the reason, and every entry
// that needs the backend refuses with FAILED_PRECONDITION instead of crashing.
TEST(GpuBackends, TheTableRefusesWorkAfterAFailedInit) {
  for (const std::string& name : built_backends()) {
    SCOPED_TRACE(name);
    const std::string path =
        std::string(TESSERA_BUILD_BACKEND_DIR) + "/libtessera-backend-" + name + ".so";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << dlerror();
    auto get = reinterpret_cast<tsr_get_api_v1_fn>(dlsym(library, TSR_BACKEND_ENTRY_POINT));
    ASSERT_NE(get, nullptr);
    tsr_host_info host{
        sizeof host, TSR_BACKEND_ABI_MAJOR, TSR_BACKEND_ABI_MINOR, nullptr, nullptr, 0};
    const tsr_backend_api_v1* api = get(&host);
    ASSERT_NE(api, nullptr);
    EXPECT_EQ(std::string(api->name), name);
    tsr_status s = api->init(nullptr);
    if (s == TSR_OK) {  // a machine with the hardware
      api->finalize();
      continue;
    }
    EXPECT_TRUE(s == TSR_NO_DRIVER || s == TSR_NO_DEVICE) << s;
    EXPECT_STRNE(api->last_error(), "");
    const char* reason = nullptr;
    EXPECT_EQ(api->device_count(&reason), 0);
    ASSERT_NE(reason, nullptr);
    EXPECT_STRNE(reason, "");
    void* ptr = nullptr;
    EXPECT_EQ(api->device_malloc(0, 256, &ptr), TSR_FAILED_PRECONDITION);
    tsr_stream stream = nullptr;
    EXPECT_EQ(api->stream_create(0, 0, &stream), TSR_FAILED_PRECONDITION);
    EXPECT_EQ(api->stream_synchronize(nullptr), TSR_FAILED_PRECONDITION);
    // A second failed init is as clean as the first; finalize without init is a no-op.
    EXPECT_EQ(api->init(nullptr), s);
    api->finalize();
    dlclose(library);
  }
}

// Kernel modules (ABI minor 3): CUDA, HIP and Level Zero provide all four entries whether or not a
// device is present. Without one, every entry refuses with FAILED_PRECONDITION (init failed) and
// enqueues nothing; with one, each device reports the formats its backend loads.
TEST(GpuBackends, KernelModuleEntriesArePresentAndRefuseWorkWithoutADevice) {
  struct Expected {
    const char* name;
    bool built;
    uint32_t formats;  // module_formats of every device when there is one
  };
  const Expected backends[] = {
      {"cuda", TESSERA_HAVE_CUDA_BACKEND,
       (1u << TSR_MODULE_CUDA_CUBIN) | (1u << TSR_MODULE_CUDA_PTX)},
      {"hip", TESSERA_HAVE_HIP_BACKEND, 1u << TSR_MODULE_HIP_CODE_OBJ},
      {"level_zero", TESSERA_HAVE_LEVEL_ZERO_BACKEND, 1u << TSR_MODULE_SPIRV},
  };
  for (const Expected& e : backends) {
    if (!e.built) continue;
    SCOPED_TRACE(e.name);
    const std::string path =
        std::string(TESSERA_BUILD_BACKEND_DIR) + "/libtessera-backend-" + e.name + ".so";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << dlerror();
    auto get = reinterpret_cast<tsr_get_api_v1_fn>(dlsym(library, TSR_BACKEND_ENTRY_POINT));
    ASSERT_NE(get, nullptr);
    tsr_host_info host{
        sizeof host, TSR_BACKEND_ABI_MAJOR, TSR_BACKEND_ABI_MINOR, nullptr, nullptr, 0};
    const tsr_backend_api_v1* api = get(&host);
    ASSERT_NE(api, nullptr);
    EXPECT_GE(api->abi_minor, 3u);
    ASSERT_NE(api->module_load, nullptr);
    ASSERT_NE(api->module_unload, nullptr);
    ASSERT_NE(api->module_get_function, nullptr);
    ASSERT_NE(api->launch, nullptr);
    if (api->init(nullptr) == TSR_OK) {  // a machine with the hardware
      for (int32_t d = 0; d < api->device_count(nullptr); ++d) {
        tsr_device_properties p{};
        p.struct_size = sizeof p;
        ASSERT_EQ(api->device_properties(d, &p), TSR_OK) << api->last_error();
        // CUDA without PTX JIT in the driver reports CUBIN alone.
        EXPECT_NE(p.module_formats & e.formats, 0u) << "device " << d << ": " << p.module_formats;
        EXPECT_EQ(p.module_formats & ~e.formats, 0u) << "device " << d << ": " << p.module_formats;
      }
      api->finalize();
      dlclose(library);
      continue;
    }
    const char image[] = "not a kernel image";
    tsr_module module = nullptr;
    EXPECT_EQ(api->module_load(0, TSR_MODULE_SPIRV, image, sizeof image, "x", &module),
              TSR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(api->last_error()).find("module_load"), std::string::npos)
        << api->last_error();
    EXPECT_EQ(module, nullptr);
    auto* forged_module = reinterpret_cast<tsr_module>(uintptr_t(0x1a));
    auto* forged_function = reinterpret_cast<tsr_function>(uintptr_t(0x1f));
    tsr_function function = nullptr;
    EXPECT_EQ(api->module_get_function(forged_module, "k", &function), TSR_FAILED_PRECONDITION);
    EXPECT_EQ(api->module_unload(forged_module), TSR_FAILED_PRECONDITION);
    const tsr_launch_config config{sizeof config, {1, 1, 1}, {1, 1, 1}, 0};
    auto* forged_stream = reinterpret_cast<tsr_stream>(uintptr_t(0x15));
    EXPECT_EQ(api->launch(forged_stream, forged_function, &config, nullptr, 0),
              TSR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(api->last_error()).find("launch"), std::string::npos)
        << api->last_error();
    dlclose(library);
  }
}

TEST(GpuBackends, NoTesseraBackendsSelectionCrashes) {
  const char* selections[] = {"hip",
                              "level_zero",
                              "hip,level_zero",
                              "level_zero,hip",
                              "host,hip",
                              "host,level_zero",
                              "cuda,hip,level_zero",
                              "host,cuda,hip,level_zero,skeleton",
                              "^hip",
                              "^level_zero",
                              "^hip,level_zero",
                              "^host,cuda,skeleton",
                              "skeleton,level_zero,hip,host,cuda"};
  for (const char* selection : selections) {
    SCOPED_TRACE(selection);
    setenv("TESSERA_BACKENDS", selection, 1);
    for (int round = 0; round < 2; ++round) {  // load, unload, load again
      RegistryOptions options;                 // no selection: TESSERA_BACKENDS decides
      options.search_dirs = {TESSERA_BUILD_BACKEND_DIR};
      auto registry = Registry::create(options);
      ASSERT_TRUE(registry.ok()) << registry.status().to_string();
      for (const std::string& name : built_backends()) {
        const BackendRecord* record = (*registry)->find(name);
        ASSERT_NE(record, nullptr) << name;
        if (record->state == BackendState::kDisabled) {
          EXPECT_NE(record->reason.find("TESSERA_BACKENDS"), std::string::npos);
        } else {
          expect_sane(*record);
        }
      }
    }
    unsetenv("TESSERA_BACKENDS");
  }
}

}  // namespace
}  // namespace tessera::hal
