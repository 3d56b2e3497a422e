// Model totals and structural checks.
#include "tessera/ir/model.h"

#include <algorithm>
#include <string>

namespace tessera::ir {

int64_t model_params(const Model& model) {
  int64_t total = 0;
  for (const Layer& layer : model.layers) total += layer_params(layer).total();
  return total;
}

int64_t model_active_params(const Model& model) {
  int64_t total = 0;
  for (const Layer& layer : model.layers) {
    const ParamSplit p = layer_params(layer);
    total += p.total() - p.expert;
    if (layer.kind == LayerKind::kMoe && layer.experts > 0) {
      total += p.expert / layer.experts * layer.top_k;
    }
  }
  return total;
}

double model_forward_flops(const Model& model, int64_t batch, int64_t seq) {
  double flops = 0;
  for (const Layer& layer : model.layers) flops += layer_forward_flops(layer, batch, seq);
  return flops;
}

double model_training_flops(const Model& model, int64_t batch, int64_t seq) {
  return 3.0 * model_forward_flops(model, batch, seq);
}

void finalize_model(Model& model) {
  int blocks = 0;
  for (int b : model.block_of) {
    if (b != kPostBlock) blocks = std::max(blocks, b + 1);
  }
  model.num_blocks = blocks;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (model.block_of[i] == kPostBlock) model.block_of[i] = blocks;
    const Layer& l = model.layers[i];
    if (l.kind == LayerKind::kAttention && l.heads > model.heads) {
      model.heads = l.heads;
      model.kv_heads = l.kv_heads;
    }
    if (l.hidden > model.hidden) model.hidden = l.hidden;
    if (l.kind == LayerKind::kEmbedding || l.kind == LayerKind::kLmHead) {
      model.vocab = std::max(model.vocab, l.vocab);
    }
    if (l.kind == LayerKind::kLmHead) model.tied_embeddings = l.tied;
    if (l.kind == LayerKind::kMoe) model.experts = std::max(model.experts, l.experts);
    if (l.kind == LayerKind::kEmbedding && l.positions > 0 && model.max_seq_len == 0) {
      model.max_seq_len = l.positions;
    }
  }
}

namespace {

// One size against its limit; `what` names the field the way the error shows it.
Status within(const std::string& where, const char* what, int64_t value, int64_t max) {
  if (value <= max) return Status();
  return invalid_argument(where + what + " " + std::to_string(value) + " exceeds the limit of " +
                          std::to_string(max));
}

Status check_limits(const std::string& where, const Layer& l) {
  TSR_RETURN_IF_ERROR(within(where, "hidden size", l.hidden, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "head_dim", l.head_dim, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "ffn size", l.ffn, kMaxFfn));
  TSR_RETURN_IF_ERROR(within(where, "heads", l.heads, kMaxHeads));
  TSR_RETURN_IF_ERROR(within(where, "kv_heads", l.kv_heads, kMaxHeads));
  TSR_RETURN_IF_ERROR(within(where, "vocab size", l.vocab, kMaxVocab));
  TSR_RETURN_IF_ERROR(within(where, "positions", l.positions, kMaxVocab));
  TSR_RETURN_IF_ERROR(within(where, "experts", l.experts, kMaxExperts));
  TSR_RETURN_IF_ERROR(within(where, "window", l.window, kMaxVocab));
  TSR_RETURN_IF_ERROR(within(where, "q_lora_rank", l.q_lora_rank, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "kv_lora_rank", l.kv_lora_rank, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "rope_head_dim", l.rope_head_dim, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "v_head_dim", l.v_head_dim, kMaxWidth));
  TSR_RETURN_IF_ERROR(within(where, "shared ffn size", l.shared_ffn, kMaxFfn));
  if (l.head_dim < 0 || l.ffn < 0 || l.heads < 0 || l.kv_heads < 0 || l.vocab < 0 ||
      l.positions < 0 || l.experts < 0 || l.top_k < 0 || l.window < 0 || l.q_lora_rank < 0 ||
      l.kv_lora_rank < 0 || l.rope_head_dim < 0 || l.v_head_dim < 0 || l.shared_ffn < 0) {
    return invalid_argument(where + "sizes must not be negative");
  }
  return Status();
}

// Multi-head latent attention needs its widths; its fields on plain attention would be ignored.
Status check_mla(const std::string& where, const Layer& l) {
  if (!is_mla(l)) {
    if (l.q_lora_rank > 0 || l.rope_head_dim > 0 || l.v_head_dim > 0) {
      return invalid_argument(where +
                              "q_lora_rank, rope_head_dim and v_head_dim need kv_lora_rank");
    }
    return Status();
  }
  if (l.v_head_dim <= 0 || l.rope_head_dim <= 0 || l.rope_head_dim >= l.head_dim) {
    return invalid_argument(where +
                            "latent attention needs v_head_dim > 0 and 0 < rope_head_dim < "
                            "head_dim " +
                            std::to_string(l.head_dim));
  }
  if (l.bias || l.qkv_bias) return invalid_argument(where + "latent attention with biases");
  if (l.kv_heads != l.heads) {
    return invalid_argument(where + "latent attention has kv_heads = heads (one K/V per head)");
  }
  return Status();
}

// The total in checked arithmetic: each layer is below 2^61 by the limits, their sum need not be.
Status check_total_params(const Model& model) {
  int64_t total = 0;
  for (const Layer& layer : model.layers) {
    if (__builtin_add_overflow(total, layer_params(layer).total(), &total) || total > kMaxParams) {
      return invalid_argument("model '" + model.name + "' has more than " +
                              std::to_string(kMaxParams) + " parameters");
    }
  }
  return Status();
}

}  // namespace

