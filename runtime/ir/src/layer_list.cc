// The generic JSON layer list and load_model. Top-level "hidden", "vocab", "bias", "dropout" are
// defaults for every layer; a layer's own field wins.
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/common/untrusted.h"
#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

using Json = nlohmann::json;

struct Parser {
  std::string source;
  Json defaults;
  Model model;
  int next_block = 0;

  // The IR's limit (model.h) for a field of the layer list.
  static int64_t limit_of(std::string_view key) {
    if (key == "hidden" || key == "head_dim" || key == "q_lora_rank" || key == "kv_lora_rank" ||
        key == "rope_head_dim" || key == "v_head_dim") {
      return kMaxWidth;
    }
    if (key == "ffn" || key == "shared_ffn") return kMaxFfn;
    if (key == "heads" || key == "kv_heads") return kMaxHeads;
    if (key == "experts" || key == "top_k") return kMaxExperts;
    if (key == "repeat") return kMaxLayers;
    return kMaxVocab;  // vocab, positions, max_seq_len, window
  }

  // Field of `layer` (or the top-level default) as a non-negative integer within its limit;
  // `fallback` < 0: required.
  Result<int64_t> integer(const Json& layer, const std::string& where, const char* key,
                          int64_t fallback) const {
    const Json* v =
        layer.contains(key) ? &layer[key] : (defaults.contains(key) ? &defaults[key] : nullptr);
    if (v == nullptr || v->is_null()) {
      if (fallback >= 0) return fallback;
      return invalid_argument(source + ": " + where + ": field '" + key + "' missing");
    }
    const int64_t max = limit_of(key);
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > max) {
      return invalid_argument(source + ": " + where + ": field '" + key +
                              "' must be an integer in 0.." + std::to_string(max) + ", got " +
                              v->dump());
    }
    return v->get<int64_t>();
  }
  bool flag(const Json& layer, const char* key, bool fallback) const {
    if (layer.contains(key) && layer[key].is_boolean()) return layer[key].get<bool>();
    if (defaults.contains(key) && defaults[key].is_boolean()) return defaults[key].get<bool>();
    return fallback;
  }

  // A string field of `layer`, `fallback` when absent; another type is an error naming it (not a
  // json::type_error escaping the loader).
  Result<std::string> text(const Json& layer, const std::string& where, const char* key,
                           const char* fallback) const {
    if (!layer.contains(key)) return std::string(fallback);
    if (!layer[key].is_string()) {
      return invalid_argument(source + ": " + where + ": field '" + key +
                              "' must be a string, got " + layer[key].dump());
    }
    return layer[key].get<std::string>();
  }

  Result<Layer> layer(const Json& j, const std::string& where) const {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      return invalid_argument(source + ": " + where + ": field 'type' missing");
    }
    const std::string type = j["type"].get<std::string>();
    Layer l;
    TSR_ASSIGN_OR_RETURN(l.hidden, integer(j, where, "hidden", -1));
    l.bias = flag(j, "bias", false);
    l.dropout = flag(j, "dropout", false);
    if (type == "embedding" || type == "lm_head") {
      l.kind = type == "embedding" ? LayerKind::kEmbedding : LayerKind::kLmHead;
      TSR_ASSIGN_OR_RETURN(l.vocab, integer(j, where, "vocab", -1));
      TSR_ASSIGN_OR_RETURN(l.positions, integer(j, where, "positions", 0));
      l.tied = flag(j, "tied", false);
    } else if (type == "attention") {
      l.kind = LayerKind::kAttention;
      TSR_ASSIGN_OR_RETURN(l.heads, integer(j, where, "heads", -1));
      TSR_ASSIGN_OR_RETURN(l.kv_heads, integer(j, where, "kv_heads", l.heads));
      if (l.heads == 0 || l.hidden % l.heads != 0) {
        if (!j.contains("head_dim")) {
          return invalid_argument(source + ": " + where + ": hidden " + std::to_string(l.hidden) +
                                  " not divisible by heads " + std::to_string(l.heads));
        }
      }
      TSR_ASSIGN_OR_RETURN(l.head_dim,
                           integer(j, where, "head_dim", l.heads > 0 ? l.hidden / l.heads : -1));
      TSR_ASSIGN_OR_RETURN(l.window, integer(j, where, "window", 0));
      l.rotary = flag(j, "rotary", false);
      l.qkv_bias = flag(j, "qkv_bias", false);
      TSR_ASSIGN_OR_RETURN(l.q_lora_rank, integer(j, where, "q_lora_rank", 0));
      TSR_ASSIGN_OR_RETURN(l.kv_lora_rank, integer(j, where, "kv_lora_rank", 0));
      TSR_ASSIGN_OR_RETURN(l.rope_head_dim, integer(j, where, "rope_head_dim", 0));
      TSR_ASSIGN_OR_RETURN(l.v_head_dim, integer(j, where, "v_head_dim", 0));
    } else if (type == "mlp" || type == "moe") {
      l.kind = type == "mlp" ? LayerKind::kMlp : LayerKind::kMoe;
      TSR_ASSIGN_OR_RETURN(l.ffn, integer(j, where, "ffn", 4 * l.hidden));
      TSR_ASSIGN_OR_RETURN(const std::string act, text(j, where, "activation", "gelu"));
      if (act == "gelu") {
        l.activation = MlpActivation::kGelu;
      } else if (act == "swiglu") {
        l.activation = MlpActivation::kSwiGlu;
      } else if (act == "geglu") {
        l.activation = MlpActivation::kGeGlu;
      } else {
        return invalid_argument(source + ": " + where + ": activation '" + act +
                                "' is not gelu, swiglu or geglu");
      }
      if (l.kind == LayerKind::kMoe) {
        TSR_ASSIGN_OR_RETURN(l.experts, integer(j, where, "experts", -1));
        TSR_ASSIGN_OR_RETURN(l.top_k, integer(j, where, "top_k", -1));
        TSR_ASSIGN_OR_RETURN(l.shared_ffn, integer(j, where, "shared_ffn", 0));
        l.shared_gate = flag(j, "shared_gate", false);
      }
    } else if (type == "norm") {
      l.kind = LayerKind::kNorm;
      TSR_ASSIGN_OR_RETURN(const std::string norm, text(j, where, "norm", "layernorm"));
      if (norm != "layernorm" && norm != "rmsnorm") {
        return invalid_argument(source + ": " + where + ": norm '" + norm +
                                "' is not layernorm or rmsnorm");
      }
      l.norm = norm == "rmsnorm" ? NormType::kRmsNorm : NormType::kLayerNorm;
    } else {
      return invalid_argument(source + ": " + where + ": unknown layer type '" + type + "'");
    }
    return l;
  }

  void add(const Layer& l, int block) {
    model.layers.push_back(l);
    model.block_of.push_back(block);
  }

  Status parse(const Json& layers) {
    if (!layers.is_array()) return invalid_argument(source + ": field 'layers' must be a list");
    // Leading embeddings are the pre group; the final norm(s) and LM head the post group.
    size_t post_start = layers.size();
    while (post_start > 0) {
      const Json& j = layers[post_start - 1];
      const bool named = j.is_object() && j.contains("type") && j["type"].is_string();
      const std::string type = named ? j["type"].get<std::string>() : "";
      if (type != "lm_head" && type != "norm") break;
      --post_start;
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string where = "layers[" + std::to_string(i) + "]";
      const Json& j = layers[i];
      if (j.is_object() && j.contains("repeat")) {
        TSR_ASSIGN_OR_RETURN(int64_t repeat, integer(j, where, "repeat", -1));
        if (!j.contains("layers") || !j["layers"].is_array() || j["layers"].empty()) {
          return invalid_argument(source + ": " + where + ": field 'layers' missing");
        }
        std::vector<Layer> group;
        for (size_t k = 0; k < j["layers"].size(); ++k) {
          TSR_ASSIGN_OR_RETURN(Layer l,
                               layer(j["layers"][k], where + ".layers[" + std::to_string(k) + "]"));
          group.push_back(l);
        }
        // Checked before the copies are made: a repeat of 10^12 is refused, not allocated.
        const auto room = static_cast<int64_t>(kMaxLayers - model.layers.size());
        if (repeat > room / static_cast<int64_t>(group.size())) {
          return invalid_argument(source + ": " + where + ": repeat " + std::to_string(repeat) +
                                  " x " + std::to_string(group.size()) +
                                  " layers exceeds the limit of " + std::to_string(kMaxLayers) +
                                  " layers in a model");
        }
        for (int64_t r = 0; r < repeat; ++r) {
          for (const Layer& l : group) add(l, next_block);
          ++next_block;
        }
        continue;
      }
      TSR_ASSIGN_OR_RETURN(Layer l, layer(j, where));
      if (static_cast<int64_t>(model.layers.size()) >= kMaxLayers) {
        return invalid_argument(source + ": " + where + ": more than " +
                                std::to_string(kMaxLayers) + " layers in a model");
      }
      if (i >= post_start) {
        add(l, kPostBlock);
      } else if (l.kind == LayerKind::kEmbedding && next_block == 0) {
        add(l, -1);
      } else {
        add(l, next_block++);
      }
    }
    return Status();
  }
};

