// Internal: a strict field reader for the JSON forms (topology, cluster). The first error wins and
// reads "<source>: field '<path>': expected <what>".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/status.h"

namespace tessera::topo::detail {

using Json = nlohmann::ordered_json;

class JsonReader {
 public:
  explicit JsonReader(std::string_view source) : source_(source) {}

  // Parses text; on failure records "<source>: not valid JSON: <parser message>".
  bool parse(std::string_view text, Json& out);

  bool fail(const std::string& path, const std::string& expected);
  // Records "field '<path>': expected <expected>" unless `valid`; returns `valid`.
  bool check(bool valid, const std::string& path, const std::string& expected) {
    return valid || fail(path, expected);
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Each returns false (and records the error) when the field is missing or of the wrong type.
  bool object(const Json& j, const std::string& path);
  bool array(const Json& parent, const std::string& path, const char* key, const Json*& out);
  bool get(const Json& j, const std::string& path, const char* key, std::string& out);
  bool get(const Json& j, const std::string& path, const char* key, int& out);
  bool get(const Json& j, const std::string& path, const char* key, uint64_t& out);
  bool get(const Json& j, const std::string& path, const char* key, double& out);
  bool get(const Json& j, const std::string& path, const char* key, bool& out);
  bool get(const Json& j, const std::string& path, const char* key, std::vector<std::string>& out);
  // Absent or null gives nullopt.
  bool get(const Json& j, const std::string& path, const char* key, std::optional<double>& out);
  // 4-hex-digit string ("10de").
  bool get_hex16(const Json& j, const std::string& path, const char* key, uint16_t& out);

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

 private:
  const Json* field(const Json& j, const std::string& path, const char* key, const char* what);
  std::string source_;
  Status status_;
};

// "10de"
std::string hex16(uint16_t value);

// The Topology object inside a larger document (cluster specs); defined in json.cc.
}  // namespace tessera::topo::detail
namespace tessera::topo {
struct Topology;
}
namespace tessera::topo::detail {
Json topology_to_json(const Topology& t);
void read_topology(JsonReader& r, const Json& j, const std::string& root, Topology& t);

}  // namespace tessera::topo::detail
