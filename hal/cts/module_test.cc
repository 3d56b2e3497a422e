// Kernel modules (ABI minor 3): module_load, module_get_function, launch, module_unload, with the
// CTS's own kernel images (kernel_images.h). Checks the results of tsr_cts_vector_add and
// tsr_cts_block_sum on device memory; that bad arguments, configurations and images are refused
// with messages that name the kernel, the argument or the image, and nothing is enqueued; that
// modules load and unload repeatedly; and (host format) that a kernel's failure fails its stream
// with the kernel's message. A backend provides the four entries or none; one without them lists
// `unsupported Module.*`. A device whose formats have no image here skips, naming the files.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fixture.h"
#include "kernel_images.h"
#include "support.h"

namespace tessera::cts {
namespace {

#define CTS_MODULE_ENTRIES "module_load", "module_unload", "module_get_function", "launch"

constexpr const char* kVectorAdd = "tsr_cts_vector_add";
constexpr const char* kBlockSum = "tsr_cts_block_sum";
constexpr uint32_t kBlock = 256;

// Owns one loaded module; unloads it on destruction.
class OwnedModule {
 public:
  OwnedModule() = default;
  ~OwnedModule() { reset(); }
  OwnedModule(const OwnedModule&) = delete;
  OwnedModule& operator=(const OwnedModule&) = delete;

  tsr_status load(int32_t device, const KernelImage& image) {
    reset();
    return api().module_load(device, image.format, image.bytes.data(), image.bytes.size(),
                             image.file.c_str(), &module_);
  }
  void reset() {
    if (module_ != nullptr) {
      EXPECT_TRUE(status_is(TSR_OK, api().module_unload(module_), "module_unload"));
    }
    module_ = nullptr;
  }
  tsr_module release() { return std::exchange(module_, nullptr); }
  tsr_module get() const { return module_; }

 private:
  tsr_module module_ = nullptr;
};

tsr_launch_config config_1d(uint32_t grid, uint32_t block, uint32_t shared_bytes = 0) {
  tsr_launch_config config{};
  config.struct_size = sizeof config;
  config.grid = {grid, 1, 1};
  config.block = {block, 1, 1};
  config.shared_bytes = shared_bytes;
  return config;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string last_error() {
  const char* text = api().last_error();
  return text ? text : "";
}

class Module : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    tsr_device_properties props{};
    props.struct_size = sizeof props;
    CTS_ASSERT_OK(api().device_properties(0, &props));
    formats_ = props.module_formats;
    std::string looked_for;
    if (!find_kernel_image(formats_, context().kernel_dir, &image_, &looked_for)) {
      GTEST_SKIP() << "no CTS kernel image for device 0 (module_formats 0x" << std::hex << formats_
                   << std::dec << "); looked for " << looked_for
                   << " (--kernel-dir DIR or TESSERA_CTS_KERNEL_DIR names a folder)";
    }
    CTS_ASSERT_OK(OwnedStream::create(0, &stream_));
  }

  // Loads the image on device 0 and looks up `name` in it.
  void load_function(OwnedModule* module, const char* name, tsr_function* out) {
    CTS_ASSERT_OK(module->load(0, image_));
    CTS_ASSERT_OK(api().module_get_function(module->get(), name, out));
  }

  // c = a + b for n floats through tsr_cts_vector_add, checked element by element; the floats
  // after c[n] must stay untouched.
  void check_vector_add(tsr_function function, uint32_t n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    constexpr uint32_t kGuard = 64;
    std::vector<float> a(n), b(n), c(n + kGuard, -1.0f);
    for (uint32_t i = 0; i < n; ++i) {
      a[i] = float(i);
      b[i] = 0.5f * float(i % 1000) + 0.25f;
    }
    DeviceMemory da, db, dc;
    CTS_ASSERT_OK(DeviceMemory::allocate(0, n * sizeof(float), &da));
    CTS_ASSERT_OK(DeviceMemory::allocate(0, n * sizeof(float), &db));
    CTS_ASSERT_OK(DeviceMemory::allocate(0, c.size() * sizeof(float), &dc));
    ASSERT_TRUE(copy_and_wait(da.get(), a.data(), n * sizeof(float), stream_));
    ASSERT_TRUE(copy_and_wait(db.get(), b.data(), n * sizeof(float), stream_));
    ASSERT_TRUE(copy_and_wait(dc.get(), c.data(), c.size() * sizeof(float), stream_));
    void* pa = da.get();
    void* pb = db.get();
    void* pc = dc.get();
    const tsr_kernel_arg args[] = {
        {&pa, sizeof pa}, {&pb, sizeof pb}, {&pc, sizeof pc}, {&n, sizeof n}};
    const tsr_launch_config config = config_1d((n + kBlock - 1) / kBlock, kBlock);
    CTS_ASSERT_OK(api().launch(stream_.get(), function, &config, args, 4));
    std::vector<float> out(c.size());
    ASSERT_TRUE(copy_and_wait(out.data(), dc.get(), out.size() * sizeof(float), stream_));
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], a[i] + b[i]) << "c[" << i << "]";
    }
    for (uint32_t i = n; i < out.size(); ++i) ASSERT_EQ(out[i], -1.0f) << "c[" << i << "] overrun";
  }

  uint32_t formats_ = 0;
  KernelImage image_;
  OwnedStream stream_;
};

