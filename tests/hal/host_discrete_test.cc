// The host backend's configuration (TESSERA_HOST_DEVICES=N[:discrete], discrete=,
// callback_threads=) and its discrete mode, through the raw function table: device memory the CPU
// cannot touch still moves, reduces, casts and multiplies correctly, kernels refuse host
// operands naming the argument, host_register is refused, and outside discrete mode the same
// calls behave as before. (That a CPU load from a discrete device pointer dies is the CTS's
// Memory.KillsAHostLoadOrStoreThroughADevicePointerWithoutHostAccess, run by cts.host.discrete.)
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tessera/hal/backend.h"

namespace tessera::hal {
namespace {

// Sets an environment variable for one scope (tests run one per process under ctest, but also
// all in one process when the binary is run by hand).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) {
      old_ = old;
      had_ = true;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::shared_ptr<Backend> open_host() {
  auto opened = Backend::open("host", {TESSERA_BUILD_BACKEND_DIR});
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  return opened.ok() ? *opened : nullptr;
}

uint64_t capabilities(const Backend& backend, int32_t device) {
  tsr_device_properties p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(backend.api().device_properties(device, &p), TSR_OK);
  return p.capabilities;
}

// ---- configuration ---------------------------------------------------------------------------

TEST(HostConfig, ReadsTheDiscreteFormOfTesseraHostDevices) {
  ScopedEnv env("TESSERA_HOST_DEVICES", "2:discrete");
  auto backend = open_host();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->init("").ok());
  ASSERT_EQ(backend->device_count(), 2);
  for (int32_t d = 0; d < 2; ++d) {
    const uint64_t caps = capabilities(*backend, d);
    EXPECT_EQ(caps & TSR_CAP_HOST_ACCESSIBLE, 0u) << "device " << d;
    EXPECT_EQ(caps & TSR_CAP_HOST_REGISTER, 0u) << "device " << d;
    EXPECT_NE(caps & TSR_CAP_IPC, 0u) << "IPC works in discrete mode too";
  }
}

TEST(HostConfig, IsHostAccessibleOutsideDiscreteMode) {
  auto backend = open_host();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->init("devices=1;discrete=0").ok());
  const uint64_t caps = capabilities(*backend, 0);
  EXPECT_NE(caps & TSR_CAP_HOST_ACCESSIBLE, 0u);
  EXPECT_NE(caps & TSR_CAP_HOST_REGISTER, 0u);
}

TEST(HostConfig, ReadsTheDiscreteOption) {
  auto backend = open_host();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->init("devices=3;discrete=1").ok());
  ASSERT_EQ(backend->device_count(), 3);
  EXPECT_EQ(capabilities(*backend, 2) & TSR_CAP_HOST_ACCESSIBLE, 0u);
}

TEST(HostConfig, LetsTheOptionTurnDiscreteModeOff) {
  ScopedEnv env("TESSERA_HOST_DEVICES", "2:discrete");
  auto backend = open_host();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->init("discrete=0").ok());
  EXPECT_NE(capabilities(*backend, 0) & TSR_CAP_HOST_ACCESSIBLE, 0u);
}

// Fails init with INVALID_ARGUMENT whose message contains every string of `expected`.
void expect_init_refused(const std::string& options, std::vector<std::string> expected) {
  auto backend = open_host();
  ASSERT_NE(backend, nullptr);
  Status status = backend->init(options);
  ASSERT_FALSE(status.ok()) << "init('" << options << "') succeeded";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  for (const std::string& text : expected) {
    EXPECT_NE(status.message().find(text), std::string::npos)
        << "'" << status.message() << "' does not mention '" << text << "'";
  }
}

uint64_t total_memory(const Backend& backend, int32_t device) {
  tsr_device_properties p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(backend.api().device_properties(device, &p), TSR_OK);
  return p.total_memory;
}

