// Hugging Face config.json -> DecoderConfig. Two key families: GPT-2 (n_embd, ...) and the
// LLaMA/Mistral/Mixtral family (hidden_size, ...). Defaults follow the transformers library.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

using Json = nlohmann::json;

// Reads config[key] as a positive integer. Missing: nullopt when optional, else an error.
class Fields {
 public:
  Fields(const Json& json, std::string_view source) : json_(json), source_(source) {}

  Result<int64_t> required(const char* key) const {
    if (!json_.contains(key) || json_[key].is_null()) {
      return invalid_argument(source_ + ": field '" + key + "' missing");
    }
    return positive(key);
  }
  // A missing or null field gives `fallback`.
  Result<int64_t> optional(const char* key, int64_t fallback) const {
    if (!json_.contains(key) || json_[key].is_null()) return fallback;
    return positive(key);
  }
  bool flag(const char* key, bool fallback) const {
    if (!json_.contains(key) || !json_[key].is_boolean()) return fallback;
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
  const std::string& source() const { return source_; }

 private:
  // Bounded by the largest of the IR's limits (model.h), so that defaults such as 4 x n_embd
  // cannot overflow; build_decoder then applies each field's own limit.
  Result<int64_t> positive(const char* key) const {
    const Json& v = json_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxVocab) {
      return invalid_argument(source_ + ": field '" + key +
                              "' must be a positive integer (at most " + std::to_string(kMaxVocab) +
                              "), got " + v.dump());
    }
    return v.get<int64_t>();
  }
  const Json& json_;
  std::string source_;
};

std::string model_name(const Fields& f) {
  std::string name = f.text("_name_or_path", "");
  if (name.empty()) name = f.text("model_type", "");
  return name.empty() ? f.source() : name;
}

Result<DecoderConfig> gpt2_style(const Fields& f) {
  DecoderConfig c;
  c.name = model_name(f);
  TSR_ASSIGN_OR_RETURN(c.hidden, f.required("n_embd"));
  TSR_ASSIGN_OR_RETURN(c.layers, f.required("n_layer"));
  TSR_ASSIGN_OR_RETURN(c.heads, f.required("n_head"));
  TSR_ASSIGN_OR_RETURN(c.vocab, f.required("vocab_size"));
  TSR_ASSIGN_OR_RETURN(c.ffn, f.optional("n_inner", 4 * c.hidden));
  TSR_ASSIGN_OR_RETURN(c.learned_positions, f.required("n_positions"));
  c.max_seq_len = c.learned_positions;
  if (c.hidden % c.heads != 0) {
    return invalid_argument(f.source() + ": n_embd " + std::to_string(c.hidden) +
                            " not divisible by n_head " + std::to_string(c.heads));
  }
  c.tied = f.flag("tie_word_embeddings", true);
  c.dropout = f.number("resid_pdrop", 0.1) > 0 || f.number("attn_pdrop", 0.1) > 0;
  return c;
}

Result<DecoderConfig> llama_style(const Fields& f) {
  DecoderConfig c;
  c.name = model_name(f);
  TSR_ASSIGN_OR_RETURN(c.hidden, f.required("hidden_size"));
  TSR_ASSIGN_OR_RETURN(c.layers, f.required("num_hidden_layers"));
  TSR_ASSIGN_OR_RETURN(c.heads, f.required("num_attention_heads"));
  TSR_ASSIGN_OR_RETURN(c.kv_heads, f.optional("num_key_value_heads", c.heads));
  TSR_ASSIGN_OR_RETURN(c.ffn, f.required("intermediate_size"));
  TSR_ASSIGN_OR_RETURN(c.vocab, f.required("vocab_size"));
  TSR_ASSIGN_OR_RETURN(c.max_seq_len, f.optional("max_position_embeddings", 0));
  TSR_ASSIGN_OR_RETURN(c.head_dim, f.optional("head_dim", 0));
  // An explicit head_dim decouples heads from hidden (Mistral-style); otherwise they must divide.
  if (c.head_dim == 0 && c.hidden % c.heads != 0) {
    return invalid_argument(f.source() + ": hidden_size " + std::to_string(c.hidden) +
                            " not divisible by num_attention_heads " + std::to_string(c.heads));
  }
  if (c.heads % c.kv_heads != 0) {
    return invalid_argument(f.source() + ": num_attention_heads " + std::to_string(c.heads) +
                            " not divisible by num_key_value_heads " + std::to_string(c.kv_heads));
  }
  const std::string act = f.text("hidden_act", "silu");
  c.activation = (act == "silu" || act == "swiglu" || act == "swish") ? MlpActivation::kSwiGlu
                                                                      : MlpActivation::kGelu;
  c.norm =
      f.has("layer_norm_eps") && !f.has("rms_norm_eps") ? NormType::kLayerNorm : NormType::kRmsNorm;
  c.bias = f.flag("attention_bias", false) || f.flag("mlp_bias", false);
  c.dropout = f.number("attention_dropout", 0) > 0 || f.number("hidden_dropout", 0) > 0;
  c.tied = f.flag("tie_word_embeddings", false);
  TSR_ASSIGN_OR_RETURN(c.experts, f.optional("num_local_experts", 0));
  {
    if (c.experts > 0) {
      TSR_ASSIGN_OR_RETURN(c.top_k, f.required("num_experts_per_tok"));
      if (c.top_k > c.experts) {
        return invalid_argument(f.source() + ": num_experts_per_tok " + std::to_string(c.top_k) +
                                " exceeds num_local_experts " + std::to_string(c.experts));
      }
    }
  }
  return c;
}

}  // namespace

Result<Model> model_from_hf_config(std::string_view json_text, std::string_view source) {
  const Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
  if (!json.is_object()) return invalid_argument(std::string(source) + ": not a JSON object");
  const Fields fields(json, source);
  // GPT-2 keys win when present: some configs carry both (attribute_map aliases).
  Result<DecoderConfig> config = fields.has("n_embd") ? gpt2_style(fields) : llama_style(fields);
  if (!config.ok()) return config.status();
  Result<Model> model = build_decoder(*config);
  if (!model.ok()) return model.status().with_context(source);
  return model;
}

}  // namespace tessera::ir
