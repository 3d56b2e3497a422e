// Configuration of the host backend: how many virtual devices and how much memory each may hand
// out, read from the environment and overridden by init's option string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

inline constexpr const char* kDevicesEnv = "TESSERA_HOST_DEVICES";
inline constexpr const char* kMemoryEnv = "TESSERA_HOST_DEVICE_MEMORY";
inline constexpr const char* kCallbackThreadsEnv = "TESSERA_HOST_CALLBACK_THREADS";
inline constexpr const char* kCollectivesEnv = "TESSERA_HOST_CCL";
inline constexpr int32_t kMaxDevices = 1024;
inline constexpr const char* kUsableMemorySource =
    "default: the RAM this process can use (MemAvailable, cgroup limit); set "
    "TESSERA_HOST_DEVICE_MEMORY";

struct Config {
  int32_t devices = 1;
  uint64_t memory_per_device = 0;  // bytes; the capacity each virtual device enforces
  // Where memory_per_device came from, for error messages: the env var, the init option or the
  // physical-RAM default (all three are fixed strings).
  const char* memory_source = kMemoryEnv;
  // Discrete mode: device memory the host cannot dereference, as on a GPU (the pointer handed out
  // faults on any CPU access; the backend reaches the bytes through a second mapping).
  // TSR_CAP_HOST_ACCESSIBLE and host_register are off then.
  bool discrete = false;
  // 0: each stream runs its host callbacks on its own worker (the default). 1: every callback of
  // the process runs on one shared thread, as some vendor runtimes do (CUDA's host functions).
  int32_t callback_threads = 0;
  // The host reference CCL (ccl.h, tsr_collectives_api_v1) is usable: TESSERA_HOST_CCL=1 or the
  // init option collectives=1. Off by default, so the layers above stage device buffers through
  // their own collectives unless a test or benchmark asks for the native route.
  bool collectives = false;
};

// Builds the configuration: defaults (1 device, usable RAM, addressable memory, one callback
// thread per stream), then TESSERA_HOST_DEVICES ("N" or "N:discrete"),
// TESSERA_HOST_DEVICE_MEMORY and TESSERA_HOST_CALLBACK_THREADS (0 or 1), then
// "devices=N;memory=BYTES;discrete=0|1;callback_threads=0|1" from `options` (may be NULL; also
// memory_probe_root=DIR, where tests point the default's probe at a sample tree). A
// malformed value fails with TSR_INVALID_ARGUMENT naming the variable or option. Thread-safe
// (reads the environment only).
tsr_status load_config(const char* options, Config* out);

// Parses a byte count: a decimal integer with an optional binary suffix K, M, G, T (also KB/KiB,
// MB/MiB, ...; all powers of 1024), e.g. "512M", "16GiB", "1048576". False on anything else,
// on zero and on overflow.
bool parse_bytes(const std::string& text, uint64_t* out);

// "1.5 GiB", "512.0 MiB", "100 B": for messages. Thread-safe.
std::string format_bytes(uint64_t bytes);

// The RAM this process can use, in bytes (tessera/common/host_memory.h: the smaller of
// MemAvailable and every memory cgroup's limit minus usage), or 0 when unknown. `probe_root`
// ("" for /) holds proc/ and sys/fs/cgroup/, for tests (init option memory_probe_root=DIR).
uint64_t usable_memory_bytes(const std::string& probe_root);

}  // namespace tessera::host
