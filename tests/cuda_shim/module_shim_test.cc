// Kernel modules (backend_abi.h, minor 3) through the CUDA backend's own code (backends/cuda/
// module.cc) on the fakert build: module_load, module_get_function, launch and module_unload
// resolve fakert's fake driver (fakecuModuleLoadData, fakecuLaunchKernel, fakecuFuncGetParamInfo,
// ...), which runs host-format images on fakert device memory. The image is the CTS's
// cts_kernels.host.so when the build made one, else this folder's fakert_test_kernels.c (the same
// two kernels); the failing kernel and the limits use the latter. Also: fakert's own refusal of a
// cubin, a fatbin and PTX, saying there is no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "fakert_runtime.h"
#include "tessera/hal/backend.h"

namespace tessera::hal {
namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The CTS host image when it was built, else this folder's.
std::string vector_add_image() {
  const std::string cts = std::string(TESSERA_CTS_KERNEL_DIR) + "/cts_kernels.host.so";
  return read_file(cts).empty() ? std::string(TESSERA_SHIM_TEST_KERNELS) : cts;
}

class FakertModule : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened =
        Backend::open(std::string(TESSERA_SHIM_BACKEND_DIR) + "/libtessera-backend-fakert.so", {});
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    backend_ = std::move(*opened);
    ASSERT_TRUE(backend_->init().ok());
    ASSERT_NE(api().module_load, nullptr);
    ASSERT_NE(api().launch, nullptr);
    ASSERT_EQ(api().stream_create(0, 0, &stream_), TSR_OK) << api().last_error();
  }
  void TearDown() override {
    if (module_ != nullptr) {
      EXPECT_EQ(api().module_unload(module_), TSR_OK) << api().last_error();
    }
    for (void* p : allocations_) EXPECT_EQ(api().device_free(0, p), TSR_OK);
    if (stream_ != nullptr) {
      EXPECT_EQ(api().stream_destroy(stream_), TSR_OK);
    }
  }
  const tsr_backend_api_v1& api() const { return backend_->api(); }

  void load(const std::string& path) {
    std::vector<char> image = read_file(path);
    ASSERT_FALSE(image.empty()) << path;
    ASSERT_EQ(api().module_load(0, TSR_MODULE_HOST_ELF, image.data(), image.size(), path.c_str(),
                                &module_),
              TSR_OK)
        << api().last_error();
  }
  tsr_function function(const char* name) {
    tsr_function f = nullptr;
    EXPECT_EQ(api().module_get_function(module_, name, &f), TSR_OK) << api().last_error();
    return f;
  }
  float* device_floats(const std::vector<float>& values) {
    void* p = nullptr;
    EXPECT_EQ(api().device_malloc(0, values.size() * sizeof(float), &p), TSR_OK);
    allocations_.push_back(p);
    EXPECT_EQ(api().memcpy_async(p, values.data(), values.size() * sizeof(float), stream_), TSR_OK);
    // Pageable host memory must outlive the copy (the ABI's rule); callers pass temporaries.
    EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
    return static_cast<float*>(p);
  }
  std::vector<float> read_back(const float* p, size_t count) {
    std::vector<float> out(count);
    EXPECT_EQ(api().memcpy_async(out.data(), p, count * sizeof(float), stream_), TSR_OK);
    EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
    return out;
  }
  static tsr_launch_config config(uint32_t grid, uint32_t block, uint32_t shared = 0) {
    return tsr_launch_config{sizeof(tsr_launch_config), {grid, 1, 1}, {block, 1, 1}, shared};
  }

  std::shared_ptr<Backend> backend_;
  tsr_stream stream_ = nullptr;
  tsr_module module_ = nullptr;
  std::vector<void*> allocations_;
};

TEST_F(FakertModule, DevicesTakeTheHostFormatOnly) {
  tsr_device_properties p{};
  p.struct_size = sizeof p;
  ASSERT_EQ(api().device_properties(0, &p), TSR_OK);
  EXPECT_EQ(p.module_formats, 1u << TSR_MODULE_HOST_ELF);
  std::vector<char> image(64, 1);
  tsr_module m = nullptr;
  EXPECT_EQ(api().module_load(0, TSR_MODULE_CUDA_CUBIN, image.data(), image.size(), "x.cubin", &m),
            TSR_UNIMPLEMENTED);
  EXPECT_NE(std::string(api().last_error()).find("x.cubin"), std::string::npos)
      << api().last_error();
}

