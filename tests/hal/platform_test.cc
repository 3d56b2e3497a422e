#include "tessera/hal/platform.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <vector>

namespace tessera::hal {
namespace {

std::shared_ptr<Platform> host_platform(const std::string& init_options) {
  PlatformOptions options;
  options.registry.selection = "host";
  options.registry.init_options["host"] = init_options;
  auto platform = Platform::create(options);
  EXPECT_TRUE(platform.ok()) << platform.status().to_string();
  return platform.ok() ? *platform : nullptr;
}

TEST(Platform, ListsFourHostDevicesWhenAskedFor) {
  auto platform = host_platform("devices=4");
  ASSERT_EQ(platform->devices().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Device& device = platform->devices()[i];
    EXPECT_EQ(device.id(), "host:" + std::to_string(i));
    EXPECT_GT(device.properties().total_memory, 0u);
    EXPECT_GT(std::strlen(device.properties().name), 0u);
  }
}

TEST(Platform, ReadsTesseraHostDevices) {
  setenv("TESSERA_HOST_DEVICES", "3", 1);
  auto platform = host_platform("");
  unsetenv("TESSERA_HOST_DEVICES");
  EXPECT_EQ(platform->devices("host").size(), 3u);
}

TEST(Platform, FindsDevicesByIdAndExplainsMissingOnes) {
  auto platform = host_platform("devices=2");
  EXPECT_TRUE(platform->device("host:1").ok());
  auto missing = platform->device("host:7");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("has 2 device(s)"), std::string::npos);
  auto disabled = platform->device("skeleton:0");
  ASSERT_FALSE(disabled.ok());
  EXPECT_NE(disabled.status().message().find("disabled"), std::string::npos);
  EXPECT_EQ(platform->device("host:x").status().code(), StatusCode::kInvalidArgument);
}

// Device::query: the device of a backend and an index without a Platform (a caller's stream).
TEST(Platform, QueriesADeviceFromItsBackendAndIndex) {
  auto platform = host_platform("devices=2;discrete=1");
  const Device& listed = platform->devices().at(1);
  auto queried = Device::query(listed.backend(), 1);
  ASSERT_TRUE(queried.ok()) << queried.status().to_string();
  EXPECT_EQ(queried->id(), "host:1");
  EXPECT_STREQ(queried->properties().name, listed.properties().name);
  EXPECT_EQ(queried->properties().capabilities, listed.properties().capabilities);
  EXPECT_EQ(queried->properties().total_memory, listed.properties().total_memory);
  auto missing = Device::query(listed.backend(), 7);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("device_properties of device 7"), std::string::npos)
      << missing.status().message();
}

TEST(Platform, AllocationBeyondCapacityFailsWithResourceExhausted) {
  auto platform = host_platform("devices=1;memory=1M");
  const Device& device = platform->devices().at(0);
  auto first = device.allocate(768 << 10);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = device.allocate(512 << 10);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("host device_malloc"), std::string::npos)
      << second.status().message();
  first->release().ignore();
  EXPECT_TRUE(device.allocate(1 << 20).ok()) << "freed memory is available again";
}

TEST(Platform, MemoryInfoFollowsAllocations) {
  auto platform = host_platform("devices=1;memory=64M");
  const Device& device = platform->devices().at(0);
  auto before = device.memory_info();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->total_bytes, 64u << 20);
  {
    auto buffer = device.allocate(16 << 20);
    ASSERT_TRUE(buffer.ok());
    EXPECT_EQ(device.memory_info()->free_bytes, before->free_bytes - (16u << 20));
  }
  EXPECT_EQ(device.memory_info()->free_bytes, before->free_bytes) << "the buffer freed itself";
}

TEST(Platform, BuffersMoveWithoutDoubleFree) {
  auto platform = host_platform("devices=1;memory=8M");
  const Device& device = platform->devices().at(0);
  DeviceBuffer a = std::move(device.allocate(4 << 20)).value();
  void* ptr = a.data();
  DeviceBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), ptr);
  b = DeviceBuffer();
  EXPECT_EQ(device.memory_info()->free_bytes, 8u << 20);
}

}  // namespace
}  // namespace tessera::hal
