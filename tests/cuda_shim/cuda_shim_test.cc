// The CUDA backend through the registry, without a GPU: the fakert build (the same sources under
// the prefix `fakert`, see CMakeLists.txt) reports its fake devices and its NO_DEVICE path; the
// real CUDA build loads on this machine and says why it has no device instead of crashing.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>

#include "tessera/hal/registry.h"

namespace tessera::hal {
namespace {

std::unique_ptr<Registry> load(const std::string& selection, const std::string& dir) {
  RegistryOptions options;
  options.selection = selection;
  options.search_dirs = {dir};
  auto registry = Registry::create(options);
  EXPECT_TRUE(registry.ok()) << registry.status().to_string();
  return registry.ok() ? std::move(*registry) : nullptr;
}

TEST(Fakert, ReportsItsDevicesWithTheirProperties) {
  setenv("FAKERT_DEVICES", "2", 1);
  auto registry = load("fakert", TESSERA_SHIM_BACKEND_DIR);
  unsetenv("FAKERT_DEVICES");
  ASSERT_NE(registry, nullptr);
  const BackendRecord* record = registry->find("fakert");
  ASSERT_NE(record, nullptr);
  ASSERT_EQ(record->state, BackendState::kEnabled) << record->reason;
  ASSERT_EQ(record->device_count, 2);
  EXPECT_NE(record->version.find("runtime fakert"), std::string::npos) << record->version;
  const tsr_backend_api_v1& api = record->backend->api();
  EXPECT_STREQ(api.name, "fakert");
  EXPECT_EQ(api.reduce_async, nullptr) << "built with KERNELS OFF";
  EXPECT_EQ(api.gemm_async, nullptr) << "built with no BLAS library";
  EXPECT_EQ(api.ipc_get_handle, nullptr) << "built with IPC OFF";
  ASSERT_NE(api.collectives, nullptr) << "built with the fake NCCL (fakenccl.cc)";
  EXPECT_STREQ(api.collectives->library, "FAKENCCL 2.21.5");
  tsr_device_properties p{};
  p.struct_size = sizeof p;
  ASSERT_EQ(api.device_properties(1, &p), TSR_OK) << api.last_error();
  EXPECT_STREQ(p.name, "fakert device 1");
  EXPECT_STREQ(p.pci_bus_id, "0000:fa:01.0");
  EXPECT_EQ(p.compute_units, 4);
  EXPECT_EQ(p.peak_flops_bf16, 0.0) << "NVIDIA's table must not apply to another stack";
  EXPECT_DOUBLE_EQ(p.memory_bandwidth, 2.0 * 500e6 * 64 / 8);  // DDR x clock x bus bytes
  EXPECT_NE(p.capabilities & TSR_CAP_PEER_ACCESS, 0u);
  EXPECT_EQ(p.capabilities & TSR_CAP_IPC, 0u);
}

TEST(Fakert, FailsInitWithNoDeviceAndTheRuntimesMessage) {
  setenv("FAKERT_DEVICES", "0", 1);
  auto registry = load("fakert", TESSERA_SHIM_BACKEND_DIR);
  unsetenv("FAKERT_DEVICES");
  ASSERT_NE(registry, nullptr);
  const BackendRecord* record = registry->find("fakert");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->state, BackendState::kInitFailed);
  EXPECT_EQ(record->code, StatusCode::kNoDevice);
  EXPECT_NE(record->reason.find("no fakert device is detected"), std::string::npos)
      << record->reason;
}

TEST(CudaBackend, LoadsAndSaysWhyItHasNoUsableDevice) {
  if (!TESSERA_HAVE_CUDA_BACKEND) GTEST_SKIP() << "the CUDA backend is not built here";
  auto registry = load("cuda", TESSERA_BUILD_BACKEND_DIR);
  ASSERT_NE(registry, nullptr);
  const BackendRecord* record = registry->find("cuda");
  ASSERT_NE(record, nullptr);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    // This machine: no driver. The loader's own message must come through.
    EXPECT_EQ(record->state, BackendState::kInitFailed) << record->reason;
    EXPECT_EQ(record->code, StatusCode::kNoDriver) << record->reason;
    EXPECT_NE(record->reason.find("libcuda.so.1"), std::string::npos) << record->reason;
    EXPECT_EQ(record->device_count, 0);
    return;
  }
  dlclose(driver);
  // A machine with a driver: any honest state, with a reason unless enabled.
  switch (record->state) {
    case BackendState::kEnabled: EXPECT_GT(record->device_count, 0); break;
    case BackendState::kNoDevices:
    case BackendState::kInitFailed: EXPECT_FALSE(record->reason.empty()); break;
    default:
      ADD_FAILURE() << "unexpected state " << backend_state_name(record->state) << ": "
                    << record->reason;
  }
}

TEST(CudaBackend, KeepsTheRuntimeAndEverythingButTheEntryPointPrivate) {
  if (!TESSERA_HAVE_CUDA_BACKEND) GTEST_SKIP() << "the CUDA backend is not built here";
  const std::string path = std::string(TESSERA_BUILD_BACKEND_DIR) + "/libtessera-backend-cuda.so";
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  EXPECT_NE(dlsym(library, "tessera_backend_get_api_v1"), nullptr);
  // The statically linked runtime must not interpose an application's libcudart.
  EXPECT_EQ(dlsym(library, "cudaMalloc"), nullptr);
  EXPECT_EQ(dlsym(library, "cudaGetDeviceCount"), nullptr);
  dlclose(library);
}

}  // namespace
}  // namespace tessera::hal