// Bounded, regular files only (/dev/zero, a FIFO or a directory are refused by name).
Result<std::string> read_file(std::string_view path) {
  Result<std::string> text = read_text_file(std::string(path), kMaxConfigFileBytes);
  if (text.ok() || text.status().code() != StatusCode::kNotFound) return text;
  return not_found(std::string(path) + ": cannot open (not a file or a known preset)");
}

}  // namespace

Result<Model> model_from_layer_list(std::string_view json_text, std::string_view source) {
  const Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
  if (!json.is_object() || !json.contains("layers")) {
    return invalid_argument(std::string(source) + ": field 'layers' missing");
  }
  Parser parser;
  parser.source = std::string(source);
  parser.defaults = json;
  parser.defaults.erase("layers");
  parser.model.name = json.value("name", std::string(source));
  TSR_RETURN_IF_ERROR(parser.parse(json["layers"]));
  TSR_ASSIGN_OR_RETURN(parser.model.max_seq_len, parser.integer(json, "model", "max_seq_len", 0));
  finalize_model(parser.model);
  Status valid = validate_model(parser.model);
  if (!valid.ok()) return valid.with_context(source);
  return std::move(parser.model);
}

Result<Model> load_model(std::string_view preset_or_path) {
  for (const std::string& name : model_preset_names()) {
    if (name == preset_or_path) return model_preset(name);
  }
  TSR_ASSIGN_OR_RETURN(std::string text, read_file(preset_or_path));
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("layers") && json["layers"].is_array()) {
    return model_from_layer_list(text, preset_or_path);
  }
  return model_from_hf_config(text, preset_or_path);
}

}  // namespace tessera::ir
