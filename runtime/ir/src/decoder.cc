// build_decoder: a DecoderConfig checked and expanded into the layer list (presets.cc has presets).
#include <string>
#include <vector>

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
      {"dense intermediate_size", c.dense_ffn, kMaxFfn},
      {"shared expert intermediate size", c.shared_ffn, kMaxFfn},
      {"sliding_window", c.sliding_window, kMaxVocab},
      {"q_lora_rank", c.q_lora_rank, kMaxWidth},
      {"kv_lora_rank", c.kv_lora_rank, kMaxWidth},
      {"qk_rope_head_dim", c.rope_head_dim, kMaxWidth},
      {"v_head_dim", c.v_head_dim, kMaxWidth},
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
  m.notes = c.notes;
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
  attn.window = c.sliding_window;
  // RoPE wherever positions are neither learned (GPT-2/GPT-3) nor ALiBi biases.
  attn.rotary = c.learned_positions == 0 && !c.alibi;
  attn.qkv_bias = c.qkv_bias;
  attn.q_lora_rank = c.q_lora_rank;
  attn.kv_lora_rank = c.kv_lora_rank;
  attn.rope_head_dim = c.rope_head_dim;
  attn.v_head_dim = c.v_head_dim;
  Layer mlp = base;
  mlp.kind = c.experts > 0 ? LayerKind::kMoe : LayerKind::kMlp;
  mlp.ffn = c.ffn > 0 ? c.ffn : 4 * c.hidden;
  mlp.activation = c.activation;
  mlp.experts = c.experts;
  mlp.top_k = c.top_k;
  mlp.shared_ffn = c.shared_ffn;
  mlp.shared_gate = c.shared_gate;
  Layer dense = base;
  dense.kind = LayerKind::kMlp;
  dense.ffn = c.dense_ffn > 0 ? c.dense_ffn : mlp.ffn;
  dense.activation = c.activation;
  std::vector<bool> is_dense(static_cast<size_t>(c.layers), false);
  for (int64_t i : c.dense_layers) {
    if (i < 0 || i >= c.layers) {
      return invalid_argument(n + ": dense layer " + num(i) + " is not in 0.." + num(c.layers - 1));
    }
    is_dense[static_cast<size_t>(i)] = true;
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    const Layer* ffn = is_dense[static_cast<size_t>(i)] ? &dense : &mlp;
    std::vector<const Layer*> block = {&norm, &attn, &norm, ffn};
    if (c.single_norm) block = {&norm, &attn, ffn};
    for (const Layer* l : block) {
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

}  // namespace tessera::ir