// A host device holds what this process can really use, not the machine's RAM: in a 3 GiB cgroup
// (v2) with 1 GiB in use on a machine with 20 GiB available, 2 GiB; an explicit size still wins.
// The probe reads a sample tree (init option memory_probe_root), not the real machine.
TEST(HostConfig, DefaultCapacityIsTheRamTheProcessCanUseUnderItsCgroupLimit) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::path(::testing::TempDir()) / ("host_probe_root_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  write("proc/meminfo", "MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n");
  write("proc/self/cgroup", "0::/job\n");
  write("sys/fs/cgroup/job/memory.max", std::to_string(uint64_t(3) << 30) + "\n");
  write("sys/fs/cgroup/job/memory.current", std::to_string(uint64_t(1) << 30) + "\n");
  {
    auto backend = open_host();
    ASSERT_NE(backend, nullptr);
    ASSERT_TRUE(backend->init("devices=2;memory_probe_root=" + root.string()).ok());
    EXPECT_EQ(total_memory(*backend, 0), uint64_t(2) << 30);
    EXPECT_EQ(total_memory(*backend, 1), uint64_t(2) << 30);
    size_t free = 0, total = 0;
    ASSERT_EQ(backend->api().memory_info(0, &free, &total), TSR_OK);
    EXPECT_EQ(total, size_t(2) << 30);
  }
  {
    auto backend = open_host();
    ASSERT_NE(backend, nullptr);
    ASSERT_TRUE(backend->init("memory=8G;memory_probe_root=" + root.string()).ok());
    EXPECT_EQ(total_memory(*backend, 0), uint64_t(8) << 30) << "an explicit size is kept";
  }
  fs::remove_all(root);
}

TEST(HostConfig, RefusesAnUnknownModeInTesseraHostDevices) {
  ScopedEnv env("TESSERA_HOST_DEVICES", "2:weird");
  expect_init_refused("", {"TESSERA_HOST_DEVICES", "weird", "N:discrete"});
}

TEST(HostConfig, RefusesABadDeviceCountBeforeTheMode) {
  ScopedEnv env("TESSERA_HOST_DEVICES", "two:discrete");
  expect_init_refused("", {"TESSERA_HOST_DEVICES", "not a device count"});
}

TEST(HostConfig, RefusesADiscreteOptionThatIsNotAFlag) {
  expect_init_refused("discrete=maybe", {"option discrete", "maybe"});
}

TEST(HostConfig, RefusesACallbackThreadCountOtherThanZeroOrOne) {
  expect_init_refused("callback_threads=2", {"option callback_threads", "'2'"});
  ScopedEnv env("TESSERA_HOST_CALLBACK_THREADS", "many");
  expect_init_refused("", {"TESSERA_HOST_CALLBACK_THREADS", "many"});
}

// ---- discrete mode ---------------------------------------------------------------------------

// A backend with two devices, in discrete mode or not, and a stream on device 0.
class HostMemoryModel : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    backend_ = open_host();
    ASSERT_NE(backend_, nullptr);
    Status status = backend_->init(discrete() ? "devices=2;discrete=1" : "devices=2;discrete=0");
    ASSERT_TRUE(status.ok()) << status.to_string();
    ASSERT_EQ(api().stream_create(0, 0, &stream_), TSR_OK) << api().last_error();
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(api().stream_destroy(stream_), TSR_OK);
    }
    for (void* ptr : device_) EXPECT_EQ(api().device_free(0, ptr), TSR_OK) << api().last_error();
    for (void* ptr : pinned_) EXPECT_EQ(api().host_free_pinned(ptr), TSR_OK);
  }

  bool discrete() const { return GetParam(); }
  const tsr_backend_api_v1& api() const { return backend_->api(); }

  void* device(size_t bytes) {
    void* ptr = nullptr;
    EXPECT_EQ(api().device_malloc(0, bytes, &ptr), TSR_OK) << api().last_error();
    if (ptr != nullptr) device_.push_back(ptr);
    return ptr;
  }
  void* pinned(size_t bytes) {
    void* ptr = nullptr;
    EXPECT_EQ(api().host_malloc_pinned(bytes, &ptr), TSR_OK) << api().last_error();
    if (ptr != nullptr) pinned_.push_back(ptr);
    return ptr;
  }
  void upload(void* dst, const void* src, size_t bytes) {
    ASSERT_EQ(api().memcpy_async(dst, src, bytes, stream_), TSR_OK) << api().last_error();
  }
  template <typename T>
  std::vector<T> download(const void* src, size_t count) {
    std::vector<T> out(count);
    EXPECT_EQ(api().memcpy_async(out.data(), src, count * sizeof(T), stream_), TSR_OK)
        << api().last_error();
    EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
    return out;
  }

  // In discrete mode: `status` is INVALID_ARGUMENT and the message contains `text` and says
  // kernels take device memory. Otherwise: `status` is OK.
  void expect_refused_only_when_discrete(tsr_status status, const std::string& text) {
    if (!discrete()) {
      EXPECT_EQ(status, TSR_OK) << api().last_error();
      return;
    }
    EXPECT_EQ(status, TSR_INVALID_ARGUMENT);
    const std::string message = api().last_error();
    EXPECT_NE(message.find(text), std::string::npos) << "'" << message << "'";
    EXPECT_NE(message.find("in discrete mode kernels take device memory only"), std::string::npos)
        << "'" << message << "'";
  }

  std::shared_ptr<Backend> backend_;
  tsr_stream stream_ = nullptr;
  std::vector<void*> device_, pinned_;
};

