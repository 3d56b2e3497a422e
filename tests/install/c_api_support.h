// Test support for the C API suites: the single-rank environment, the error-contract check,
// device memory filled and read through tessera_memcpy, and joining a job of forked ranks the way
// `tessera launch` starts them. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tessera.h"

namespace tessera_c_api_testing {

// Without launcher variables (of an enclosing job) tessera_init_from_env makes a single rank.
inline void clear_launcher_env() {
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TESSERA_LAUNCHER", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    unsetenv(name);
  }
}

// The call failed with `code` and a message that starts with `function` and mentions `detail`.
inline void expect_error(tessera_status got, tessera_status code, const std::string& function,
                         const std::string& detail) {
  EXPECT_EQ(got, code) << tessera_status_name(got) << ": " << tessera_last_error();
  const std::string message = tessera_last_error();
  EXPECT_EQ(message.rfind(function + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(detail), std::string::npos) << message;
}

// Device memory of `ctx` holding `init` (NULL on failure, which fails the test). The suites run
// on a discrete host device, where the CPU cannot touch it: tessera_memcpy fills and reads it.
template <typename T>
void* device_copy_of(tessera_context* ctx, const std::vector<T>& init) {
  void* ptr = nullptr;
  const size_t bytes = init.size() * sizeof(T);
  EXPECT_EQ(tessera_device_alloc(ctx, bytes, &ptr), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(tessera_memcpy(ctx, ptr, init.data(), bytes), TESSERA_OK) << tessera_last_error();
  return ptr;
}

// `count` elements of device memory of `ctx`, copied to the host.
template <typename T>
std::vector<T> read_device(tessera_context* ctx, const void* device, size_t count) {
  std::vector<T> out(count);
  EXPECT_EQ(tessera_memcpy(ctx, out.data(), device, count * sizeof(T)), TESSERA_OK)
      << tessera_last_error();
  return out;
}

// Whether this process's host devices are discrete (TESSERA_HOST_DEVICES=N:discrete, as under
// TESSERA_DEVICE_TEST_ENV): device memory the CPU cannot address, and host memory refused where
// device memory is required.
inline bool host_devices_are_discrete() {
  const char* devices = std::getenv("TESSERA_HOST_DEVICES");
  return devices != nullptr && std::string(devices).find(":discrete") != std::string::npos;
}

// The variables `tessera launch` sets (tools/tessera/launch/environment.cc), for the store the
// parent of tessera::coll::testing::run_ranks hosts; then tessera_init_from_env.
inline tessera_status join(int rank, int size, tessera_context** ctx, int64_t timeout_ms = 0) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(size).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::getenv("TESSERA_TEST_STORE_PORT"), 1);
  setenv("TESSERA_LAUNCHER", "tessera", 1);
  setenv("TESSERA_STORE_HOSTED", "1", 1);
  tessera_init_options options{};
  options.struct_size = sizeof options;
  options.timeout_ms = timeout_ms;
  return tessera_init_from_env(&options, ctx);
}

}  // namespace tessera_c_api_testing
