// Model presets: the published configurations of each family's public checkpoints, as their
// papers and config.json files give them. tests/planner/ir_families_test.cc checks each against
// its config.json (tests/planner/fixtures/hf) and the published parameter total.
#include <string>
#include <vector>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

DecoderConfig gpt(std::string name, int64_t h, int64_t l, int64_t a, int64_t vocab,
                  int64_t positions = 2048) {
  DecoderConfig c;
  c.name = std::move(name);
  c.hidden = h;
  c.layers = l;
  c.heads = a;
  c.vocab = vocab;
  c.learned_positions = positions;
  c.max_seq_len = positions;
  return c;
}

DecoderConfig llama(std::string name, int64_t h, int64_t l, int64_t a, int64_t kv, int64_t ffn,
                    int64_t vocab, int64_t max_seq) {
  DecoderConfig c;
  c.name = std::move(name);
  c.hidden = h;
  c.layers = l;
  c.heads = a;
  c.kv_heads = kv;
  c.ffn = ffn;
  c.vocab = vocab;
  c.max_seq_len = max_seq;
  c.activation = MlpActivation::kSwiGlu;
  c.norm = NormType::kRmsNorm;
  c.bias = false;
  c.dropout = false;
  c.tied = false;
  return c;
}

// LLaMA-style blocks with routed experts of size `expert_ffn` and always-on shared ones.
DecoderConfig moe(DecoderConfig c, int64_t experts, int64_t top_k, int64_t shared_ffn) {
  c.experts = experts;
  c.top_k = top_k;
  c.shared_ffn = shared_ffn;
  return c;
}

DecoderConfig qwen2(std::string name, int64_t h, int64_t l, int64_t a, int64_t kv, int64_t ffn,
                    int64_t vocab, int64_t max_seq) {
  DecoderConfig c = llama(std::move(name), h, l, a, kv, ffn, vocab, max_seq);
  c.qkv_bias = true;
  return c;
}

DecoderConfig qwen2_moe(std::string name, int64_t h, int64_t l, int64_t a, int64_t kv,
                        int64_t expert_ffn, int64_t experts, int64_t top_k, int64_t shared_ffn,
                        int64_t max_seq) {
  DecoderConfig c = moe(qwen2(std::move(name), h, l, a, kv, expert_ffn, 151936, max_seq), experts,
                        top_k, shared_ffn);
  c.shared_gate = true;
  return c;
}

// DeepSeek-V2/V3: MLA with qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128 and a
// 512-wide K/V latent; `dense` leading layers with a dense MLP of `dense_ffn`.
DecoderConfig deepseek(std::string name, int64_t h, int64_t l, int64_t a, int64_t q_lora_rank,
                       int64_t dense, int64_t dense_ffn, int64_t expert_ffn, int64_t experts,
                       int64_t top_k, int64_t shared, int64_t vocab) {
  DecoderConfig c = moe(llama(std::move(name), h, l, a, a, expert_ffn, vocab, 163840), experts,
                        top_k, shared * expert_ffn);
  for (int64_t i = 0; i < dense; ++i) c.dense_layers.push_back(i);
  c.dense_ffn = dense_ffn;
  c.q_lora_rank = q_lora_rank;
  c.kv_lora_rank = 512;
  c.rope_head_dim = 64;
  c.head_dim = 128 + 64;
  c.v_head_dim = 128;
  return c;
}

// Gemma: head_dim 256 independent of hidden, gated GeLU, tied embeddings.
DecoderConfig gemma(std::string name, int64_t h, int64_t l, int64_t a, int64_t kv, int64_t ffn) {
  DecoderConfig c = llama(std::move(name), h, l, a, kv, ffn, 256000, 8192);
  c.head_dim = 256;
  c.activation = MlpActivation::kGeGlu;
  c.tied = true;
  return c;
}

// Falcon: LayerNorm, GeLU MLP of 4h, no linear biases, tied embeddings, attention and MLP in
// parallel (priced as if sequential: same GEMMs and traffic).
DecoderConfig falcon(std::string name, int64_t h, int64_t l, int64_t a, int64_t kv,
                     bool single_norm) {
  DecoderConfig c = gpt(std::move(name), h, l, a, 65024, 0);
  c.max_seq_len = 2048;
  c.kv_heads = kv;
  c.bias = false;
  c.dropout = false;
  c.single_norm = single_norm;
  return c;
}

std::vector<DecoderConfig> presets() {
  DecoderConfig gpt2 = gpt("gpt2", 768, 12, 12, 50257, 1024);
  DecoderConfig mistral = llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, 32768);
  mistral.sliding_window = 4096;
  DecoderConfig deepseek_v3 =
      deepseek("deepseek-v3", 7168, 61, 128, 1536, 3, 18432, 2048, 256, 8, 1, 129280);
  deepseek_v3.notes.push_back(
      "the multi-token-prediction layer (num_nextn_predict_layers 1) is not part of the model");
  return {
      // GPT-3 (Brown et al. 2020) with the GPT-2 tokenizer's 50257 tokens.
      gpt("gpt3-175b", 12288, 96, 96, 50257),
      // Megatron-LM's 1T configuration (Narayanan et al. 2021, table 1): V padded to 51200.
      gpt("gpt-1t", 25600, 128, 160, 51200),
      gpt2,
      llama("llama-7b", 4096, 32, 32, 32, 11008, 32000, 2048),
      llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096),
      llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096),
      llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096),
      llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
      llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
      llama("llama3-405b", 16384, 126, 128, 8, 53248, 128256, 8192),
      mistral,
      moe(llama("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 32768), 8, 2, 0),
      qwen2("qwen2-7b", 3584, 28, 28, 4, 18944, 152064, 32768),
      qwen2("qwen2-72b", 8192, 80, 64, 8, 29568, 152064, 32768),
      qwen2_moe("qwen1.5-moe-a2.7b", 2048, 24, 16, 16, 1408, 60, 4, 5632, 8192),
      qwen2_moe("qwen2-57b-a14b", 3584, 28, 28, 4, 2560, 64, 8, 20480, 32768),
      deepseek("deepseek-v2-lite", 2048, 27, 16, 0, 1, 10944, 1408, 64, 6, 2, 102400),
      deepseek("deepseek-v2", 5120, 60, 128, 1536, 1, 12288, 1536, 160, 6, 2, 102400),
      deepseek_v3,
      gemma("gemma-2b", 2048, 18, 8, 1, 16384),
      gemma("gemma-7b", 3072, 28, 16, 16, 24576),
      falcon("falcon-7b", 4544, 32, 71, 1, true),
      falcon("falcon-40b", 8192, 60, 128, 8, false),
  };
}

}  // namespace

Result<Model> model_preset(std::string_view name) {
  for (const DecoderConfig& c : presets()) {
    if (c.name == name) return build_decoder(c);
  }
  std::string known;
  for (const std::string& p : model_preset_names()) known += (known.empty() ? "" : ", ") + p;
  return not_found("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const DecoderConfig& c : presets()) names.push_back(c.name);
  return names;
}

}  // namespace tessera::ir