Status validate_model(const Model& model) {
  if (model.layers.empty()) return invalid_argument("model '" + model.name + "' has no layers");
  if (static_cast<int64_t>(model.layers.size()) > kMaxLayers) {
    return invalid_argument("model '" + model.name + "' has " +
                            std::to_string(model.layers.size()) + " layers, above the limit of " +
                            std::to_string(kMaxLayers));
  }
  if (model.block_of.size() != model.layers.size()) {
    return internal_error("model '" + model.name + "': block_of size differs from layers");
  }
  if (model.num_blocks < 1) {
    return invalid_argument("model '" + model.name + "' has no transformer blocks");
  }
  int prev = -1;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const Layer& l = model.layers[i];
    const std::string where =
        "layer " + std::to_string(i) + " (" + std::string(layer_kind_name(l.kind)) + "): ";
    if (model.block_of[i] < prev) return invalid_argument(where + "blocks out of order");
    prev = model.block_of[i];
    if (l.hidden <= 0) return invalid_argument(where + "hidden size must be positive");
    TSR_RETURN_IF_ERROR(check_limits(where, l));
    switch (l.kind) {
      case LayerKind::kAttention:
        if (l.heads <= 0 || l.kv_heads <= 0 || l.head_dim <= 0) {
          return invalid_argument(where + "heads, kv_heads and head_dim must be positive");
        }
        if (l.heads % l.kv_heads != 0) {
          return invalid_argument(where + "num_attention_heads " + std::to_string(l.heads) +
                                  " not divisible by num_key_value_heads " +
                                  std::to_string(l.kv_heads));
        }
        TSR_RETURN_IF_ERROR(check_mla(where, l));
        break;
      case LayerKind::kMlp:
        if (l.ffn <= 0) return invalid_argument(where + "ffn size must be positive");
        break;
      case LayerKind::kMoe:
        if (l.ffn <= 0 || l.experts <= 0 || l.top_k <= 0 || l.top_k > l.experts) {
          return invalid_argument(where + "needs ffn > 0 and 0 < top_k <= experts");
        }
        if (l.shared_gate && l.shared_ffn == 0) {
          return invalid_argument(where + "a shared-expert gate needs a shared ffn size");
        }
        break;
      case LayerKind::kEmbedding:
      case LayerKind::kLmHead:
        if (l.vocab <= 0) return invalid_argument(where + "vocab size must be positive");
        break;
      case LayerKind::kNorm: break;
    }
  }
  return check_total_params(model);
}

}  // namespace tessera::ir
