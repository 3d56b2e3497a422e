#include "tessera/common/env.h"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace tessera::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Result<int64_t> parse_int(std::string_view text) {
  if (text.empty()) return invalid_argument("empty number");
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return invalid_argument("'" + std::string(text) + "' is not a number");
    if (value > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) {
      return out_of_range("'" + std::string(text) + "' is too large");
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

Result<uint64_t> parse_bytes(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  TSR_ASSIGN_OR_RETURN(int64_t number, parse_int(text.substr(0, digits)));
  std::string unit;
  for (char c : text.substr(digits))
    unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  const char* prefixes = "KMGT";
  for (int i = 0; i < 4; ++i) {
    std::string p(1, prefixes[i]);
    if (unit == p || unit == p + "B" || unit == p + "IB") shift = 10 * (i + 1);
  }
  if (shift < 0) {
    return invalid_argument("'" + std::string(text) + "': unknown unit '" + unit +
                            "' (use K, M, G or T, optionally followed by B or iB)");
  }
  auto value = static_cast<uint64_t>(number);
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return out_of_range("'" + std::string(text) + "' overflows 64 bits");
  }
  return value << shift;
}

Result<uint64_t> get_bytes(const char* name, uint64_t fallback) {
  auto text = get(name);
  if (!text) return fallback;
  auto parsed = parse_bytes(*text);
  if (!parsed.ok())
    return parsed.status().with_context(std::string("environment variable ") + name);
  return parsed;
}

Result<int64_t> get_int(const char* name, int64_t fallback) {
  auto text = get(name);
  if (!text) return fallback;
  auto parsed = parse_int(*text);
  if (!parsed.ok())
    return parsed.status().with_context(std::string("environment variable ") + name);
  return parsed;
}

std::vector<std::string> split(std::string_view text, std::string_view separators) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(separators, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(start, end - start);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front())))
      part.remove_prefix(1);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
      part.remove_suffix(1);
    if (!part.empty()) parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

}  // namespace tessera::env
