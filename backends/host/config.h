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
inline constexpr int32_t kMaxDevices = 1024;

struct Config {
  int32_t devices = 1;
  uint64_t memory_per_device = 0;  // bytes; the capacity each virtual device enforces
  // Where memory_per_device came from, for error messages: the env var, the init option or the
  // physical-RAM default (all three are fixed strings).
  const char* memory_source = kMemoryEnv;
};

// Builds the configuration: defaults (1 device, physical RAM), then TESSERA_HOST_DEVICES and
// TESSERA_HOST_DEVICE_MEMORY, then "devices=N;memory=BYTES" from `options` (may be NULL). A
// malformed value fails with TSR_INVALID_ARGUMENT naming the variable or option. Thread-safe
// (reads the environment only).
tsr_status load_config(const char* options, Config* out);

// Parses a byte count: a decimal integer with an optional binary suffix K, M, G, T (also KB/KiB,
// MB/MiB, ...; all powers of 1024), e.g. "512M", "16GiB", "1048576". False on anything else,
// on zero and on overflow.
bool parse_bytes(const std::string& text, uint64_t* out);

// "1.5 GiB", "512.0 MiB", "100 B": for messages. Thread-safe.
std::string format_bytes(uint64_t bytes);

// Physical RAM in bytes (sysconf), or 0 when unknown.
uint64_t physical_memory_bytes();

}  // namespace tessera::host