CTS_TEST(Module, AddsVectorsOnDeviceMemoryForSeveralSizes, CTS_MODULE_ENTRIES) {
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
  for (uint32_t n : {1u, 255u, 256u, 257u, 1000u, 65537u}) {
    ASSERT_NO_FATAL_FAILURE(check_vector_add(function, n));
  }
}

CTS_TEST(Module, SumsBlocksOverSeveralGrids, CTS_MODULE_ENTRIES) {
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kBlockSum, &function));
  struct Case {
    uint32_t n, grid, block;
  };
  // Small integers: every partial sum is exact in f32 whatever the order of additions.
  for (const Case& c : {Case{10007, 1, 256}, Case{10007, 3, 256}, Case{10007, 64, 128},
                        Case{4096, 16, 1024}, Case{5, 8, 32}}) {
    SCOPED_TRACE("n = " + std::to_string(c.n) + ", grid " + std::to_string(c.grid) + ", block " +
                 std::to_string(c.block));
    std::vector<float> x(c.n);
    for (uint32_t i = 0; i < c.n; ++i) x[i] = float(int(i % 17) - 8);
    DeviceMemory dx, dpartial;
    CTS_ASSERT_OK(DeviceMemory::allocate(0, x.size() * sizeof(float), &dx));
    CTS_ASSERT_OK(DeviceMemory::allocate(0, c.grid * sizeof(float), &dpartial));
    ASSERT_TRUE(copy_and_wait(dx.get(), x.data(), x.size() * sizeof(float), stream_));
    void* px = dx.get();
    void* pp = dpartial.get();
    uint32_t n = c.n;
    const tsr_kernel_arg args[] = {{&px, sizeof px}, {&pp, sizeof pp}, {&n, sizeof n}};
    const tsr_launch_config config = config_1d(c.grid, c.block, 4 * c.block);
    CTS_ASSERT_OK(api().launch(stream_.get(), function, &config, args, 3));
    std::vector<float> partial(c.grid);
    ASSERT_TRUE(copy_and_wait(partial.data(), dpartial.get(), c.grid * sizeof(float), stream_));
    const uint32_t chunk = (c.n + c.grid - 1) / c.grid;
    for (uint32_t b = 0; b < c.grid; ++b) {
      float expected = 0;
      for (uint64_t i = uint64_t(b) * chunk; i < std::min<uint64_t>(c.n, uint64_t(b + 1) * chunk);
           ++i) {
        expected += x[i];
      }
      EXPECT_EQ(partial[b], expected) << "partial[" << b << "]";
    }
  }
}

CTS_TEST(Module, RefusesAWrongArgumentCountOrSizeNamingTheKernelAndArgument, CTS_MODULE_ENTRIES) {
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
  DeviceMemory dc;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 256 * sizeof(float), &dc));
  const std::vector<float> sentinel(256, -1.0f);
  ASSERT_TRUE(copy_and_wait(dc.get(), sentinel.data(), 256 * sizeof(float), stream_));
  void* p = dc.get();
  uint32_t n = 256;
  uint64_t wide_n = 256;
  const tsr_launch_config config = config_1d(1, kBlock);
  const tsr_kernel_arg good[] = {{&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&n, sizeof n}};
  const tsr_kernel_arg five[] = {
      {&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&n, sizeof n}, {&n, sizeof n}};
  const tsr_kernel_arg wide[] = {
      {&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&wide_n, sizeof wide_n}};
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(stream_.get(), function, &config, good, 3));
  EXPECT_TRUE(contains(last_error(), kVectorAdd)) << last_error();
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(stream_.get(), function, &config, five, 5));
  EXPECT_TRUE(contains(last_error(), kVectorAdd)) << last_error();
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(stream_.get(), function, &config, wide, 4));
  EXPECT_TRUE(contains(last_error(), kVectorAdd)) << last_error();
  EXPECT_TRUE(contains(last_error(), "argument 3")) << last_error();
  // Nothing was enqueued: the stream is fine and the output untouched.
  CTS_EXPECT_OK(stream_.synchronize());
  std::vector<float> out(256);
  ASSERT_TRUE(copy_and_wait(out.data(), dc.get(), 256 * sizeof(float), stream_));
  EXPECT_EQ(out, sentinel);
}

