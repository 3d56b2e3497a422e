// Kernel modules through the C++ HAL (hal::Module, hal::Function, Stream::launch with typed
// arguments) and the host backend's own rules that the CTS cannot ask of every backend: unloading
// with a launch in flight is safe, stale handles are refused, the module table is checked, and in
// discrete mode kernels receive the backend's accessible view of device memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tessera/hal/hal.h"

namespace tessera::hal {
namespace {

const std::string kImage = std::string(TESSERA_CTS_KERNEL_DIR) + "/cts_kernels.host.so";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The host backend initialised with `options` for one test; finalized when the test ends.
std::shared_ptr<Backend> host(const std::string& options) {
  auto opened = Backend::open("host", {TESSERA_BUILD_BACKEND_DIR});
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  if (!opened.ok()) return nullptr;
  Status status = opened.value()->init(options);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return status.ok() ? opened.value() : nullptr;
}

Stream make_stream(const std::shared_ptr<Backend>& backend) {
  tsr_stream stream = nullptr;
  EXPECT_EQ(backend->api().stream_create(0, 0, &stream), TSR_OK) << backend->api().last_error();
  return Stream(backend, 0, stream);
}

DeviceBuffer make_buffer(const std::shared_ptr<Backend>& backend, size_t bytes) {
  void* ptr = nullptr;
  EXPECT_EQ(backend->api().device_malloc(0, bytes, &ptr), TSR_OK) << backend->api().last_error();
  return DeviceBuffer(backend, 0, ptr, bytes);
}

// c = a + b through tsr_cts_vector_add with typed arguments; checks every element.
void expect_vector_add(const std::shared_ptr<Backend>& backend, const Function& add, uint32_t n) {
  Stream stream = make_stream(backend);
  std::vector<float> a(n), b(n), c(n, 0.0f);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = float(i);
    b[i] = 1000.0f - float(i);
  }
  DeviceBuffer da = make_buffer(backend, n * 4), db = make_buffer(backend, n * 4),
               dc = make_buffer(backend, n * 4);
  ASSERT_TRUE(stream.copy(da.data(), a.data(), n * 4).ok());
  ASSERT_TRUE(stream.copy(db.data(), b.data(), n * 4).ok());
  Status launched =
      stream.launch(add, LaunchConfig::linear(n, 128), static_cast<float*>(da.data()),
                    static_cast<float*>(db.data()), static_cast<float*>(dc.data()), n);
  ASSERT_TRUE(launched.ok()) << launched.to_string();
  ASSERT_TRUE(stream.copy(c.data(), dc.data(), n * 4).ok());
  Status synced = stream.synchronize();
  ASSERT_TRUE(synced.ok()) << synced.to_string();
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], 1000.0f) << "c[" << i << "]";
}

TEST(ModuleApi, SpellsFormatNames) {
  EXPECT_STREQ(module_format_name(TSR_MODULE_HOST_ELF), "host-elf");
  EXPECT_STREQ(module_format_name(TSR_MODULE_SPIRV), "spirv");
  EXPECT_STREQ(module_format_name(0), "unknown");
  EXPECT_STREQ(module_format_name(99), "unknown");
  EXPECT_EQ(module_format_names(0), "none");
  EXPECT_EQ(module_format_names((1u << TSR_MODULE_CUDA_CUBIN) | (1u << TSR_MODULE_CUDA_PTX)),
            "cuda-cubin, cuda-ptx");
  LaunchConfig config = LaunchConfig::linear(257, 256);
  EXPECT_EQ(config.grid.x, 2u);
  EXPECT_EQ(LaunchConfig::linear(0, 256).grid.x, 1u);
}

