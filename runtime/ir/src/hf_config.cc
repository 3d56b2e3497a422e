// Hugging Face config.json -> Model: picks the family by model_type (hf_families.cc has one
// reader each) and refuses what no reader would honour, so that a config is never planned as
// another model. Keys outside kCostKeys (token ids, dtypes, init ranges, rope_theta, ...) do not
// change cost and are not looked at.
#include <algorithm>
#include <string>

#include "hf_fields.h"
#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

using hf::Family;
using hf::Fields;
using hf::Json;

// Keys that change a model's parameters, FLOPs or memory in some family. A config carrying one
// (with a value that turns something on) that its family does not read is refused.
constexpr std::string_view kCostKeys[] = {
    // experts
    "num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts",
    "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step",
    "mlp_only_layers", "first_k_dense_replace", "moe_layer_freq",
    // attention shapes
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "head_dim",
    "sliding_window", "use_sliding_window", "max_window_layers", "multi_query", "num_kv_heads",
    "n_head_kv", "alibi", "attn_logit_softcapping", "cross_attention_layers", "add_cross_attention",
    "is_encoder_decoder", "layer_types",
    // block layout, widths and biases
    "new_decoder_architecture", "parallel_attn", "num_ln_in_parallel_attn", "ffn_hidden_size",
    "n_inner", "bias", "attention_bias", "mlp_bias", "final_logit_softcapping",
    "num_nextn_predict_layers"};

// Families read without a model_type: the two key sets the loader read before families existed.
const Family kUntypedGpt2{"", hf::read_gpt2, {"n_inner"}};
const Family kUntypedLlama{
    "", hf::read_llama, {"head_dim", "attention_bias", "mlp_bias", "num_local_experts"}};

std::string supported_types() {
  std::string out;
  for (const Family& f : hf::families())
    out += (out.empty() ? "" : ", ") + std::string(f.model_type);
  return out;
}

Result<const Family*> family_of(const Fields& f) {
  if (!f.present("model_type")) return f.has("n_embd") ? &kUntypedGpt2 : &kUntypedLlama;
  const Json& type = f.json()["model_type"];
  if (!type.is_string()) {
    return invalid_argument(f.source() + ": field 'model_type' must be a string, got " +
                            type.dump());
  }
  const std::string name = type.get<std::string>();
  for (const Family& family : hf::families()) {
    if (name == family.model_type) return &family;
  }
  return invalid_argument(f.source() + ": model_type '" + name + "' is not supported (" +
                          supported_types() + ")");
}

// A key that changes cost and that the family does not read is refused, naming it.
Status check_cost_keys(const Fields& f, const Family& family) {
  for (std::string_view key : kCostKeys) {
    if (!f.active(key)) continue;
    if (std::find(family.reads.begin(), family.reads.end(), key) != family.reads.end()) continue;
    const std::string k(key);
    if (*family.model_type == '\0') {
      return invalid_argument(f.source() + ": key '" + k + "' without model_type is ambiguous " +
                              "(not a " + (&family == &kUntypedGpt2 ? "GPT-2" : "LLaMA") +
                              " key); add model_type");
    }
    return invalid_argument(f.source() + ": model_type '" + family.model_type +
                            "' does not support key '" + k + "' (it would change the cost)");
  }
  return Status();
}

}  // namespace

Result<Model> model_from_hf_config(std::string_view json_text, std::string_view source) {
  const Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
  if (!json.is_object()) return invalid_argument(std::string(source) + ": not a JSON object");
  const Fields fields(json, source);
  TSR_ASSIGN_OR_RETURN(const Family* family, family_of(fields));
  TSR_RETURN_IF_ERROR(check_cost_keys(fields, *family));
  Result<DecoderConfig> config = family->read(fields);
  if (!config.ok()) return config.status();
  Result<Model> model = build_decoder(*config);
  if (!model.ok()) return model.status().with_context(source);
  return model;
}

}  // namespace tessera::ir
