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
  int64_t max_seq_len = 0;
  MlpActivation activation = MlpActivation::kGelu;
  NormType norm = NormType::kLayerNorm;
  bool bias = true, dropout = true, tied = true;
  int64_t experts = 0, top_k = 0;  // experts > 0 makes every MLP a MoE
};

// Checks the sizes (heads dividing hidden, ...) and builds the layer list.
Result<Model> build_decoder(const DecoderConfig& config);

// Parses a Hugging Face config.json: GPT-2 keys (n_embd, n_layer, n_head, n_inner, n_positions,
// vocab_size) or LLaMA/Mistral/Mixtral keys (hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, num_local_experts,
// num_experts_per_tok, tie_word_embeddings). `source` names the file in errors.
Result<Model> model_from_hf_config(std::string_view json_text, std::string_view source);

// Parses a generic layer list (see runtime/ir/README.md):
//   {"name": "m", "layers": [{"type": "embedding", ...}, {"repeat": 24, "layers": [...]}, ...]}
// Each repetition of a "repeat" group is one block; other layers between the embedding and the
// final norm/LM head are one block each.
Result<Model> model_from_layer_list(std::string_view json_text, std::string_view source);

// gpt3-175b, llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b,
// gpt-1t (Megatron-LM's 1T: h=25600, l=128, a=160, V=51200, s=2048).
Result<Model> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

// A preset name, else a file: a layer list when it has "layers", else a config.json.
Result<Model> load_model(std::string_view preset_or_path);

}  // namespace tessera::ir
