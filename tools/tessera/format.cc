#include "format.h"

#include <algorithm>
#include <cstdio>

namespace tessera::tools {

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

std::string format_si(double value) {
  if (value <= 0) return "-";
  static constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int prefix = 0;
  while (value >= 1000.0 && prefix < 6) {
    value /= 1000.0;
    ++prefix;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kPrefixes[prefix]);
  return text;
}

std::string Table::to_string() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace tessera::tools
