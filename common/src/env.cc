#include "tessera/common/env.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace tessera::env {
namespace {

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "16 MiB" for a power-of-two multiple, else the plain byte count: for range messages.
std::string bytes_text(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (unit < 6 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

template <typename T>
std::string range_text(T min, T max, std::string (*show)(T)) {
  if (max == std::numeric_limits<T>::max()) return "at least " + show(min);
  return "in [" + show(min) + ", " + show(max) + "]";
}

std::string int_text(int64_t v) {
  return std::to_string(v);
}
std::string u64_bytes_text(uint64_t v) {
  return bytes_text(v);
}
std::string double_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Status bad_value(const char* name, std::string_view value, std::string_view why) {
  return invalid_argument(std::string(name) + "='" + std::string(value) + "': " + std::string(why));
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

Result<double> parse_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  // from_chars takes no leading '+' or space and no hex in the general format, but does take
  // "inf" and "nan": refused below.
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return invalid_argument("'" + std::string(text) + "' is not a number");
  }
  if (!std::isfinite(value)) return invalid_argument("'" + std::string(text) + "' is not finite");
  return value;
}

Result<bool> parse_bool(std::string_view text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return invalid_argument("'" + std::string(text) + "' is not a boolean");
}

Result<uint64_t> get_bytes(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  auto text = get(name);
  if (!text) return fallback;
  auto parsed = parse_bytes(*text);
  if (!parsed.ok() || *parsed < min || *parsed > max) {
    return bad_value(name, *text,
                     "expected a size " + range_text(min, max, &u64_bytes_text) +
                         " (bytes, or with K, M, G or T, optionally followed by B or iB)");
  }
  return parsed;
}

Result<int64_t> get_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  auto text = get(name);
  if (!text) return fallback;
  // parse_int takes no sign; a leading '-' is still read so that the message says "negative".
  const bool negative = !text->empty() && text->front() == '-';
  auto parsed = parse_int(negative ? std::string_view(*text).substr(1) : std::string_view(*text));
  int64_t value = parsed.ok() ? (negative ? -*parsed : *parsed) : 0;
  if (!parsed.ok() || value < min || value > max) {
    return bad_value(name, *text, "expected an integer " + range_text(min, max, &int_text));
  }
  return value;
}

Result<double> get_number(const char* name, double fallback, double min, double max) {
  auto text = get(name);
  if (!text) return fallback;
  auto parsed = parse_number(*text);
  if (!parsed.ok() || *parsed < min || *parsed > max) {
    return bad_value(
        name, *text,
        "expected a finite number in [" + double_text(min) + ", " + double_text(max) + "]");
  }
  return parsed;
}

Result<bool> get_bool(const char* name, bool fallback) {
  auto text = get(name);
  if (!text) return fallback;
  auto parsed = parse_bool(*text);
  if (!parsed.ok())
    return bad_value(name, *text, "expected 0 or 1 (or true/false, on/off, yes/no)");
  return parsed;
}

Result<std::string> get_choice(const char* name, std::initializer_list<std::string_view> choices,
                               std::string_view fallback) {
  auto text = get(name);
  if (!text) return std::string(fallback);
  std::string list;
  for (std::string_view choice : choices) {
    if (*text == choice) return *text;
    list += (list.empty() ? "" : ", ") + std::string(choice);
  }
  return bad_value(name, *text, "expected one of " + list);
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
