// Device::memory_stats: the bytes DeviceBuffers hold per device and their high-water mark.
#include <gtest/gtest.h>

#include <thread>
#include <utility>
#include <vector>

#include "tessera/hal/platform.h"

namespace tessera::hal {
namespace {

std::shared_ptr<Platform> two_discrete_host_devices() {
  PlatformOptions options;
  options.registry.selection = "host";
  options.registry.init_options["host"] = "devices=2;discrete=1";
  auto platform = Platform::create(options);
  EXPECT_TRUE(platform.ok()) << platform.status().to_string();
  return platform.ok() ? *platform : nullptr;
}

DeviceBuffer allocate_or_fail(const Device& device, size_t bytes) {
  auto buffer = device.allocate(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
  return buffer.ok() ? std::move(*buffer) : DeviceBuffer();
}

TEST(DeviceMemoryStats, CountsBytesInUseAndKeepsThePeakAfterFrees) {
  auto platform = two_discrete_host_devices();
  ASSERT_NE(platform, nullptr);
  const Device& device = platform->devices().at(0);
  const DeviceMemoryStats start = device.memory_stats();
  {
    DeviceBuffer a = allocate_or_fail(device, 1000);
    DeviceBuffer b = allocate_or_fail(device, 3000);
    EXPECT_EQ(device.memory_stats().in_use, start.in_use + 4000);
    ASSERT_TRUE(a.release().ok());
    EXPECT_EQ(device.memory_stats().in_use, start.in_use + 3000);
    DeviceBuffer c = allocate_or_fail(device, 500);  // 3500 < the 4000 seen: the peak stays
    EXPECT_EQ(device.memory_stats().in_use, start.in_use + 3500);
    EXPECT_EQ(device.memory_stats().peak, std::max(start.peak, start.in_use + 4000));
  }
  EXPECT_EQ(device.memory_stats().in_use, start.in_use);
  EXPECT_EQ(device.memory_stats().peak, std::max(start.peak, start.in_use + 4000));
}

TEST(DeviceMemoryStats, ResetPeakStartsFromTheBytesInUse) {
  auto platform = two_discrete_host_devices();
  ASSERT_NE(platform, nullptr);
  const Device& device = platform->devices().at(0);
  DeviceBuffer kept = allocate_or_fail(device, 2048);
  { DeviceBuffer gone = allocate_or_fail(device, 1 << 20); }
  const uint64_t in_use = device.memory_stats().in_use;
  EXPECT_GE(device.memory_stats().peak, in_use + (1 << 20));
  device.reset_peak();
  EXPECT_EQ(device.memory_stats().peak, in_use);
  DeviceBuffer next = allocate_or_fail(device, 100);
  EXPECT_EQ(device.memory_stats().peak, in_use + 100);
}

TEST(DeviceMemoryStats, KeepsDevicesApartAndCountsAMovedBufferOnce) {
  auto platform = two_discrete_host_devices();
  ASSERT_NE(platform, nullptr);
  const Device& d0 = platform->devices().at(0);
  const Device& d1 = platform->devices().at(1);
  const uint64_t base0 = d0.memory_stats().in_use, base1 = d1.memory_stats().in_use;
  DeviceBuffer on1 = allocate_or_fail(d1, 4096);
  EXPECT_EQ(d0.memory_stats().in_use, base0);
  EXPECT_EQ(d1.memory_stats().in_use, base1 + 4096);
  DeviceBuffer moved = std::move(on1);
  DeviceBuffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(d1.memory_stats().in_use, base1 + 4096);
  // A copy of the Device object reads the same counters (they belong to the backend).
  const Device copy = d1;
  EXPECT_EQ(copy.memory_stats().in_use, base1 + 4096);
  assigned = DeviceBuffer();
  EXPECT_EQ(d1.memory_stats().in_use, base1);
}

TEST(DeviceMemoryStats, AdoptedDeviceMallocPointersCountUntilReleased) {
  auto platform = two_discrete_host_devices();
  ASSERT_NE(platform, nullptr);
  const Device& device = platform->devices().at(0);
  const uint64_t base = device.memory_stats().in_use;
  void* ptr = nullptr;
  ASSERT_EQ(device.backend()->api().device_malloc(0, 640, &ptr), TSR_OK);
  EXPECT_EQ(device.memory_stats().in_use, base);  // the C table alone is not seen
  DeviceBuffer adopted(device.backend(), 0, ptr, 640);
  EXPECT_EQ(device.memory_stats().in_use, base + 640);
  ASSERT_TRUE(adopted.release().ok());
  EXPECT_EQ(device.memory_stats().in_use, base);
}

TEST(DeviceMemoryStats, ConcurrentAllocationsBalanceAndThePeakCoversTheHeldBytes) {
  auto platform = two_discrete_host_devices();
  ASSERT_NE(platform, nullptr);
  const Device& device = platform->devices().at(0);
  const uint64_t base = device.memory_stats().in_use;
  device.reset_peak();
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&device, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto buffer = device.allocate(size_t(64 * (t + 1)));
        if (!buffer.ok()) ADD_FAILURE() << buffer.status().to_string();
      }
    });
  }
  DeviceBuffer held = allocate_or_fail(device, 10000);  // alive while the threads run
  for (std::thread& thread : threads) thread.join();
  const DeviceMemoryStats after = device.memory_stats();
  EXPECT_EQ(after.in_use, base + 10000);
  EXPECT_GE(after.peak, base + 10000);
  EXPECT_LE(after.peak, base + 10000 + 64 * (1 + 2 + 3 + 4));
}

}  // namespace
}  // namespace tessera::hal
