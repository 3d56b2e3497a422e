// Typed reads of a Hugging Face config.json's fields, with errors naming the file and the key.
// Private to runtime/ir/src (hf_config.cc, hf_families.cc). Not thread-safe to share while the
// JSON it views changes; values otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/ir/loaders.h"

namespace tessera::ir::hf {

using Json = nlohmann::json;

class Fields {
 public:
  Fields(const Json& json, std::string_view source) : json_(json), source_(source) {}

  // A positive integer; missing or null is an error naming the key.
  Result<int64_t> required(const char* key) const {
    if (!present(key)) return invalid_argument(source_ + ": field '" + key + "' missing");
    return integer(key, 1);
  }
  // A positive integer; a missing or null field gives `fallback`.
  Result<int64_t> optional(const char* key, int64_t fallback) const {
    if (!present(key)) return fallback;
    return integer(key, 1);
  }
  // An integer >= 0; a missing or null field gives `fallback`.
  Result<int64_t> count(const char* key, int64_t fallback) const {
    if (!present(key)) return fallback;
    return integer(key, 0);
  }
  // A list of integers >= 0 (layer indices); missing or null: empty.
  Result<std::vector<int64_t>> indices(const char* key) const {
    std::vector<int64_t> out;
    if (!present(key)) return out;
    if (!json_[key].is_array()) return type_error(key, "a list of layer indices");
    for (const Json& v : json_[key]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return type_error(key, "a list of layer indices");
      }
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
  // A boolean; missing or null gives `fallback`, another type is an error naming the key (a
  // flag that changes cost must not be guessed).
  Result<bool> flag(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!json_[key].is_boolean()) return type_error(key, "true or false");
    return json_[key].get<bool>();
  }
  double number(const char* key, double fallback) const {
    if (!json_.contains(key) || !json_[key].is_number()) return fallback;
    return json_[key].get<double>();
  }
  std::string text(const char* key, std::string fallback) const {
    if (!json_.contains(key) || !json_[key].is_string()) return fallback;
    return json_[key].get<std::string>();
  }
  bool has(const char* key) const { return json_.contains(key); }
  bool present(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }
  // Present with a value that turns something on: not null, false, 0 or an empty list.
  bool active(std::string_view key) const {
    const auto it = json_.find(std::string(key));
    if (it == json_.end() || it->is_null()) return false;
    if (it->is_boolean()) return it->get<bool>();
    if (it->is_number()) return it->get<double>() != 0;
    if (it->is_array() || it->is_object()) return !it->empty();
    return true;
  }
  const Json& json() const { return json_; }
  const std::string& source() const { return source_; }

 private:
  // Bounded by the largest of the IR's limits (model.h), so that defaults such as 4 x n_embd
  // cannot overflow; build_decoder then applies each field's own limit.
  Result<int64_t> integer(const char* key, int64_t min) const {
    const Json& v = json_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > kMaxVocab) {
      return invalid_argument(source_ + ": field '" + key + "' must be a " +
                              (min > 0 ? "positive" : "non-negative") + " integer (at most " +
                              std::to_string(kMaxVocab) + "), got " + v.dump());
    }
    return v.get<int64_t>();
  }
  Status type_error(const char* key, const char* what) const {
    return invalid_argument(source_ + ": field '" + key + "' must be " + what + ", got " +
                            json_[key].dump());
  }
  const Json& json_;
  std::string source_;
};

// One family's reader: the DecoderConfig of a config.json whose model_type it owns.
using FamilyReader = Result<DecoderConfig> (*)(const Fields&);

struct Family {
  const char* model_type;
  FamilyReader read;
  // Keys of kCostKeys (hf_config.cc) this family reads; any other one present is refused.
  std::vector<std::string_view> reads;
};

// The supported families (hf_families.cc), and the readers used without a model_type.
const std::vector<Family>& families();
Result<DecoderConfig> read_gpt2(const Fields& f);
Result<DecoderConfig> read_llama(const Fields& f);

}  // namespace tessera::ir::hf
