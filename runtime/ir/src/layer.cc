// Per-layer arithmetic. Every count here is for t = 1 and one micro-batch; see layer.h.
#include "tessera/ir/layer.h"

#include <algorithm>

namespace tessera::ir {
namespace {

bool gated(const Layer& l) {
  return l.activation != MlpActivation::kGelu;
}

// Width of the MLP input projection for an intermediate size f: gated forms fuse gate and up.
int64_t up_width(const Layer& l, int64_t f) {
  return gated(l) ? 2 * f : f;
}

int64_t mlp_params(const Layer& l, int64_t f) {
  int64_t p = up_width(l, f) * l.hidden + f * l.hidden;
  if (l.bias) p += up_width(l, f) + l.hidden;
  return p;
}

// Stored activations inside one MLP of intermediate size f (GeLU: its input and output, 2 x 2f
// bytes per token = 16 h for f = 4h as in the paper; gated: gate, up and their product, 3 x 2f).
double mlp_inner_bytes_per_token(const Layer& l, int64_t f) {
  return (gated(l) ? 6.0 : 4.0) * static_cast<double>(f);
}

// Keys each query attends to: the sequence, or the sliding window when it is shorter.
double keys_per_query(const Layer& l, int64_t seq) {
  return static_cast<double>(l.window > 0 ? std::min(seq, l.window) : seq);
}

// MLA widths: per-head query/key (head_dim) and value widths, all heads together.
struct MlaWidths {
  double qk = 0, v = 0, latent = 0;  // latent: q_lora_rank + kv_lora_rank (normed, replicated)
};
MlaWidths mla_widths(const Layer& l) {
  const double a = static_cast<double>(l.heads);
  return {a * static_cast<double>(l.head_dim), a * static_cast<double>(l.v_head_dim),
          static_cast<double>(l.q_lora_rank + l.kv_lora_rank)};
}

ParamSplit mla_params(const Layer& l) {
  const int64_t qk = l.heads * l.head_dim, v = l.heads * l.v_head_dim;
  const int64_t nope = l.head_dim - l.rope_head_dim;
  ParamSplit p;
  // Down-projections and the latents' RMSNorm weights: replicated.
  p.replicated = l.hidden * (l.kv_lora_rank + l.rope_head_dim) + l.kv_lora_rank;
  if (l.q_lora_rank > 0) {
    p.replicated += l.hidden * l.q_lora_rank + l.q_lora_rank;
    p.tp_sharded = l.q_lora_rank * qk;
  } else {
    p.tp_sharded = l.hidden * qk;
  }
  // K (no-rope part) and V up-projection from the latent, and the output projection.
  p.tp_sharded += l.kv_lora_rank * l.heads * (nope + l.v_head_dim) + v * l.hidden;
  return p;
}

std::vector<Gemm> mla_gemms(const Layer& l, int64_t batch, int64_t seq) {
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq);
  const double h = static_cast<double>(l.hidden), s = static_cast<double>(seq);
  const double keys = keys_per_query(l, seq);
  const double bh = static_cast<double>(batch * l.heads);
  const double a = static_cast<double>(l.heads);
  const double q_rank = static_cast<double>(l.q_lora_rank);
  const double kv_rank = static_cast<double>(l.kv_lora_rank);
  const double rope = static_cast<double>(l.rope_head_dim);
  const MlaWidths w = mla_widths(l);
  std::vector<Gemm> g;
  if (l.q_lora_rank > 0) {
    g.push_back({"q_down", tokens, q_rank, h, 1, GemmSplit::kNone, false});
    g.push_back({"q_up", tokens, w.qk, q_rank, 1, GemmSplit::kColumn, false});
  } else {
    g.push_back({"q", tokens, w.qk, h, 1, GemmSplit::kColumn, false});
  }
  const double nope = static_cast<double>(l.head_dim) - rope;
  g.push_back({"kv_down", tokens, kv_rank + rope, h, 1, GemmSplit::kNone, false});
  g.push_back({"kv_up", tokens, a * nope + w.v, kv_rank, 1, GemmSplit::kColumn, false});
  g.push_back({"scores", s, keys, static_cast<double>(l.head_dim), bh, GemmSplit::kHeads, true});
  g.push_back({"context", s, static_cast<double>(l.v_head_dim), keys, bh, GemmSplit::kHeads, true});
  g.push_back({"attn_out", tokens, h, w.v, 1, GemmSplit::kRow, false});
  return g;
}

}  // namespace

