// Device memory in a forked rank of a collectives test: the rank sets its backend environment
// (TESSERA_HOST_DEVICES=1:discrete, ...) before loading the backend, opens host:0 and a stream,
// and moves test values in and out of device memory only through pinned buffers and stream copies
// (the CPU never touches a device pointer). Shared by the staged-route and native-route tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "support/multiprocess.h"
#include "tessera/hal/hal.h"

namespace tessera::coll::testing {

// Every rank exited 0 (the rank's own message says what failed otherwise).
inline void expect_all_ok(const std::vector<RankResult>& results, int n) {
  ASSERT_EQ(results.size(), size_t(n));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
}

// One rank's backend: the platform, host:0 and a stream on it.
struct DeviceRank {
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  std::optional<hal::Stream> stream;
};

// Sets each NAME=value of `env`, then loads the host backend. nullopt (after printing why) when
// the platform, the device or the stream cannot be had.
inline std::optional<DeviceRank> open_device_rank(
    std::initializer_list<std::pair<const char*, const char*>> env) {
  for (const auto& [name, value] : env) setenv(name, value, 1);
  hal::PlatformOptions options;
  options.registry.selection = "host";
  auto platform = hal::Platform::create(options);
  if (!platform.ok()) {
    std::fprintf(stderr, "platform: %s\n", platform.status().to_string().c_str());
    return std::nullopt;
  }
  DeviceRank r;
  r.platform = *platform;
  auto device = r.platform->device("host", 0);
  if (!device.ok()) return std::nullopt;
  r.device.emplace(*device);
  auto stream = r.device->create_stream();
  if (!stream.ok()) return std::nullopt;
  r.stream.emplace(std::move(*stream));
  return r;
}

// Host values to device memory, through a pinned buffer and the stream's copy.
template <typename T>
Status upload(const DeviceRank& r, void* device_ptr, const std::vector<T>& values) {
  const size_t bytes = values.size() * sizeof(T);
  if (bytes == 0) return Status();
  TSR_ASSIGN_OR_RETURN(hal::HostBuffer pinned, r.device->allocate_host(bytes));
  std::memcpy(pinned.data(), values.data(), bytes);
  TSR_RETURN_IF_ERROR(r.stream->copy(device_ptr, pinned.data(), bytes));
  return r.stream->synchronize();
}

// `count` values of device memory back to the host, the same way.
template <typename T>
Result<std::vector<T>> download(const DeviceRank& r, const void* device_ptr, size_t count) {
  std::vector<T> out(count);
  if (count == 0) return out;
  TSR_ASSIGN_OR_RETURN(hal::HostBuffer pinned, r.device->allocate_host(count * sizeof(T)));
  TSR_RETURN_IF_ERROR(r.stream->copy(pinned.data(), device_ptr, count * sizeof(T)));
  TSR_RETURN_IF_ERROR(r.stream->synchronize());
  std::memcpy(out.data(), pinned.data(), count * sizeof(T));
  return out;
}

}  // namespace tessera::coll::testing
