// build_decoder and the presets. Preset figures come from the models' papers / config.json files.
#include <string>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

std::string num(int64_t v) {
  return std::to_string(v);
}

// The IR's limits (model.h) under the config.json names, checked before the layer list is built:
// a num_hidden_layers of 10^12 must be refused, not allocated.
Status check_limits(const DecoderConfig& c) {
  const struct {
    const char* field;
    int64_t value, max;
  } limits[] = {
      {"hidden_size", c.hidden, kMaxWidth},
      {"num_hidden_layers", c.layers, (kMaxLayers - 3) / 4},  // 4 layers a block, 3 outside
      {"num_attention_heads", c.heads, kMaxHeads},
      {"num_key_value_heads", c.kv_heads, kMaxHeads},
      {"head_dim", c.head_dim, kMaxWidth},
      {"intermediate_size", c.ffn, kMaxFfn},
      {"vocab_size", c.vocab, kMaxVocab},
      {"n_positions", c.learned_positions, kMaxVocab},
      {"max_position_embeddings", c.max_seq_len, kMaxVocab},
      {"num_local_experts", c.experts, kMaxExperts},
  };
  for (const auto& l : limits) {
    if (l.value > l.max) {
      return invalid_argument(c.name + ": " + l.field + " " + num(l.value) +
                              " exceeds the limit of " + num(l.max));
    }
  }
  return Status();
}

}  // namespace

Result<Model> build_decoder(const DecoderConfig& c) {
  const std::string& n = c.name;
  if (c.hidden <= 0) return invalid_argument(n + ": hidden_size must be positive");
  if (c.layers <= 0) return invalid_argument(n + ": num_hidden_layers must be positive");
  if (c.heads <= 0) return invalid_argument(n + ": num_attention_heads must be positive");
  if (c.vocab <= 0) return invalid_argument(n + ": vocab_size must be positive");
  TSR_RETURN_IF_ERROR(check_limits(c));
  const int64_t kv = c.kv_heads > 0 ? c.kv_heads : c.heads;
  if (c.head_dim == 0 && c.hidden % c.heads != 0) {
    return invalid_argument(n + ": hidden_size " + num(c.hidden) +
                            " not divisible by num_attention_heads " + num(c.heads));
  }
  if (c.heads % kv != 0) {
    return invalid_argument(n + ": num_attention_heads " + num(c.heads) +
                            " not divisible by num_key_value_heads " + num(kv));
  }
  if (c.experts > 0 && (c.top_k <= 0 || c.top_k > c.experts)) {
    return invalid_argument(n + ": num_experts_per_tok " + num(c.top_k) + " must be in 1.." +
                            num(c.experts));
  }
  Model m;
  m.name = c.name;
  m.max_seq_len = c.max_seq_len;
  Layer base;
  base.hidden = c.hidden;
  base.bias = c.bias;
  base.dropout = c.dropout;
  base.norm = c.norm;

  Layer emb = base;
  emb.kind = LayerKind::kEmbedding;
  emb.vocab = c.vocab;
  emb.positions = c.learned_positions;
  m.layers.push_back(emb);
  m.block_of.push_back(-1);

  Layer norm = base;
  norm.kind = LayerKind::kNorm;
  Layer attn = base;
  attn.kind = LayerKind::kAttention;
  attn.heads = c.heads;
  attn.kv_heads = kv;
  attn.head_dim = c.head_dim > 0 ? c.head_dim : c.hidden / c.heads;
  Layer mlp = base;
  mlp.kind = c.experts > 0 ? LayerKind::kMoe : LayerKind::kMlp;
  mlp.ffn = c.ffn > 0 ? c.ffn : 4 * c.hidden;
  mlp.activation = c.activation;
  mlp.experts = c.experts;
  mlp.top_k = c.top_k;
  for (int64_t i = 0; i < c.layers; ++i) {
    for (const Layer* l : {&norm, &attn, &norm, &mlp}) {
      m.layers.push_back(*l);
      m.block_of.push_back(static_cast<int>(i));
    }
  }
  Layer head = base;
  head.kind = LayerKind::kLmHead;
  head.vocab = c.vocab;
  head.tied = c.tied;
  m.layers.push_back(norm);
  m.block_of.push_back(kPostBlock);
  m.layers.push_back(head);
  m.block_of.push_back(kPostBlock);
  finalize_model(m);
  TSR_RETURN_IF_ERROR(validate_model(m));
  return m;
}

namespace {

DecoderConfig gpt(std::string name, int64_t h, int64_t l, int64_t a, int64_t vocab) {
  DecoderConfig c;
  c.name = std::move(name);
  c.hidden = h;
  c.layers = l;
  c.heads = a;
  c.vocab = vocab;
  c.learned_positions = 2048;
  c.max_seq_len = 2048;
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

std::vector<DecoderConfig> presets() {
  DecoderConfig mixtral = llama("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 32768);
  mixtral.experts = 8;
  mixtral.top_k = 2;
  return {
      // GPT-3 (Brown et al. 2020) with the GPT-2 tokenizer's 50257 tokens.
      gpt("gpt3-175b", 12288, 96, 96, 50257),
      // Megatron-LM's 1T configuration (Narayanan et al. 2021, table 1): V padded to 51200.
      gpt("gpt-1t", 25600, 128, 160, 51200),
      llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096),
      llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096),
      llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096),
      llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
      llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
      llama("llama3-405b", 16384, 126, 128, 8, 53248, 128256, 8192),
      mixtral,
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