std::string_view layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kAttention: return "attention";
    case LayerKind::kMlp: return "mlp";
    case LayerKind::kMoe: return "moe";
    case LayerKind::kNorm: return "norm";
    case LayerKind::kLmHead: return "lm_head";
  }
  return "unknown";
}

ParamSplit layer_params(const Layer& l) {
  ParamSplit p;
  switch (l.kind) {
    case LayerKind::kEmbedding:
      p.tp_sharded = l.vocab * l.hidden;  // vocab-parallel
      p.replicated = l.positions * l.hidden;
      break;
    case LayerKind::kAttention: {
      if (is_mla(l)) return mla_params(l);
      const int64_t q = l.heads * l.head_dim, kv = l.kv_heads * l.head_dim;
      const bool in_bias = l.bias || l.qkv_bias;
      p.tp_sharded = 2 * l.hidden * q + (in_bias ? q : 0);
      p.kv_sharded = 2 * l.hidden * kv + (in_bias ? 2 * kv : 0);
      p.replicated = l.bias ? l.hidden : 0;  // the output bias is added after the reduction
      break;
    }
    case LayerKind::kMlp:
      p.tp_sharded = mlp_params(l, l.ffn) - (l.bias ? l.hidden : 0);
      p.replicated = l.bias ? l.hidden : 0;
      break;
    case LayerKind::kMoe:
      p.replicated = l.hidden * l.experts;  // router
      p.expert = l.experts * mlp_params(l, l.ffn);
      if (l.shared_ffn > 0) {
        // Shared experts: a dense MLP split by TP like any other (its output bias replicated).
        p.tp_sharded = mlp_params(l, l.shared_ffn) - (l.bias ? l.hidden : 0);
        p.replicated += (l.bias ? l.hidden : 0) + (l.shared_gate ? l.hidden : 0);
      }
      break;
    case LayerKind::kNorm:
      p.replicated = l.norm == NormType::kLayerNorm ? 2 * l.hidden : l.hidden;
      break;
    case LayerKind::kLmHead: p.tp_sharded = l.tied ? 0 : l.vocab * l.hidden; break;
  }
  return p;
}

std::vector<Gemm> layer_gemms(const Layer& l, int64_t batch, int64_t seq) {
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq);
  const double h = static_cast<double>(l.hidden);
  switch (l.kind) {
    case LayerKind::kAttention: {
      if (is_mla(l)) return mla_gemms(l, batch, seq);
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      const double s = static_cast<double>(seq), d = static_cast<double>(l.head_dim);
      const double keys = keys_per_query(l, seq);
      const double bh = static_cast<double>(batch * l.heads);
      return {
          {"qkv", tokens, q + 2 * kv, h, 1, GemmSplit::kColumn, false},
          {"scores", s, keys, d, bh, GemmSplit::kHeads, true},
          {"context", s, d, keys, bh, GemmSplit::kHeads, true},
          {"attn_out", tokens, h, q, 1, GemmSplit::kRow, false},
      };
    }
    case LayerKind::kMlp:
      return {{"mlp_up", tokens, static_cast<double>(up_width(l, l.ffn)), h, 1, GemmSplit::kColumn,
               false},
              {"mlp_down", tokens, h, static_cast<double>(l.ffn), 1, GemmSplit::kRow, false}};
    case LayerKind::kMoe: {
      // Balanced routing: each expert sees tokens * top_k / E tokens. The shared expert's gate
      // is one more router column.
      const double e = static_cast<double>(l.experts);
      const double per_expert = tokens * static_cast<double>(l.top_k) / e;
      std::vector<Gemm> g = {
          {"router", tokens, e + (l.shared_gate ? 1 : 0), h, 1, GemmSplit::kNone, false},
          {"expert_up", per_expert, static_cast<double>(up_width(l, l.ffn)), h, e,
           GemmSplit::kExperts, false},
          {"expert_down", per_expert, h, static_cast<double>(l.ffn), e, GemmSplit::kExpertsRow,
           false}};
      if (l.shared_ffn > 0) {
        const double f = static_cast<double>(l.shared_ffn);
        g.push_back({"shared_up", tokens, static_cast<double>(up_width(l, l.shared_ffn)), h, 1,
                     GemmSplit::kColumn, false});
        g.push_back({"shared_down", tokens, h, f, 1, GemmSplit::kRow, false});
      }
      return g;
    }
    case LayerKind::kLmHead:
      return {{"lm_head", tokens, static_cast<double>(l.vocab), h, 1, GemmSplit::kColumn, false}};
    case LayerKind::kEmbedding:
    case LayerKind::kNorm:
      return {};  // a gather and an elementwise op: memory-bound, see layer_traffic
  }
  return {};
}

