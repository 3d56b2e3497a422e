// Device and pinned host memory, host registration, memory info and pointer attributes; on a
// device whose memory the CPU cannot address, that a host load or store through it dies.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Memory : public DeviceTest {};

void* const kUntouched = reinterpret_cast<void*>(uintptr_t{0x7e57});  // "outputs written on OK"

// TSR_CAP_* of device 0, where the single-device memory tests run.
uint64_t device0_capabilities() {
  tsr_device_properties p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(api().device_properties(0, &p), TSR_OK);
  return p.capabilities;
}

const size_t kSizes[] = {1, 2, 3, 255, 256, 257, 4095, 4096, 4097, 65537, 1 << 20, (1 << 20) + 1};

TEST_F(Memory, AllocatesEverySizeAlignedTo256BytesOnEveryDevice) {
  for (int32_t d = 0; d < context().device_count; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    OwnedStream stream;
    CTS_ASSERT_OK(OwnedStream::create(d, &stream));
    std::vector<DeviceMemory> blocks(std::size(kSizes));
    for (size_t i = 0; i < blocks.size(); ++i) {
      CTS_ASSERT_OK(DeviceMemory::allocate(d, kSizes[i], &blocks[i]));
      ASSERT_NE(blocks[i].get(), nullptr) << kSizes[i] << " bytes";
      EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[i].get()) % 256, 0u)
          << kSizes[i] << " bytes at " << static_cast<void*>(blocks[i].get());
      // Distinct fill values: overlapping blocks would overwrite each other.
      CTS_ASSERT_OK(api().memset_async(blocks[i].get(), static_cast<int32_t>(i + 1), kSizes[i],
                                       stream.get()));
    }
    CTS_ASSERT_OK(stream.synchronize());
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::vector<uint8_t> seen(kSizes[i]);
      ASSERT_TRUE(copy_and_wait(seen.data(), blocks[i].get(), kSizes[i], stream));
      EXPECT_TRUE(all_bytes_are(seen.data(), seen.size(), static_cast<uint8_t>(i + 1)))
          << "block of " << kSizes[i] << " bytes";
    }
  }
}

TEST_F(Memory, ReturnsNullForAZeroByteAllocation) {
  void* ptr = kUntouched;
  CTS_ASSERT_OK(api().device_malloc(0, 0, &ptr));
  EXPECT_EQ(ptr, nullptr);
  CTS_EXPECT_OK(api().device_free(0, nullptr));
}

TEST_F(Memory, ReportsTotalMemoryEqualToTheDeviceProperties) {
  for (int32_t d = 0; d < context().device_count; ++d) {
    tsr_device_properties p{};
    p.struct_size = sizeof p;
    CTS_ASSERT_OK(api().device_properties(d, &p));
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    CTS_ASSERT_OK(api().memory_info(d, &free_bytes, &total_bytes));
    EXPECT_EQ(total_bytes, p.total_memory) << "device " << d;
    EXPECT_LE(free_bytes, total_bytes) << "device " << d;
  }
}

TEST_F(Memory, ShrinksFreeMemoryByAtLeastAnAllocation) {
  // Exact on a device used by this process alone; another process freeing memory at the same
  // moment could make it flaky on a shared GPU.
  size_t free_before = 0;
  size_t total = 0;
  CTS_ASSERT_OK(api().memory_info(0, &free_before, &total));
  const size_t bytes = std::min<size_t>(64u << 20, free_before / 4);
  ASSERT_GT(bytes, 0u) << "device 0 has no free memory";
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, bytes, &block));
  size_t free_after = 0;
  size_t total_after = 0;
  CTS_ASSERT_OK(api().memory_info(0, &free_after, &total_after));
  EXPECT_EQ(total_after, total);
  EXPECT_LE(free_after + bytes, free_before)
      << "free went from " << free_before << " to " << free_after << " after allocating " << bytes
      << " bytes";
}

TEST_F(Memory, RefusesAnAllocationBeyondCapacityAndKeepsWorking) {
  size_t free_bytes = 0;
  size_t total = 0;
  CTS_ASSERT_OK(api().memory_info(0, &free_bytes, &total));
  for (size_t bytes : {total + 1, SIZE_MAX / 2, SIZE_MAX}) {
    void* ptr = kUntouched;
    CTS_EXPECT_STATUS(TSR_RESOURCE_EXHAUSTED, api().device_malloc(0, bytes, &ptr))
        << bytes << " bytes";
    EXPECT_EQ(ptr, kUntouched) << "outputs are written only on TSR_OK";
  }
  // Still usable afterwards.
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 1 << 20, &block));
  CTS_ASSERT_OK(api().memset_async(block.get(), 0x3c, block.size(), stream.get()));
  std::vector<uint8_t> seen(block.size());
  ASSERT_TRUE(copy_and_wait(seen.data(), block.get(), seen.size(), stream));
  EXPECT_TRUE(all_bytes_are(seen.data(), seen.size(), 0x3c));
}

