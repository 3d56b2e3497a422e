// Text from outside the process (files named on a command line, names read from JSON or from
// the machine): read it with a bound and print it without letting it drive the terminal.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.h"

namespace tessera {

// Configuration files (model, cluster, topology JSON) are far below this; /dev/zero is not.
inline constexpr uint64_t kMaxConfigFileBytes = 64ull << 20;

// Reads a whole regular file of at most `max_bytes`. Refuses, naming `path`: a missing file
// (NOT_FOUND), an unreadable one, a directory, a FIFO, a device or a socket (INVALID_ARGUMENT; a
// FIFO is never opened, so this does not block) and a larger file (RESOURCE_EXHAUSTED).
Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes);

// `text` with control characters (bytes 0x00-0x1f and 0x7f) written as \xNN, so a host or
// device name cannot move the cursor, clear the screen or fake extra lines. Other bytes kept.
std::string printable(std::string_view text);

}  // namespace tessera