TEST_P(HostMemoryModel, CopiesBetweenEveryKindOfMemory) {
  constexpr size_t kBytes = 10000;
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = uint8_t(i * 7 + 3);
  uint8_t* a = static_cast<uint8_t*>(device(kBytes));
  uint8_t* b = static_cast<uint8_t*>(device(kBytes));
  uint8_t* host = static_cast<uint8_t*>(pinned(kBytes));
  ASSERT_TRUE(a && b && host);
  upload(a, pattern.data(), kBytes);                                 // pageable -> device
  ASSERT_EQ(api().memcpy_async(b, a, kBytes, stream_), TSR_OK);      // device -> device
  ASSERT_EQ(api().memcpy_async(b + 1, b, 100, stream_), TSR_OK);     // overlapping
  ASSERT_EQ(api().memcpy_async(host, b, kBytes, stream_), TSR_OK);   // device -> pinned
  ASSERT_EQ(api().memset_async(a + 10, 0xee, 20, stream_), TSR_OK);  // memset on device
  ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
  std::vector<uint8_t> expected = pattern;
  std::memmove(expected.data() + 1, expected.data(), 100);
  EXPECT_EQ(std::memcmp(host, expected.data(), kBytes), 0);
  std::vector<uint8_t> seen = download<uint8_t>(a, kBytes);
  expected = pattern;
  std::memset(expected.data() + 10, 0xee, 20);
  EXPECT_EQ(seen, expected);

  // Peer copy to device 1 and back.
  void* peer = nullptr;
  ASSERT_EQ(api().device_malloc(1, kBytes, &peer), TSR_OK);
  ASSERT_EQ(api().memcpy_peer_async(peer, 1, b, 0, kBytes, stream_), TSR_OK) << api().last_error();
  ASSERT_EQ(api().memcpy_peer_async(a, 0, peer, 1, kBytes, stream_), TSR_OK) << api().last_error();
  seen = download<uint8_t>(a, kBytes);
  EXPECT_EQ(api().device_free(1, peer), TSR_OK);
  expected = pattern;
  std::memmove(expected.data() + 1, expected.data(), 100);
  EXPECT_EQ(seen, expected);
}

