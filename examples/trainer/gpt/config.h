// The decoder the GPT trainer builds, read from the model IR (runtime/ir): one uniform stack of
// `layers` blocks (norm, attention, norm, MLP or MoE) between the embedding and the final norm +
// LM head. The same ir::Model drives the planner, so sizes never disagree between the two.
//
//   auto config = gpt::load_config("examples/trainer/configs/tiny-llama.json").value();
//
// Thread-safe (values and pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels.h"
#include "tessera/common/status.h"
#include "tessera/ir/model.h"

namespace tessera::gpt {

struct GptConfig {
  std::string name;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn = 0;  // per expert for MoE
  int64_t vocab = 0;
  int64_t positions = 0;  // learned position rows; 0: rotary embeddings
  int64_t experts = 0;    // 0: dense MLP
  int64_t top_k = 0;
  bool swiglu = false;  // else GeLU (tanh form)
  NormKind norm = NormKind::kRmsNorm;
  bool bias = false;  // linear layers and LayerNorm carry biases
  bool tied = false;  // the LM head is the token embedding
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float router_aux_coef = 0.01f;  // load-balancing loss weight (MoE)
  bool normalize_top_k = true;    // Mixtral: top-k weights renormalised to sum to 1

  bool moe() const { return experts > 0; }
  bool rope() const { return positions == 0; }
};

// The decoder `model` describes. INVALID_ARGUMENT naming the layer when the IR is not a uniform
// decoder this trainer builds (mixed attention shapes, several MoE shapes, missing LM head). The
// IR carries no dropout rate: dropout is not applied (deterministic training), and a model with
// dropout is trained without it.
Result<GptConfig> config_from_model(const ir::Model& model);

// A Hugging Face config.json (through ir::model_from_hf_config), plus the numeric fields the IR
// does not keep: rms_norm_eps / layer_norm_eps, rope_theta, router_aux_loss_coef,
// norm_topk_prob. Errors name the file.
Result<GptConfig> config_from_hf_json(std::string_view json_text, std::string_view source);
Result<GptConfig> load_config(const std::string& path);

// "tiny-llama: h=64 L=2 a=4/2 d=16 f=176 V=256 rope swiglu rms untied dense".
std::string describe(const GptConfig& config);

}  // namespace tessera::gpt
