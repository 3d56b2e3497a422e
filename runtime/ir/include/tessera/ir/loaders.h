// Ways to obtain a Model: a decoder description, a Hugging Face config.json, a generic JSON layer
// list, or a preset name. Errors name the source and the field:
//   "config.json: field 'num_attention_heads' missing"
//   "config.json: hidden_size 4097 not divisible by num_attention_heads 32"
// Thread-safe (pure functions). No exceptions escape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/ir/model.h"

namespace tessera::ir {

// A uniform decoder-only transformer: embedding, `layers` x (norm, attention, norm, MLP or MoE),
// final norm, LM head. Every field is explicit so presets read like their papers.
struct DecoderConfig {
  std::string name;
  int64_t hidden = 0, layers = 0, heads = 0;
  int64_t kv_heads = 0;  // 0: same as heads (MHA)
  int64_t head_dim = 0;  // 0: hidden / heads
  int64_t ffn = 0;       // 0: 4 * hidden
  int64_t vocab = 0;
  int64_t learned_positions = 0;  // rows of a learned position table (GPT); 0 for rotary
  bool alibi = false;  // no learned table and no RoPE: ALiBi's bias on the scores (Falcon option)
  int64_t max_seq_len = 0;
  MlpActivation activation = MlpActivation::kGelu;
  NormType norm = NormType::kLayerNorm;
  bool bias = true, dropout = true, tied = true;
  int64_t experts = 0, top_k = 0;     // experts > 0 makes every MLP a MoE (ffn: per expert)...
  std::vector<int64_t> dense_layers;  // ...except these (0-based; DeepSeek's first layers)...
  int64_t dense_ffn = 0;              // ...whose MLP has this size (0: ffn)
  int64_t shared_ffn = 0;             // MoE: always-on shared experts' intermediate size, summed
  bool shared_gate = false;           // MoE: Qwen2-MoE's sigmoid gate on the shared expert
  int64_t sliding_window = 0;         // attention: keys per query (0: all; Mistral)
  bool qkv_bias = false;              // attention: biases on Q, K, V only (Qwen2)
  // Multi-head latent attention (DeepSeek-V2/V3) when kv_lora_rank > 0; head_dim is then the
  // query/key width per head (qk_nope_head_dim + qk_rope_head_dim). See Layer::kv_lora_rank.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, rope_head_dim = 0, v_head_dim = 0;
  bool single_norm = false;        // one norm feeds attention and MLP (Falcon-7B's parallel block)
  std::vector<std::string> notes;  // copied to Model::notes
};

// Checks the sizes (heads dividing hidden, ...) and builds the layer list.
Result<Model> build_decoder(const DecoderConfig& config);

// Parses a Hugging Face config.json by its model_type: gpt2, llama, mistral, mixtral, qwen2,
// qwen2_moe, deepseek_v2, deepseek_v3, gemma, falcon (also RefinedWeb, RefinedWebModel); the keys
// each reads are in runtime/ir/README.md. Refused, naming the type or key: an unknown model_type,
// and a key that changes cost but that the family does not read (e.g. kv_lora_rank in a llama
// config) or reads with a value it cannot honour (Qwen2's use_sliding_window). Without model_type
// the keys must be unambiguous: GPT-2 (n_embd, ...) or LLaMA/Mixtral (hidden_size, ...). Keys
// left out because they do not change cost (rope_scaling, DeepSeek-V3's multi-token-prediction
// layers) become Model::notes. `source` names the file in errors.
Result<Model> model_from_hf_config(std::string_view json_text, std::string_view source);

// Parses a generic layer list (see runtime/ir/README.md):
//   {"name": "m", "layers": [{"type": "embedding", ...}, {"repeat": 24, "layers": [...]}, ...]}
// Each repetition of a "repeat" group is one block; other layers between the embedding and the
// final norm/LM head are one block each.
Result<Model> model_from_layer_list(std::string_view json_text, std::string_view source);

// gpt3-175b, gpt-1t (Megatron-LM's 1T: h=25600, l=128, a=160, V=51200, s=2048), and the public
// checkpoints of each family: gpt2, llama-7b, llama2-7b/13b/70b, llama3-8b/70b/405b, mistral-7b,
// mixtral-8x7b, qwen2-7b, qwen2-72b, qwen1.5-moe-a2.7b, qwen2-57b-a14b, deepseek-v2-lite,
// deepseek-v2, deepseek-v3, gemma-2b, gemma-7b, falcon-7b, falcon-40b (model_preset_names()).
Result<Model> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

// A preset name, else a file: a layer list when it has "layers", else a config.json.
Result<Model> load_model(std::string_view preset_or_path);

}  // namespace tessera::ir