TEST_F(FakertModule, VectorAddIsCorrectOnDeviceMemory) {
  load(vector_add_image());
  tsr_function add = function("tsr_cts_vector_add");
  const uint32_t n = 1000;  // not a multiple of the block: the tail is guarded
  std::vector<float> a(n), b(n), zero(n, -1.0f);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = float(i);
    b[i] = 0.5f * float(i) + 1.0f;
  }
  float* da = device_floats(a);
  float* db = device_floats(b);
  float* dc = device_floats(zero);
  tsr_kernel_arg args[] = {{&da, sizeof da}, {&db, sizeof db}, {&dc, sizeof dc}, {&n, sizeof n}};
  const tsr_launch_config c = config((n + 255) / 256, 256);
  ASSERT_EQ(api().launch(stream_, add, &c, args, 4), TSR_OK) << api().last_error();
  std::vector<float> out = read_back(dc, n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
}

TEST_F(FakertModule, BlockSumWithSharedMemoryAboveTheDefaultAllowance) {
  load(TESSERA_SHIM_TEST_KERNELS);
  tsr_function sum = function("tsr_cts_block_sum");
  const uint32_t n = 1000;
  std::vector<float> x(n, 1.0f), partial(4, -1.0f);
  float* dx = device_floats(x);
  float* dp = device_floats(partial);
  tsr_kernel_arg args[] = {{&dx, sizeof dx}, {&dp, sizeof dp}, {&n, sizeof n}};
  // 64 KiB is above the 48 KiB a function is allowed by default: the backend opts in.
  const tsr_launch_config c = config(4, 1024, 64 << 10);
  ASSERT_EQ(api().launch(stream_, sum, &c, args, 3), TSR_OK) << api().last_error();
  EXPECT_EQ(read_back(dp, 4), (std::vector<float>{250.0f, 250.0f, 250.0f, 250.0f}));
}

TEST_F(FakertModule, AWrongArgumentSizeIsRefusedNamingTheArgument) {
  load(vector_add_image());
  tsr_function add = function("tsr_cts_vector_add");
  float* d = device_floats(std::vector<float>(4, 0.0f));
  const uint64_t wide_n = 4;  // the kernel's n is a uint32_t
  tsr_kernel_arg args[] = {{&d, sizeof d}, {&d, sizeof d}, {&d, sizeof d}, {&wide_n, 8}};
  const tsr_launch_config c = config(1, 256);
  EXPECT_EQ(api().launch(stream_, add, &c, args, 4), TSR_INVALID_ARGUMENT);
  const std::string message = api().last_error();
  EXPECT_NE(message.find("tsr_cts_vector_add"), std::string::npos) << message;
  EXPECT_NE(message.find("argument 3 is 8 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("parameter 3 is 4 bytes"), std::string::npos) << message;
  EXPECT_EQ(api().launch(stream_, add, &c, args, 3), TSR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api().last_error()).find("takes 4 arguments, 3 given"), std::string::npos)
      << api().last_error();
  EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK) << "nothing was enqueued";
}

TEST_F(FakertModule, AnUnknownKernelIsRefusedByName) {
  load(vector_add_image());
  tsr_function f = nullptr;
  EXPECT_EQ(api().module_get_function(module_, "tsr_cts_no_such_kernel", &f), TSR_NOT_FOUND);
  const std::string message = api().last_error();
  EXPECT_NE(message.find("\"tsr_cts_no_such_kernel\""), std::string::npos) << message;
  EXPECT_NE(message.find(".so"), std::string::npos) << "names the module: " << message;
}

