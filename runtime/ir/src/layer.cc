// Per-layer arithmetic. Every count here is for t = 1 and one micro-batch; see layer.h.
#include "tessera/ir/layer.h"

namespace tessera::ir {
namespace {

// Number of matrices in the MLP input projection: SwiGLU fuses gate and up.
int64_t up_width(const Layer& l) {
  return l.activation == MlpActivation::kSwiGlu ? 2 * l.ffn : l.ffn;
}

int64_t mlp_params(const Layer& l) {
  int64_t p = up_width(l) * l.hidden + l.ffn * l.hidden;
  if (l.bias) p += up_width(l) + l.hidden;
  return p;
}

// Stored activations inside one MLP (GeLU: its input and output, 2 x 2f bytes per token = 16 h for
// f = 4h as in the paper; SwiGLU: gate, up and their product, 3 x 2f).
double mlp_inner_bytes_per_token(const Layer& l) {
  return l.activation == MlpActivation::kSwiGlu ? 6.0 * l.ffn : 4.0 * l.ffn;
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
      const int64_t q = l.heads * l.head_dim, kv = l.kv_heads * l.head_dim;
      p.tp_sharded = 2 * l.hidden * q + (l.bias ? q : 0);
      p.kv_sharded = 2 * l.hidden * kv + (l.bias ? 2 * kv : 0);
      p.replicated = l.bias ? l.hidden : 0;  // the output bias is added after the reduction
      break;
    }
    case LayerKind::kMlp:
      p.tp_sharded = mlp_params(l) - (l.bias ? l.hidden : 0);
      p.replicated = l.bias ? l.hidden : 0;
      break;
    case LayerKind::kMoe:
      p.replicated = l.hidden * l.experts;  // router
      p.expert = l.experts * mlp_params(l);
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
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      const double s = static_cast<double>(seq), d = static_cast<double>(l.head_dim);
      const double bh = static_cast<double>(batch * l.heads);
      return {
          {"qkv", tokens, q + 2 * kv, h, 1, GemmSplit::kColumn, false},
          {"scores", s, s, d, bh, GemmSplit::kHeads, true},
          {"context", s, d, s, bh, GemmSplit::kHeads, true},
          {"attn_out", tokens, h, q, 1, GemmSplit::kRow, false},
      };
    }
    case LayerKind::kMlp:
      return {{"mlp_up", tokens, static_cast<double>(up_width(l)), h, 1, GemmSplit::kColumn, false},
              {"mlp_down", tokens, h, static_cast<double>(l.ffn), 1, GemmSplit::kRow, false}};
    case LayerKind::kMoe: {
      // Balanced routing: each expert sees tokens * top_k / E tokens.
      const double e = static_cast<double>(l.experts);
      const double per_expert = tokens * static_cast<double>(l.top_k) / e;
      return {{"router", tokens, e, h, 1, GemmSplit::kNone, false},
              {"expert_up", per_expert, static_cast<double>(up_width(l)), h, e, GemmSplit::kExperts,
               false},
              {"expert_down", per_expert, h, static_cast<double>(l.ffn), e, GemmSplit::kExpertsRow,
               false}};
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
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      const double s = static_cast<double>(seq);
      // QKV input 2th and the output dropout mask th are not split by TP (only by SP);
      // Q, K, V and the output projection's input are.
      a.replicated = 2 * t * h + mask * t * h;
      a.sharded = 2 * t * (q + 2 * kv) + 2 * t * q;
      // Softmax output (2 bytes), and with dropout its mask (1) and output (2): 5as^2b or 2as^2b.
      a.scores = (l.dropout ? 5.0 : 2.0) * static_cast<double>(l.heads) * s * t;
      break;
    }
    case LayerKind::kMlp:
      a.replicated = 2 * t * h + mask * t * h;
      a.sharded = mlp_inner_bytes_per_token(l) * t;
      break;
    case LayerKind::kMoe: {
      const double k = static_cast<double>(l.top_k);
      // Router input and fp32 probabilities; each token's copy per chosen expert and the
      // experts' inner activations (EP moves tokens, it does not reduce their number per rank).
      a.replicated =
          2 * t * h + 4 * t * static_cast<double>(l.experts) + 2 * t * h * k + mask * t * h;
      a.sharded = mlp_inner_bytes_per_token(l) * t * k;
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

TrafficBytes layer_traffic(const Layer& l, int64_t batch, int64_t seq) {
  const double t = static_cast<double>(batch) * static_cast<double>(seq);
  const double h = static_cast<double>(l.hidden);
  TrafficBytes b;
  switch (l.kind) {
    case LayerKind::kEmbedding:
      b.replicated = 2 * t * h + (l.positions ? 6 * t * h : 0);  // gather, position add
      break;
    case LayerKind::kAttention: {
      const double s = static_cast<double>(seq);
      const double scores = static_cast<double>(l.heads) * s * t;  // elements
      b.sharded = 4 * scores + (l.dropout ? 5 * scores : 0);       // softmax r/w, dropout
      b.replicated = 6 * t * h + (l.dropout ? 5 * t * h : 0);      // residual add, dropout
      break;
    }
    case LayerKind::kMlp:
      b.sharded = (l.activation == MlpActivation::kSwiGlu ? 6.0 : 4.0) * t * l.ffn;
      b.replicated = 6 * t * h + (l.dropout ? 5 * t * h : 0);
      break;
    case LayerKind::kMoe:
      b.sharded = (l.activation == MlpActivation::kSwiGlu ? 6.0 : 4.0) * t * l.ffn * l.top_k;
      b.replicated = 6 * t * h + 4 * t * h * l.top_k;  // residual, permute and un-permute
      break;
    case LayerKind::kNorm: b.replicated = 4 * t * h; break;
    case LayerKind::kLmHead:
      b.sharded = 12 * t * static_cast<double>(l.vocab);  // softmax cross-entropy over fp32
      break;
  }
  return b;
}

}  // namespace tessera::ir