TEST(ModuleApi, LoadsAFileAndLaunchesWithTypedArguments) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto device = Device::query(backend, 0);
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  EXPECT_EQ(device->module_formats(), 1u << TSR_MODULE_HOST_ELF);
  EXPECT_TRUE(device->takes_module_format(TSR_MODULE_HOST_ELF));
  EXPECT_FALSE(device->takes_module_format(TSR_MODULE_CUDA_PTX));
  auto module = Module::load_file(*device, TSR_MODULE_HOST_ELF, kImage);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  EXPECT_EQ(module->name(), kImage);
  auto add = module->function("tsr_cts_vector_add");
  ASSERT_TRUE(add.ok()) << add.status().to_string();
  EXPECT_EQ(add->module_name(), kImage);
  expect_vector_add(backend, *add, 1000);
  // The function keeps the image loaded after the Module object is gone.
  *module = Module();
  expect_vector_add(backend, *add, 3);
}

TEST(ModuleApi, NamesTheFileWhenItCannotBeReadOrLoaded) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto missing = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, "/nonexistent/kernels.so");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), "/nonexistent/kernels.so"))
      << missing.status().to_string();

  const std::string garbage =
      testing::TempDir() + "garbage_kernels_" + std::to_string(getpid()) + ".so";
  std::ofstream(garbage) << "this is not an ELF shared object";
  auto refused = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, garbage);
  std::filesystem::remove(garbage);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(refused.status().message(), garbage)) << refused.status().to_string();

  auto other_format = Module::load_file(backend, 0, TSR_MODULE_SPIRV, kImage);
  EXPECT_EQ(other_format.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(contains(other_format.status().message(), "spirv"))
      << other_format.status().to_string();
}

TEST(ModuleApi, RefusesAWrongArgumentNamingTheKernelAndItsIndex) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, kImage);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  auto add = module->function("tsr_cts_vector_add");
  ASSERT_TRUE(add.ok());
  Stream stream = make_stream(backend);
  DeviceBuffer buffer = make_buffer(backend, 1024);
  auto* p = static_cast<float*>(buffer.data());
  const uint64_t wide_n = 4;  // the kernel takes a uint32_t
  Status status = stream.launch(*add, LaunchConfig::linear(4, 4), p, p, p, wide_n);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(status.message(), "tsr_cts_vector_add")) << status.to_string();
  EXPECT_TRUE(contains(status.message(), "argument 3")) << status.to_string();
  auto unknown = module->function("no_such_kernel");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(unknown.status().message(), "no_such_kernel"));
}

TEST(HostModules, KeepsTheImageUntilALaunchInFlightHasRunAfterUnload) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  const auto& api = backend->api();
  std::ifstream in(kImage, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(image.empty()) << kImage;
  tsr_module module = nullptr;
  ASSERT_EQ(
      api.module_load(0, TSR_MODULE_HOST_ELF, image.data(), image.size(), "in-flight.so", &module),
      TSR_OK)
      << api.last_error();
  tsr_function add = nullptr;
  ASSERT_EQ(api.module_get_function(module, "tsr_cts_vector_add", &add), TSR_OK);
  Stream stream = make_stream(backend);
  constexpr uint32_t n = 4096;
  std::vector<float> ones(n, 1.0f), out(n, 0.0f);
  DeviceBuffer a = make_buffer(backend, n * 4), c = make_buffer(backend, n * 4);
  ASSERT_TRUE(stream.copy(a.data(), ones.data(), n * 4).ok());
  // The stream is held while the launch is enqueued and the module unloaded.
  ASSERT_EQ(api.stream_busy_wait(stream.handle(), 20'000), TSR_OK);
  void* pa = a.data();
  void* pc = c.data();
  uint32_t count = n;
  const tsr_kernel_arg args[] = {{&pa, 8}, {&pa, 8}, {&pc, 8}, {&count, 4}};
  const tsr_launch_config config = LaunchConfig::linear(n, 256).to_abi();
  ASSERT_EQ(api.launch(stream.handle(), add, &config, args, 4), TSR_OK) << api.last_error();
  ASSERT_EQ(api.module_unload(module), TSR_OK) << api.last_error();
  // The handles are dead at once; the queued launch still runs on the image.
  tsr_function again = nullptr;
  EXPECT_EQ(api.module_get_function(module, "tsr_cts_vector_add", &again), TSR_INVALID_ARGUMENT);
  EXPECT_EQ(api.launch(stream.handle(), add, &config, args, 4), TSR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(api.last_error(), "unloaded")) << api.last_error();
  EXPECT_EQ(api.module_unload(module), TSR_INVALID_ARGUMENT);
  ASSERT_TRUE(stream.copy(out.data(), c.data(), n * 4).ok());
  Status synced = stream.synchronize();
  ASSERT_TRUE(synced.ok()) << synced.to_string();
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f) << i;
}

TEST(HostModules, PassesKernelsTheDeviceViewOfMemoryInDiscreteMode) {
  auto backend = host("devices=1;discrete=1");
  ASSERT_NE(backend, nullptr);
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, kImage);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  auto add = module->function("tsr_cts_vector_add");
  ASSERT_TRUE(add.ok());
  // Without the rewrite the kernel would dereference PROT_NONE pointers and kill the process.
  expect_vector_add(backend, *add, 777);
}

