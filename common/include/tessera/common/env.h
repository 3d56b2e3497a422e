// Reading TESSERA_* environment variables with errors that name the variable.
// Every variable read through here must be listed in docs/ENVIRONMENT.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::env {

// The variable's value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> get(const char* name);

// Parses "123", "64K", "16M", "2G", "1T", "16GiB", "512MB" (all binary multiples) into bytes.
Result<uint64_t> parse_bytes(std::string_view text);

// Parses a non-negative decimal integer that fits in int64.
Result<int64_t> parse_int(std::string_view text);

// The variable parsed as bytes / integer, `fallback` when unset; an error naming the variable
// and its value when malformed.
Result<uint64_t> get_bytes(const char* name, uint64_t fallback);
Result<int64_t> get_int(const char* name, int64_t fallback);

// Splits on any of `separators`, trims spaces, drops empty parts.
std::vector<std::string> split(std::string_view text, std::string_view separators);

}  // namespace tessera::env