TEST_P(HostMemoryModel, RunsKernelsOnDeviceMemory) {
  constexpr size_t kCount = 1000;
  std::vector<float> x(kCount), y(kCount);
  for (size_t i = 0; i < kCount; ++i) x[i] = float(i), y[i] = 0.5f * float(i);
  auto* dx = static_cast<float*>(device(kCount * sizeof(float)));
  auto* dy = static_cast<float*>(device(kCount * sizeof(float)));
  auto* dsum = static_cast<float*>(device(kCount * sizeof(float)));
  auto* dhalf = static_cast<uint16_t*>(device(kCount * sizeof(uint16_t)));
  ASSERT_TRUE(dx && dy && dsum && dhalf);
  upload(dx, x.data(), kCount * sizeof(float));
  upload(dy, y.data(), kCount * sizeof(float));
  const void* srcs[2] = {dx, dy};
  ASSERT_EQ(api().reduce_async(dsum, srcs, 2, kCount, TSR_DTYPE_F32, TSR_REDUCE_SUM, stream_),
            TSR_OK)
      << api().last_error();
  const void* in_place[2] = {dsum, dx};  // dst == srcs[0]
  ASSERT_EQ(api().reduce_async(dsum, in_place, 2, kCount, TSR_DTYPE_F32, TSR_REDUCE_SUM, stream_),
            TSR_OK)
      << api().last_error();
  ASSERT_EQ(api().cast_async(dhalf, TSR_DTYPE_BF16, dsum, TSR_DTYPE_F32, kCount, stream_), TSR_OK)
      << api().last_error();
  std::vector<float> sum = download<float>(dsum, kCount);
  std::vector<uint16_t> half = download<uint16_t>(dhalf, kCount);
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(sum[i], 2.5f * float(i)) << "element " << i;
    uint32_t bits;
    std::memcpy(&bits, &sum[i], 4);
    const uint32_t nearest_even = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;  // finite values
    ASSERT_EQ(half[i], uint16_t(nearest_even)) << "element " << i;
  }

  // C (2x2) = A (2x3) * B (3x2), column-major, all in device memory.
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 1, 0, 1, 1};
  auto* da = device(sizeof a);
  auto* db = device(sizeof b);
  auto* dc = device(4 * sizeof(float));
  upload(da, a, sizeof a);
  upload(db, b, sizeof b);
  tsr_gemm_desc desc{};
  desc.struct_size = sizeof desc;
  desc.m = 2, desc.n = 2, desc.k = 3;
  desc.alpha = 1.0, desc.beta = 0.0;
  desc.a = da, desc.lda = 2, desc.b = db, desc.ldb = 3, desc.c = dc, desc.ldc = 2;
  desc.dtype_ab = TSR_DTYPE_F32, desc.dtype_c = TSR_DTYPE_F32;
  ASSERT_EQ(api().gemm_async(&desc, stream_), TSR_OK) << api().last_error();
  // A = [1 3 5; 2 4 6], B = [1 0; 0 1; 1 1]: C = [6 8; 8 10].
  EXPECT_EQ(download<float>(dc, 4), (std::vector<float>{6, 8, 8, 10}));
}

TEST_P(HostMemoryModel, RefusesHostOperandsInKernelsOnlyInDiscreteMode) {
  constexpr size_t kCount = 256, kBytes = kCount * sizeof(float);
  void* d0 = device(kBytes);
  void* d1 = device(kBytes);
  void* host = pinned(kBytes);
  std::vector<float> pageable(kCount, 1.0f);
  ASSERT_TRUE(d0 && d1 && host);
  ASSERT_EQ(api().memset_async(d0, 0, kBytes, stream_), TSR_OK);
  ASSERT_EQ(api().memset_async(d1, 0, kBytes, stream_), TSR_OK);
  std::memset(host, 0, kBytes);

  const void* pinned_second[2] = {d0, host};
  expect_refused_only_when_discrete(
      api().reduce_async(d1, pinned_second, 2, kCount, TSR_DTYPE_F32, TSR_REDUCE_SUM, stream_),
      "reduce_async: srcs[1] is pinned host memory");
  const void* both_device[2] = {d0, d1};
  expect_refused_only_when_discrete(api().reduce_async(pageable.data(), both_device, 2, kCount,
                                                       TSR_DTYPE_F32, TSR_REDUCE_SUM, stream_),
                                    "reduce_async: dst");
  expect_refused_only_when_discrete(
      api().cast_async(d1, TSR_DTYPE_F32, host, TSR_DTYPE_F32, kCount, stream_),
      "cast_async: src is pinned host memory");
  expect_refused_only_when_discrete(api().memset_async(host, 1, kBytes, stream_),
                                    "memset_async: dst is pinned host memory");
  expect_refused_only_when_discrete(api().memset_async(pageable.data(), 0, kBytes, stream_),
                                    "pageable");
  tsr_gemm_desc desc{};
  desc.struct_size = sizeof desc;
  desc.m = desc.n = desc.k = 8;
  desc.alpha = 1.0;
  desc.a = d0, desc.b = host, desc.c = d1;
  desc.lda = desc.ldb = desc.ldc = 8;
  desc.dtype_ab = desc.dtype_c = TSR_DTYPE_F32;
  expect_refused_only_when_discrete(api().gemm_async(&desc, stream_),
                                    "gemm_async: b is pinned host memory");
  // Copies take host memory on either side in both modes.
  EXPECT_EQ(api().memcpy_async(host, d0, kBytes, stream_), TSR_OK) << api().last_error();
  EXPECT_EQ(api().memcpy_async(d0, pageable.data(), kBytes, stream_), TSR_OK);
  EXPECT_EQ(api().memcpy_peer_async(host, 1, d0, 0, kBytes, stream_), TSR_OK);
  EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK) << api().last_error();
}