TEST_F(Memory, RejectsFreeingAPointerItDidNotAllocate) {
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  int on_stack = 0;
  auto on_heap = std::make_unique<uint8_t[]>(64);
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_free(0, &on_stack));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_free(0, on_heap.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_free(0, block.get() + 256));
  // The real allocation is unharmed and frees normally (in ~DeviceMemory).
}

TEST_F(Memory, AllocatesPinnedHostMemoryForCopies) {
  const size_t bytes = (1 << 20) + 1;
  PinnedMemory pinned;
  CTS_ASSERT_OK(PinnedMemory::allocate(bytes, &pinned));
  ASSERT_NE(pinned.get(), nullptr);
  const auto pattern = make_pattern(bytes, 1);
  std::memcpy(pinned.get(), pattern.data(), bytes);  // the CPU may use it directly
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, bytes, &block));
  ASSERT_TRUE(copy_and_wait(block.get(), pinned.get(), bytes, stream));
  std::memset(pinned.get(), 0, bytes);
  ASSERT_TRUE(copy_and_wait(pinned.get(), block.get(), bytes, stream));
  EXPECT_TRUE(same_bytes(pattern.data(), pinned.get(), bytes));
}

CTS_TEST(Memory, RegistersHostMemoryForAsyncCopies, "host_register", "host_unregister") {
  if ((device0_capabilities() & TSR_CAP_HOST_REGISTER) == 0) {
    GTEST_SKIP() << "device 0 does not advertise TSR_CAP_HOST_REGISTER "
                    "(Memory.RefusesHostRegisterWithoutTheCapability checks the refusal)";
  }
  const size_t bytes = 1 << 20;
  std::unique_ptr<uint8_t, decltype(&std::free)> host(
      static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)), &std::free);
  ASSERT_NE(host, nullptr);
  const auto pattern = make_pattern(bytes, 2);
  std::memcpy(host.get(), pattern.data(), bytes);
  CTS_ASSERT_OK(api().host_register(host.get(), bytes));
  if (has_entry("pointer_attributes")) {
    tsr_pointer_attributes a{};
    a.struct_size = sizeof a;
    CTS_EXPECT_OK(api().pointer_attributes(host.get() + 100, &a));
    EXPECT_EQ(a.type, TSR_MEMORY_HOST_PINNED) << "registered memory";
  }
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, bytes, &block));
  EXPECT_TRUE(copy_and_wait(block.get(), host.get(), bytes, stream));
  std::memset(host.get(), 0, bytes);
  EXPECT_TRUE(copy_and_wait(host.get(), block.get(), bytes, stream));
  EXPECT_TRUE(same_bytes(pattern.data(), host.get(), bytes));
  CTS_EXPECT_OK(api().host_unregister(host.get()));
  if (has_entry("pointer_attributes")) {
    tsr_pointer_attributes a{};
    a.struct_size = sizeof a;
    CTS_EXPECT_OK(api().pointer_attributes(host.get(), &a));
    EXPECT_EQ(a.type, TSR_MEMORY_UNKNOWN) << "memory after host_unregister";
  }
}

// A backend may keep host_register in its table while a device does not support it (the host
// backend in discrete mode): then the call must refuse cleanly, not pretend.
TEST_F(Memory, RefusesHostRegisterWithoutTheCapability) {
  if ((device0_capabilities() & TSR_CAP_HOST_REGISTER) != 0) {
    GTEST_SKIP() << "device 0 advertises TSR_CAP_HOST_REGISTER "
                    "(Memory.RegistersHostMemoryForAsyncCopies checks it)";
  }
  if (!has_entry("host_register")) {
    GTEST_SKIP() << "host_register is NULL, as the missing TSR_CAP_HOST_REGISTER says";
  }
  const size_t bytes = 1 << 16;
  std::unique_ptr<uint8_t, decltype(&std::free)> host(
      static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)), &std::free);
  ASSERT_NE(host, nullptr);
  const tsr_status status = api().host_register(host.get(), bytes);
  if (status == TSR_OK && has_entry("host_unregister")) api().host_unregister(host.get());
  EXPECT_TRUE(status_is(TSR_UNIMPLEMENTED, status, "api().host_register(host.get(), bytes)"))
      << "device 0 does not advertise TSR_CAP_HOST_REGISTER";
  EXPECT_STRNE(api().last_error(), "") << "the refusal should say why";
}