TEST(HostModules, FailsTheStreamNamingTheKernelAndBlock) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, kImage);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  auto fail = module->function("tsr_cts_fail");
  ASSERT_TRUE(fail.ok());
  Stream stream = make_stream(backend);
  ASSERT_TRUE(stream.launch(*fail, LaunchConfig{}).ok());
  Status status = stream.synchronize();
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_TRUE(contains(status.message(), "kernel 'tsr_cts_fail'")) << status.to_string();
  EXPECT_TRUE(contains(status.message(), "returned 7 in block (0,0,0)")) << status.to_string();
  EXPECT_TRUE(contains(status.message(), "failing on purpose")) << status.to_string();
}

TEST(HostModules, RefusesLaunchLimitsBeyondTheDocumentedOnes) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, kImage);
  ASSERT_TRUE(module.ok());
  auto fail = module->function("tsr_cts_fail");
  ASSERT_TRUE(fail.ok());
  Stream stream = make_stream(backend);
  LaunchConfig shared;
  shared.shared_bytes = 48 * 1024 + 1;
  Status status = stream.launch(*fail, shared);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(status.message(), "shared_bytes 49153")) << status.to_string();
  LaunchConfig grid;
  grid.grid.y = 65536;
  EXPECT_EQ(stream.launch(*fail, grid).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream.launch(*fail, LaunchConfig{}, 1u).message().find("1 argument(s) given") !=
              std::string::npos);
  EXPECT_TRUE(stream.synchronize().ok()) << "nothing was enqueued";
}

struct BadImage {
  const char* variant;
  const char* expected;  // part of the refusal's message
};

class HostModuleTable : public testing::TestWithParam<BadImage> {};

TEST_P(HostModuleTable, RefusesABadTableNamingTheImage) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  const std::string path =
      std::string(TESSERA_BAD_MODULE_DIR) + "/bad_host_module_" + GetParam().variant + ".so";
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF, path);
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), StatusCode::kInvalidArgument) << module.status().to_string();
  EXPECT_TRUE(contains(module.status().message(), path)) << module.status().to_string();
  EXPECT_TRUE(contains(module.status().message(), GetParam().expected))
      << module.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Variants, HostModuleTable,
                         testing::Values(BadImage{"no_entry", "exports no tessera_host_module_v1"},
                                         BadImage{"wrong_major", "abi_major 2"},
                                         BadImage{"duplicate_names",
                                                  "two kernels are named 'twice'"},
                                         BadImage{"null_fn", "no function"},
                                         BadImage{"zero_arg_size", "argument 0 is 0 bytes"}),
                         [](const testing::TestParamInfo<BadImage>& param_info) {
                           return std::string(param_info.param.variant);
                         });

TEST(HostModules, AcceptsAWellFormedTable) {
  auto backend = host("devices=1");
  ASSERT_NE(backend, nullptr);
  auto module = Module::load_file(backend, 0, TSR_MODULE_HOST_ELF,
                                  std::string(TESSERA_BAD_MODULE_DIR) + "/bad_host_module_ok.so");
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  EXPECT_TRUE(module->function("fine").ok());
}

}  // namespace
}  // namespace tessera::hal