TEST_P(HostMemoryModel, RefusesHostRegisterOnlyInDiscreteMode) {
  std::vector<uint8_t> memory(1 << 16);
  const tsr_status status = api().host_register(memory.data(), memory.size());
  if (!discrete()) {
    ASSERT_EQ(status, TSR_OK) << api().last_error();
    EXPECT_EQ(api().host_unregister(memory.data()), TSR_OK);
    return;
  }
  EXPECT_EQ(status, TSR_UNIMPLEMENTED);
  EXPECT_NE(std::string(api().last_error()).find("registered host memory is not device memory"),
            std::string::npos)
      << api().last_error();
}

TEST_P(HostMemoryModel, DescribesDiscretePointersAsDeviceMemory) {
  void* d = device(100);
  void* host = pinned(100);
  tsr_pointer_attributes attributes{};
  attributes.struct_size = sizeof attributes;
  ASSERT_EQ(api().pointer_attributes(static_cast<char*>(d) + 10, &attributes), TSR_OK);
  EXPECT_EQ(attributes.type, TSR_MEMORY_DEVICE);
  EXPECT_EQ(attributes.base, d) << "the caller's pointer, never the backend's second mapping";
  ASSERT_EQ(api().pointer_attributes(host, &attributes), TSR_OK);
  EXPECT_EQ(attributes.type, TSR_MEMORY_HOST_PINNED);
}

// The rest of the last page of a discrete allocation is mapped but is not the caller's: a copy
// from there is refused rather than faulting on the stream's thread. Outside discrete mode the
// backend keeps its old leniency (the bytes are ordinary memory it does not police).
TEST_P(HostMemoryModel, RefusesACopyFromPastTheEndOfADiscreteAllocation) {
  auto* d = static_cast<uint8_t*>(device(100));
  uint8_t out[16];
  const tsr_status status = api().memcpy_async(out, d + 200, sizeof out, stream_);
  if (!discrete()) {
    EXPECT_EQ(status, TSR_OK) << api().last_error();
  } else {
    EXPECT_EQ(status, TSR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(api().last_error()).find("memcpy_async: src"), std::string::npos)
        << api().last_error();
    EXPECT_NE(std::string(api().last_error()).find("past the end of its 100-byte"),
              std::string::npos)
        << api().last_error();
  }
  EXPECT_EQ(api().stream_synchronize(stream_), TSR_OK);
}

// An IPC mapping (opened here in the same process, as a second process would) is device memory
// too: copies and kernels reach it through the backend's own mapping.
TEST_P(HostMemoryModel, UsesIpcMappingsLikeDeviceMemory) {
  constexpr size_t kCount = 64;
  std::vector<int32_t> values(kCount);
  for (size_t i = 0; i < kCount; ++i) values[i] = int32_t(i) - 20;
  void* exported = device(kCount * sizeof(int32_t));
  void* sum = device(kCount * sizeof(int32_t));
  upload(exported, values.data(), kCount * sizeof(int32_t));
  ASSERT_EQ(api().stream_synchronize(stream_), TSR_OK);
  tsr_ipc_handle handle{};
  ASSERT_EQ(api().ipc_get_handle(exported, &handle), TSR_OK) << api().last_error();
  void* opened = nullptr;
  ASSERT_EQ(api().ipc_open_handle(1, &handle, &opened), TSR_OK) << api().last_error();
  ASSERT_NE(opened, exported);
  const void* srcs[2] = {opened, exported};
  ASSERT_EQ(api().reduce_async(sum, srcs, 2, kCount, TSR_DTYPE_I32, TSR_REDUCE_SUM, stream_),
            TSR_OK)
      << api().last_error();
  std::vector<int32_t> seen = download<int32_t>(sum, kCount);
  std::vector<int32_t> via_ipc = download<int32_t>(opened, kCount);
  EXPECT_EQ(api().ipc_close_handle(opened), TSR_OK) << api().last_error();
  EXPECT_EQ(via_ipc, values);
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(seen[i], 2 * values[i]) << "element " << i;
}

std::string mode_name(const ::testing::TestParamInfo<bool>& param) {
  return param.param ? "Discrete" : "Addressable";
}

INSTANTIATE_TEST_SUITE_P(HostBackend, HostMemoryModel, ::testing::Bool(), mode_name);

}  // namespace
}  // namespace tessera::hal