double layer_forward_flops(const Layer& layer, int64_t batch, int64_t seq) {
  double flops = 0;
  for (const Gemm& g : layer_gemms(layer, batch, seq)) flops += g.flops();
  return flops;
}

ActivationBytes layer_activations(const Layer& l, int64_t batch, int64_t seq) {
  const double t = static_cast<double>(batch) * static_cast<double>(seq);  // tokens
  const double h = static_cast<double>(l.hidden);
  const double mask = l.dropout ? 1.0 : 0.0;
  ActivationBytes a;
  a.input = 2 * t * h;
  switch (l.kind) {
    case LayerKind::kEmbedding:
      a.replicated = mask * t * h;  // embedding dropout mask
      a.input = 0;
      break;
    case LayerKind::kAttention: {
      const double keys = keys_per_query(l, seq);
      // QKV input 2th and the output dropout mask th are not split by TP (only by SP);
      // Q, K, V and the output projection's input are.
      a.replicated = 2 * t * h + mask * t * h;
      if (is_mla(l)) {
        // The latents' norm inputs and outputs, and the shared rope key (replicated); per-head
        // Q, K (query/key width), V and the output projection's input (value width).
        const MlaWidths w = mla_widths(l);
        a.replicated += 4 * t * w.latent + 2 * t * static_cast<double>(l.rope_head_dim);
        a.sharded = 2 * t * (2 * w.qk + w.v) + 2 * t * w.v;
      } else {
        const double q = static_cast<double>(l.heads * l.head_dim);
        const double kv = static_cast<double>(l.kv_heads * l.head_dim);
        a.sharded = 2 * t * (q + 2 * kv) + 2 * t * q;
      }
      // Softmax output (2 bytes), and with dropout its mask (1) and output (2): 5as^2b or 2as^2b
      // (s^2 becomes s x window under a sliding window).
      a.scores = (l.dropout ? 5.0 : 2.0) * static_cast<double>(l.heads) * keys * t;
      break;
    }
    case LayerKind::kMlp:
      a.replicated = 2 * t * h + mask * t * h;
      a.sharded = mlp_inner_bytes_per_token(l, l.ffn) * t;
      break;
    case LayerKind::kMoe: {
      const double k = static_cast<double>(l.top_k);
      // Router input and fp32 probabilities; each token's copy per chosen expert and the
      // experts' inner activations (EP moves tokens, it does not reduce their number per rank);
      // the shared experts' inner activations for every token.
      a.replicated =
          2 * t * h + 4 * t * static_cast<double>(l.experts) + 2 * t * h * k + mask * t * h;
      a.sharded = mlp_inner_bytes_per_token(l, l.ffn) * t * k;
      if (l.shared_ffn > 0) a.sharded += mlp_inner_bytes_per_token(l, l.shared_ffn) * t;
      break;
    }
    case LayerKind::kNorm: a.replicated = 2 * t * h; break;
    case LayerKind::kLmHead:
      // Its input, and the fp32 logits the cross-entropy backward needs (vocab-parallel).
      a.replicated = 2 * t * h;
      a.sharded = 4 * t * static_cast<double>(l.vocab);
      break;
  }
  return a;
}

