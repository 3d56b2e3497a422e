// Small text helpers shared by the subcommands' human-readable output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::tools {

// 1536 -> "1.5 KiB", 25769803776 -> "24.0 GiB".
std::string format_bytes(uint64_t bytes);
// 2.5e12 -> "2.50 T", 0 -> "-".
std::string format_si(double value);

// A left-aligned text table; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string to_string() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tessera::tools
