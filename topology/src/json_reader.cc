#include "json_reader.h"

#include <cstdint>
#include <cstdio>

namespace tessera::topo::detail {

std::string hex16(uint16_t value) {
  char out[8];
  std::snprintf(out, sizeof(out), "%04x", value);
  return out;
}

bool JsonReader::parse(std::string_view text, Json& out) {
  try {
    out = Json::parse(text);
    return true;
  } catch (const nlohmann::json::exception& e) {  // parse_error, out_of_range (a number > 1e308)
    status_ = invalid_argument(source_ + ": not valid JSON: " + e.what());
    return false;
  }
}

bool JsonReader::fail(const std::string& path, const std::string& expected) {
  if (status_.ok()) {
    status_ = invalid_argument(source_ + ": field '" + path + "': expected " + expected);
  }
  return false;
}

bool JsonReader::object(const Json& j, const std::string& path) {
  if (!ok()) return false;
  return j.is_object() ? true : fail(path.empty() ? "(top level)" : path, "an object");
}

const Json* JsonReader::field(const Json& j, const std::string& path, const char* key,
                              const char* what) {
  if (!ok()) return nullptr;
  auto it = j.find(key);
  if (it == j.end()) {
    fail(join(path, key), std::string(what) + " (missing)");
    return nullptr;
  }
  return &*it;
}

bool JsonReader::array(const Json& parent, const std::string& path, const char* key,
                       const Json*& out) {
  out = field(parent, path, key, "an array");
  if (!out) return false;
  return out->is_array() ? true : fail(join(path, key), "an array");
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key, std::string& out) {
  const Json* v = field(j, path, key, "a string");
  if (!v) return false;
  if (!v->is_string()) return fail(join(path, key), "a string");
  out = v->get<std::string>();
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key, int& out) {
  const Json* v = field(j, path, key, "an integer");
  if (!v) return false;
  // Out of int range is refused, not truncated.
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT32_MAX) ||
      v->get<int64_t>() < INT32_MIN || v->get<int64_t>() > INT32_MAX) {
    return fail(join(path, key), "an integer");
  }
  out = v->get<int>();
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key, uint64_t& out) {
  const Json* v = field(j, path, key, "a non-negative integer");
  if (!v) return false;
  if (!v->is_number_unsigned()) return fail(join(path, key), "a non-negative integer");
  out = v->get<uint64_t>();
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key, double& out) {
  const Json* v = field(j, path, key, "a number");
  if (!v) return false;
  if (!v->is_number()) return fail(join(path, key), "a number");
  out = v->get<double>();
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key, bool& out) {
  const Json* v = field(j, path, key, "true or false");
  if (!v) return false;
  if (!v->is_boolean()) return fail(join(path, key), "true or false");
  out = v->get<bool>();
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key,
                     std::vector<std::string>& out) {
  const Json* v = field(j, path, key, "an array of strings");
  if (!v) return false;
  if (!v->is_array()) return fail(join(path, key), "an array of strings");
  out.clear();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return fail(index(join(path, key), i), "a string");
    out.push_back((*v)[i].get<std::string>());
  }
  return true;
}

bool JsonReader::get(const Json& j, const std::string& path, const char* key,
                     std::optional<double>& out) {
  if (!ok()) return false;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out.reset();
    return true;
  }
  if (!it->is_number()) return fail(join(path, key), "a number or null");
  out = it->get<double>();
  return true;
}

bool JsonReader::get_hex16(const Json& j, const std::string& path, const char* key, uint16_t& out) {
  std::string text;
  if (!get(j, path, key, text)) return false;
  unsigned value = 0;
  char extra = 0;
  if (text.size() != 4 || std::sscanf(text.c_str(), "%4x%c", &value, &extra) != 1) {
    return fail(join(path, key), "4 hex digits such as \"10de\"");
  }
  out = static_cast<uint16_t>(value);
  return true;
}

}  // namespace tessera::topo::detail