// Without TSR_CAP_HOST_ACCESSIBLE device memory is not CPU-addressable (a discrete GPU, or the
// host backend's discrete mode): a host load or store through a device pointer must kill the
// process, never quietly reach host memory; otherwise code that dereferences device memory on
// the CPU would pass every test on that device. Each statement prints a marker first, so a child
// that died for another reason (a bad command line) does not count.
TEST_F(Memory, KillsAHostLoadOrStoreThroughADevicePointerWithoutHostAccess) {
  if ((device0_capabilities() & TSR_CAP_HOST_ACCESSIBLE) != 0) {
    GTEST_SKIP() << "device 0 advertises TSR_CAP_HOST_ACCESSIBLE: its memory is CPU-addressable";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend has threads of its own
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  volatile uint8_t* device = block.get();
  EXPECT_DEATH(
      {
        std::fputs("tessera-cts: loading from device memory on the host\n", stderr);
        std::fflush(stderr);
        const uint8_t value = device[100];
        std::fprintf(stderr, "tessera-cts: the load returned %u\n", unsigned(value));
      },
      "loading from device memory on the host");
  EXPECT_DEATH(
      {
        std::fputs("tessera-cts: storing to device memory on the host\n", stderr);
        std::fflush(stderr);
        device[100] = 0x5a;
        std::fputs("tessera-cts: the store returned\n", stderr);
      },
      "storing to device memory on the host");
}

CTS_TEST(Memory, DescribesDevicePointersWithTheirAllocation, "pointer_attributes") {
  for (int32_t d = 0; d < context().device_count; ++d) {
    DeviceMemory block;
    CTS_ASSERT_OK(DeviceMemory::allocate(d, 10000, &block));
    for (size_t offset : {size_t{0}, size_t{1}, size_t{9999}}) {
      SCOPED_TRACE("device " + std::to_string(d) + ", offset " + std::to_string(offset));
      tsr_pointer_attributes a{};
      a.struct_size = sizeof a;
      CTS_ASSERT_OK(api().pointer_attributes(block.get() + offset, &a));
      EXPECT_EQ(a.type, TSR_MEMORY_DEVICE);
      EXPECT_EQ(a.device, d);
      EXPECT_EQ(a.base, block.get());
      EXPECT_EQ(a.size, block.size());
    }
  }
}

CTS_TEST(Memory, DescribesPinnedHostPointers, "pointer_attributes") {
  PinnedMemory pinned;
  CTS_ASSERT_OK(PinnedMemory::allocate(5000, &pinned));
  tsr_pointer_attributes a{};
  a.struct_size = sizeof a;
  CTS_ASSERT_OK(api().pointer_attributes(pinned.get() + 17, &a));
  EXPECT_EQ(a.type, TSR_MEMORY_HOST_PINNED);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(a.base, pinned.get());
  EXPECT_EQ(a.size, pinned.size());
}

CTS_TEST(Memory, CallsForeignPointersUnknownWithoutFailing, "pointer_attributes") {
  int on_stack = 0;
  auto on_heap = std::make_unique<uint8_t[]>(64);
  for (const void* ptr :
       {static_cast<const void*>(&on_stack), static_cast<const void*>(on_heap.get()),
        static_cast<const void*>(nullptr)}) {
    tsr_pointer_attributes a{};
    a.struct_size = sizeof a;
    a.type = -1;
    CTS_ASSERT_OK(api().pointer_attributes(ptr, &a)) << "pointer " << ptr;
    EXPECT_EQ(a.type, TSR_MEMORY_UNKNOWN) << "pointer " << ptr;
  }
}

CTS_TEST(Memory, WritesOnlyTheAttributeFieldsThatFit, "pointer_attributes") {
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 4096, &block));
  // An older caller knows type and device only.
  const size_t truncated = offsetof(tsr_pointer_attributes, base);
  std::vector<uint8_t> buffer(sizeof(tsr_pointer_attributes) + 64, 0xA5);
  std::memcpy(buffer.data(), &truncated, sizeof truncated);
  auto* a = reinterpret_cast<tsr_pointer_attributes*>(buffer.data());
  CTS_ASSERT_OK(api().pointer_attributes(block.get(), a));
  EXPECT_EQ(a->type, TSR_MEMORY_DEVICE);
  for (size_t i = truncated; i < buffer.size(); ++i) {
    ASSERT_EQ(buffer[i], 0xA5) << "byte " << i << " lies beyond struct_size " << truncated;
  }
}

TEST_F(Memory, AllocatesAndFreesConcurrentlyFromSeveralThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  const uint64_t seed = make_rng()();
  SCOPED_TRACE(seed_note());
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      const int32_t device = t % context().device_count;
      for (int r = 0; r < kRounds; ++r) {
        const size_t bytes = 1 + rng() % (256 << 10);
        void* ptr = nullptr;
        if (api().device_malloc(device, bytes, &ptr) != TSR_OK || ptr == nullptr ||
            reinterpret_cast<uintptr_t>(ptr) % 256 != 0 ||
            api().device_free(device, ptr) != TSR_OK) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t << ": failed allocate/free rounds";
  }
}

}  // namespace
}  // namespace tessera::cts
