// The second process of the IPC test. The parent (ipc_test.cc) re-executes this binary with the
// hidden arguments `--ipc-child <hex handle> --backend <path> [--options ...]`; main hands them
// here instead of running GoogleTest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "tessera/hal/backend_abi.h"

namespace tessera::cts {

// Size of the exported allocation and the salts of the two patterns: the parent writes the
// first, the child checks it and writes the second, the parent checks that.
inline constexpr size_t kIpcBytes = (1u << 20) + 3;
inline constexpr uint32_t kIpcParentSalt = 11;
inline constexpr uint32_t kIpcChildSalt = 12;

std::string hex_encode(const tsr_ipc_handle& handle);
std::optional<tsr_ipc_handle> hex_decode(const std::string& text);

// Loads `backend`, opens the handle on device 0, checks the parent's pattern, writes the child's.
// Returns the process exit code: 0 on success, non-zero after printing why to stderr.
int run_ipc_child(const std::string& backend, const std::string& options,
                  const std::string& hex_handle);

}  // namespace tessera::cts
