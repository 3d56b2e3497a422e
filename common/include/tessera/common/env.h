// Reading TESSERA_* environment variables with errors that name the variable.
// Every variable read through here must be listed in docs/ENVIRONMENT.md.
//
// The typed getters below are the one place that decides what a well-formed value is: each
// returns `fallback` when the variable is unset and an INVALID_ARGUMENT of the form
// "TESSERA_X='value': expected <what is accepted>" when it is malformed, negative, not finite or
// out of range. An empty value
// counts as set, and so as malformed for every typed getter. Thread-safe (they only read the
// environment).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
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

// Parses a finite decimal number ("0.5", "64", "1e3"); refuses "inf", "nan", hex, signs other
// than a leading '-', spaces and trailing characters.
Result<double> parse_number(std::string_view text);

// Parses a boolean: 1/true/on/yes or 0/false/off/no (case-insensitive).
Result<bool> parse_bool(std::string_view text);

// The variable parsed as bytes / an integer / a number in [min, max], `fallback` when unset; an
// error naming the variable, its value and the accepted range when malformed or out of range.
Result<uint64_t> get_bytes(const char* name, uint64_t fallback, uint64_t min = 0,
                           uint64_t max = std::numeric_limits<uint64_t>::max());
Result<int64_t> get_int(const char* name, int64_t fallback, int64_t min = 0,
                        int64_t max = std::numeric_limits<int64_t>::max());
Result<double> get_number(const char* name, double fallback, double min, double max);

// The variable as a boolean (parse_bool), `fallback` when unset.
Result<bool> get_bool(const char* name, bool fallback);

// The variable's value when it is one of `choices` (exact match), `fallback` when unset; else an
// error listing the choices.
Result<std::string> get_choice(const char* name, std::initializer_list<std::string_view> choices,
                               std::string_view fallback);

// "TESSERA_X='value': why" as an INVALID_ARGUMENT, for checks the getters cannot express.
Status bad_value(const char* name, std::string_view value, std::string_view why);

// Splits on any of `separators`, trims spaces, drops empty parts.
std::vector<std::string> split(std::string_view text, std::string_view separators);

}  // namespace tessera::env