TEST_F(FakertModule, LaunchesBeyondTheDeviceLimitsAreRefused) {
  load(TESSERA_SHIM_TEST_KERNELS);
  tsr_function add = function("tsr_cts_vector_add");
  float* d = device_floats(std::vector<float>(4, 0.0f));
  const uint32_t n = 4;
  tsr_kernel_arg args[] = {{&d, sizeof d}, {&d, sizeof d}, {&d, sizeof d}, {&n, sizeof n}};
  struct Case {
    tsr_launch_config config;
    const char* says;
  } cases[] = {
      {config(1, 2048), "block.x is 2048, the device's limit is 1024"},
      {config(0, 256), "must be at least 1"},
      {config(1, 256, 128 << 10), "the device's limit is 98304"},
      {{sizeof(tsr_launch_config), {1, 1, 1}, {1, 1, 128}, 0}, "block.z is 128"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(api().launch(stream_, add, &c.config, args, 4), TSR_INVALID_ARGUMENT) << c.says;
    EXPECT_NE(std::string(api().last_error()).find(c.says), std::string::npos)
        << api().last_error();
  }
}

TEST_F(FakertModule, AFailingKernelFailsTheStream) {
  load(TESSERA_SHIM_TEST_KERNELS);
  tsr_function bad = function("tsr_test_fail");
  const tsr_launch_config c = config(1, 1);
  ASSERT_EQ(api().launch(stream_, bad, &c, nullptr, 0), TSR_OK) << api().last_error();
  EXPECT_NE(api().stream_synchronize(stream_), TSR_OK);
  EXPECT_NE(std::string(api().last_error()).find("launch failure"), std::string::npos)
      << api().last_error();
}

TEST_F(FakertModule, UnloadInvalidatesTheFunctions) {
  load(TESSERA_SHIM_TEST_KERNELS);
  tsr_function add = function("tsr_cts_vector_add");
  ASSERT_EQ(api().module_unload(module_), TSR_OK);
  const tsr_module unloaded = module_;
  module_ = nullptr;
  const tsr_launch_config c = config(1, 1);
  EXPECT_EQ(api().launch(stream_, add, &c, nullptr, 0), TSR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api().last_error()).find("unloaded"), std::string::npos);
  EXPECT_EQ(api().module_unload(unloaded), TSR_INVALID_ARGUMENT);
  tsr_function f = nullptr;
  EXPECT_EQ(api().module_get_function(unloaded, "tsr_cts_vector_add", &f), TSR_INVALID_ARGUMENT);
}

TEST_F(FakertModule, AnImageThatIsNotAHostModuleIsRefusedWithTheReason) {
  const std::string text = "not an ELF image at all";
  tsr_module m = nullptr;
  EXPECT_EQ(api().module_load(0, TSR_MODULE_HOST_ELF, text.data(), text.size(), "garbage.so", &m),
            TSR_INVALID_ARGUMENT);
  const std::string message = api().last_error();
  EXPECT_NE(message.find("garbage.so"), std::string::npos) << message;
  EXPECT_NE(message.find("neither an ELF image nor a fatbin"), std::string::npos) << message;
}

// fakert's driver itself: a GPU image is refused saying the fake runtime has no GPU, PTX with the
// reason in the JIT error log.
TEST(FakertDriver, RefusesCubinFatbinAndPtxForWantOfAGpu) {
  std::vector<unsigned char> cubin(128, 0);
  std::memcpy(cubin.data(),
              "\x7f"
              "ELF",
              4);
  cubin[4] = 2;     // ELFCLASS64
  cubin[18] = 190;  // e_machine EM_CUDA
  fakecuModule module = nullptr;
  EXPECT_EQ(fakecuModuleLoadData(&module, cubin.data()), FAKECU_ERROR_NO_BINARY_FOR_GPU);
  const char* text = nullptr;
  ASSERT_EQ(fakecuGetErrorString(FAKECU_ERROR_NO_BINARY_FOR_GPU, &text), 0);
  EXPECT_NE(std::string(text).find("cubin"), std::string::npos) << text;
  EXPECT_NE(std::string(text).find("no GPU"), std::string::npos) << text;

  const uint32_t fatbin[4] = {0xBA55ED50u, 0, 0, 0};
  EXPECT_EQ(fakecuModuleLoadData(&module, fatbin), FAKECU_ERROR_NO_BINARY_FOR_GPU);
  ASSERT_EQ(fakecuGetErrorString(FAKECU_ERROR_NO_BINARY_FOR_GPU, &text), 0);
  EXPECT_NE(std::string(text).find("fatbin"), std::string::npos) << text;

  const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n";
  char log[256] = "";
  int options[] = {FAKECU_JIT_ERROR_LOG_BUFFER, FAKECU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(uintptr_t(sizeof log))};
  EXPECT_EQ(fakecuModuleLoadDataEx(&module, ptx, 2, options, values), FAKECU_ERROR_INVALID_PTX);
  EXPECT_NE(std::string(log).find("no GPU"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::hal