CTS_TEST(Module, RefusesGarbageAndTruncatedImagesNamingThem, CTS_MODULE_ENTRIES) {
  std::vector<uint8_t> garbage = make_pattern(4096, 16);
  if (image_.format == TSR_MODULE_CUDA_PTX) garbage.back() = 0;  // text must end; still not PTX
  tsr_module module = reinterpret_cast<tsr_module>(uintptr_t(0x5a5a));
  CTS_EXPECT_STATUS(
      TSR_INVALID_ARGUMENT,
      api().module_load(0, image_.format, garbage.data(), garbage.size(), "garbage.bin", &module));
  EXPECT_TRUE(contains(last_error(), "garbage.bin")) << last_error();
  EXPECT_EQ(module, reinterpret_cast<tsr_module>(uintptr_t(0x5a5a))) << "output written";

  std::vector<uint8_t> truncated(image_.bytes.begin(),
                                 image_.bytes.begin() + std::ptrdiff_t(image_.bytes.size() / 2));
  if (image_.format == TSR_MODULE_CUDA_PTX) truncated.push_back(0);
  const std::string name = "truncated-" + image_.file;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().module_load(0, image_.format, truncated.data(), truncated.size(),
                                      name.c_str(), &module));
  EXPECT_TRUE(contains(last_error(), name)) << last_error();
  EXPECT_EQ(module, reinterpret_cast<tsr_module>(uintptr_t(0x5a5a))) << "output written";
}

CTS_TEST(Module, ReportsAnUnknownKernelAsNotFoundNamingIt, CTS_MODULE_ENTRIES) {
  OwnedModule module;
  CTS_ASSERT_OK(module.load(0, image_));
  tsr_function function = nullptr;
  CTS_EXPECT_STATUS(TSR_NOT_FOUND,
                    api().module_get_function(module.get(), "tsr_cts_no_such_kernel", &function));
  EXPECT_TRUE(contains(last_error(), "tsr_cts_no_such_kernel")) << last_error();
  EXPECT_EQ(function, nullptr);
}

CTS_TEST(Module, RefusesZeroDimensionsAndTooManyThreadsPerBlock, CTS_MODULE_ENTRIES) {
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
  DeviceMemory dc;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &dc));
  void* p = dc.get();
  uint32_t n = 1;
  const tsr_kernel_arg args[] = {{&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&n, sizeof n}};
  struct Bad {
    const char* what;
    tsr_dim3 grid, block;
  };
  for (const Bad& bad :
       {Bad{"grid.x 0", {0, 1, 1}, {32, 1, 1}}, Bad{"grid.y 0", {1, 0, 1}, {32, 1, 1}},
        Bad{"grid.z 0", {1, 1, 0}, {32, 1, 1}}, Bad{"block.x 0", {1, 1, 1}, {0, 1, 1}},
        Bad{"block.z 0", {1, 1, 1}, {32, 1, 0}}, Bad{"1025 threads", {1, 1, 1}, {1025, 1, 1}},
        Bad{"32x32x2 threads", {1, 1, 1}, {32, 32, 2}}}) {
    SCOPED_TRACE(bad.what);
    tsr_launch_config config = config_1d(1, 1);
    config.grid = bad.grid;
    config.block = bad.block;
    CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                      api().launch(stream_.get(), function, &config, args, 4));
  }
  CTS_EXPECT_OK(stream_.synchronize());
}

CTS_TEST(Module, RefusesAFormatTheDeviceDoesNotTake, CTS_MODULE_ENTRIES) {
  int32_t other = 0;
  for (int32_t f = 1; f < TSR_MODULE_FORMAT_COUNT && other == 0; ++f) {
    if ((formats_ & (1u << f)) == 0) other = f;
  }
  if (other == 0) GTEST_SKIP() << "device 0 takes every format";
  tsr_module module = nullptr;
  CTS_EXPECT_STATUS(TSR_UNIMPLEMENTED, api().module_load(0, other, image_.bytes.data(),
                                                         image_.bytes.size(), "other", &module));
  EXPECT_EQ(module, nullptr);
}