namespace {

// The residual add after attention or the MLP, with the branch's dropout when training keeps it,
// as Megatron-LM runs them: one fused bias-dropout-add kernel reads the branch output and the
// residual (2 + 2 bytes per element) and writes the sum (2) and, with dropout, its mask (1) —
// 7 bytes per element with dropout and 6 without, not a separate dropout (5) and add (6).
double residual_traffic(const Layer& l, double t, double h) {
  return (l.dropout ? 7.0 : 6.0) * t * h;
}

// Elements per token that rotary embeddings rotate: every query and key head's width, or under
// MLA the queries' rope part and the one shared rope key.
double rotary_width(const Layer& l) {
  if (!l.rotary) return 0;
  if (is_mla(l)) return static_cast<double>((l.heads + 1) * l.rope_head_dim);
  return static_cast<double>((l.heads + l.kv_heads) * l.head_dim);
}

}  // namespace

TrafficBytes layer_traffic(const Layer& l, int64_t batch, int64_t seq) {
  const double t = static_cast<double>(batch) * static_cast<double>(seq);
  const double h = static_cast<double>(l.hidden);
  const double act = gated(l) ? 6.0 : 4.0;  // activation function r/w per intermediate element
  TrafficBytes b;
  double own_backward_sharded = -1;  // >= 0: the layer's backward bytes, not 1.5 x forward
  switch (l.kind) {
    case LayerKind::kEmbedding:
      b.replicated = 2 * t * h + (l.positions ? 6 * t * h : 0);  // gather, position add
      // The backward's dense gradient of the (vocab-parallel) table, every micro-batch: written
      // zeroed in the 16-bit type, the rows scattered into it, then added into the fp32 main
      // gradient (read 2 + 4, write 4): 12 bytes per table element. (The learned position
      // table's, P x h, is left out: under 1 % of this for every preset.)
      b.backward_table = 12 * static_cast<double>(l.vocab) * h;
      break;
    case LayerKind::kAttention: {
      const double scores = static_cast<double>(l.heads) * keys_per_query(l, seq) * t;  // elements
      b.scores = 4 * scores + (l.dropout ? 5 * scores : 0);  // softmax r/w, dropout
      b.replicated = residual_traffic(l, t, h);
      if (is_mla(l)) b.replicated += 4 * t * mla_widths(l).latent;  // the latents' norms
      // Fused RoPE (one kernel each for Q and K) reads and writes each rotated element; its
      // backward rotates the gradient the same way: 4 bytes per element each way. (Unfused, as
      // x cos + rotate_half(x) sin, it takes about five such passes.)
      b.sharded = 4 * t * rotary_width(l);
      own_backward_sharded = b.sharded;
      break;
    }
    case LayerKind::kMlp:
      b.sharded = act * t * static_cast<double>(l.ffn);
      b.replicated = residual_traffic(l, t, h);
      break;
    case LayerKind::kMoe:
      b.sharded = act * t * static_cast<double>(l.ffn) * static_cast<double>(l.top_k) +
                  act * t * static_cast<double>(l.shared_ffn);
      b.replicated = 6 * t * h + 4 * t * h * static_cast<double>(l.top_k);  // residual, permutes
      if (l.shared_ffn > 0) b.replicated += 6 * t * h;  // adding the shared experts' output
      break;
    case LayerKind::kNorm: b.replicated = 4 * t * h; break;
    case LayerKind::kLmHead: {
      // Megatron-LM's vocab-parallel cross-entropy over fp32 logits, unfused, per logit: the
      // fp32 copy (read 2, write 4), max (4), subtract in place (8), exp in place (8), sum (4),
      // divide in place into the softmax kept for the backward (8): 38 bytes; backward: scale
      // the softmax by the loss gradient in place (8), cast to 16 bits for the GEMMs (4 + 2).
      const double logits = t * static_cast<double>(l.vocab);
      b.sharded = 38 * logits;
      own_backward_sharded = 14 * logits;
      break;
    }
  }
  b.backward_replicated = 1.5 * b.replicated;
  b.backward_sharded = own_backward_sharded >= 0 ? own_backward_sharded : 1.5 * b.sharded;
  b.backward_scores = 1.5 * b.scores;
  return b;
}

}  // namespace tessera::ir