CTS_TEST(Module, RefusesNullArguments, CTS_MODULE_ENTRIES) {
  tsr_module out = nullptr;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().module_load(0, image_.format, nullptr, 16, "null", &out));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().module_load(0, image_.format, image_.bytes.data(), image_.bytes.size(),
                                      image_.file.c_str(), nullptr));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().module_load(-1, image_.format, image_.bytes.data(),
                                                            image_.bytes.size(), "x", &out));
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
  tsr_function other = nullptr;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().module_get_function(module.get(), nullptr, &other));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().module_get_function(module.get(), kVectorAdd, nullptr));
  const tsr_launch_config config = config_1d(1, 1);
  uint32_t n = 0;
  void* p = nullptr;
  const tsr_kernel_arg args[] = {{&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&n, sizeof n}};
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(stream_.get(), function, nullptr, args, 4));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(stream_.get(), nullptr, &config, args, 4));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(nullptr, function, &config, args, 4));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().launch(stream_.get(), function, &config, nullptr, 4));
  CTS_EXPECT_OK(stream_.synchronize());
}

CTS_TEST(Module, LoadsAndUnloadsRepeatedlyWithSeveralLoadedAtOnce, CTS_MODULE_ENTRIES) {
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    OwnedModule module;
    tsr_function function = nullptr;
    ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
    ASSERT_NO_FATAL_FAILURE(check_vector_add(function, 300));
  }
  // Two copies loaded, the first unloaded, a third loaded: the second and third both still run
  // (an implementation that keys images by a reused name or descriptor would mix them up).
  OwnedModule first, second, third;
  tsr_function f1 = nullptr, f2 = nullptr, f3 = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&first, kVectorAdd, &f1));
  ASSERT_NO_FATAL_FAILURE(load_function(&second, kVectorAdd, &f2));
  first.reset();
  ASSERT_NO_FATAL_FAILURE(load_function(&third, kBlockSum, &f3));
  ASSERT_NO_FATAL_FAILURE(check_vector_add(f2, 513));
  tsr_function add_in_third = nullptr;
  CTS_ASSERT_OK(api().module_get_function(third.get(), kVectorAdd, &add_in_third));
  ASSERT_NO_FATAL_FAILURE(check_vector_add(add_in_third, 77));
}

CTS_TEST(Module, RefusesAStreamOfAnotherDevice, CTS_MODULE_ENTRIES) {
  if (context().device_count < 2) GTEST_SKIP() << "needs 2 devices";
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, kVectorAdd, &function));
  OwnedStream other;
  CTS_ASSERT_OK(OwnedStream::create(1, &other));
  void* p = nullptr;
  uint32_t n = 0;
  const tsr_kernel_arg args[] = {{&p, sizeof p}, {&p, sizeof p}, {&p, sizeof p}, {&n, sizeof n}};
  const tsr_launch_config config = config_1d(1, 1);
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().launch(other.get(), function, &config, args, 4));
  CTS_EXPECT_OK(other.synchronize());
}

// Host format only: a GPU kernel cannot return a status, a host kernel can (tsr_cts_fail).
CTS_TEST(Module, FailsTheStreamStickilyWithTheKernelsMessage, CTS_MODULE_ENTRIES) {
  if (image_.format != TSR_MODULE_HOST_ELF) {
    GTEST_SKIP() << "only host-format kernels return a status (the image is " << image_.file << ")";
  }
  OwnedModule module;
  tsr_function function = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_function(&module, "tsr_cts_fail", &function));
  DeviceMemory dst;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 64, &dst));
  std::vector<uint8_t> zeros(64, 0), ones(64, 1);
  ASSERT_TRUE(copy_and_wait(dst.get(), zeros.data(), 64, stream_));
  const tsr_launch_config config = config_1d(2, 1);
  CTS_ASSERT_OK(api().launch(stream_.get(), function, &config, nullptr, 0));
  CTS_ASSERT_OK(api().memcpy_async(dst.get(), ones.data(), 64, stream_.get()));
  const tsr_status status = stream_.synchronize();
  EXPECT_NE(status, TSR_OK);
  EXPECT_TRUE(contains(last_error(), "tsr_cts_fail: failing on purpose")) << last_error();
  EXPECT_NE(stream_.synchronize(), TSR_OK) << "the failure must be sticky";
  OwnedStream reader;
  CTS_ASSERT_OK(OwnedStream::create(0, &reader));
  std::vector<uint8_t> out(64, 9);
  ASSERT_TRUE(copy_and_wait(out.data(), dst.get(), 64, reader));
  EXPECT_EQ(out, zeros) << "work after the failed kernel must be skipped";
}

}  // namespace
}  // namespace tessera::cts
