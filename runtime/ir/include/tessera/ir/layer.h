// One layer of the model IR and the arithmetic the planner needs from it: parameters, GEMM shapes
// (hence FLOPs), stored activation bytes and memory-bound traffic, all for one micro-batch of b
// sequences of s tokens on ONE device without any parallelism. The planner applies the splits.
//
// Why GEMM lists instead of a FLOP count: the planner prices each GEMM with an efficiency curve
// over its shape, and a tensor-parallel split changes the shape, not just the total.
// Conventions follow Korthikanti et al. 2022 (the formulas in shared/reference/hardware.md):
// 16-bit values are 2 bytes, dropout masks 1 byte, logits for the loss fp32. Thread-safe (values).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::ir {

enum class LayerKind { kEmbedding, kAttention, kMlp, kMoe, kNorm, kLmHead };
// GeLU: 2 matrices (up, down); SwiGLU and GeGLU (Gemma's gated GeLU): 3 (gate, up, down). The
// two gated forms cost the same; the name says which function the checkpoint uses.
enum class MlpActivation { kGelu, kSwiGlu, kGeGlu };
enum class NormType { kLayerNorm, kRmsNorm };

std::string_view layer_kind_name(LayerKind kind);  // "embedding", "attention", ...

// A strategy-free layer. Only the fields of its kind are meaningful; the rest stay 0/false.
struct Layer {
  LayerKind kind = LayerKind::kNorm;
  int64_t hidden = 0;    // h
  int64_t heads = 0;     // attention: query heads a
  int64_t kv_heads = 0;  // attention: key/value heads (a = MHA, 1 = MQA, else GQA)
  int64_t head_dim = 0;  // attention: d (usually h / a)
  int64_t ffn = 0;       // mlp/moe: intermediate size f (per expert for MoE)
  MlpActivation activation = MlpActivation::kGelu;
  int64_t experts = 0;    // moe: E
  int64_t top_k = 0;      // moe: experts per token
  int64_t vocab = 0;      // embedding / lm_head: V
  int64_t positions = 0;  // embedding: learned position rows (0 for rotary)
  NormType norm = NormType::kLayerNorm;
  bool bias = false;     // linear layers carry biases (GPT-2/3) or not (LLaMA)
  bool dropout = false;  // training keeps dropout masks (GPT-3 recipe) or not (LLaMA recipe)
  bool tied = false;     // lm_head: shares the embedding matrix (no parameters of its own)

  // Attention variants; 0/false keeps plain multi-head attention over the whole sequence.
  int64_t window = 0;     // sliding window (Mistral): keys per query, min(seq, window) priced
  bool rotary = false;    // rotary position embedding applied to Q and K (RoPE; MLA: the rope part)
  bool qkv_bias = false;  // biases on Q, K and V only (Qwen2); `bias` puts them on every linear
  // Multi-head latent attention (DeepSeek-V2/V3), on when kv_lora_rank > 0: queries go through an
  // optional q_lora_rank latent, keys and values through one kv_lora_rank latent shared by all
  // heads, plus one rope_head_dim key shared by all heads. head_dim is then the query/key width
  // per head (no-rope part + rope_head_dim), v_head_dim the value width. The down-projections
  // and latent norms are replicated on every TP rank (Megatron-LM), the rest split by heads.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // MoE: always-on shared experts (Qwen2-MoE, DeepSeek), a dense gated MLP of this intermediate
  // size (all shared experts summed) that every token passes besides its routed experts.
  int64_t shared_ffn = 0;
  bool shared_gate = false;  // Qwen2-MoE: a sigmoid gate (h -> 1) scales the shared expert
};

// True when `layer` is multi-head latent attention (see Layer::kv_lora_rank).
inline bool is_mla(const Layer& layer) {
  return layer.kind == LayerKind::kAttention && layer.kv_lora_rank > 0;
}

// How tensor parallelism (t) and expert parallelism (ep) may split a GEMM.
enum class GemmSplit {
  kNone,     // replicated on every TP rank (MoE router)
  kColumn,   // n divided by t (QKV, MLP up, vocab-parallel LM head)
  kRow,      // k divided by t, followed by a reduction (attention out, MLP down)
  kHeads,    // batch of per-head GEMMs divided by t (attention scores/context)
  kExperts,  // per-expert batch divided by ep, columns by t (m grows by ep: tokens arrive)
  kExpertsRow,
};

// A batched GEMM: `batch` independent (m x k) * (k x n) products. m counts tokens for linear
// layers. `seq_sq` marks attention GEMMs whose m or n is the sequence (context parallelism
// divides their work by cp as well as m of the linear layers).
struct Gemm {
  std::string_view name;
  double m = 0, n = 0, k = 0, batch = 1;
  GemmSplit split = GemmSplit::kNone;
  bool attention_core = false;  // QK^T and softmax*V: recomputed by selective recomputation
  double flops() const { return 2.0 * m * n * k * batch; }
};

// Parameters by how they are split: TP-sharded, K/V (sharded by min(t, kv_heads)), replicated on
// every TP rank (norms, some biases, the router), and expert weights (sharded by ep and t).
struct ParamSplit {
  int64_t tp_sharded = 0;
  int64_t kv_sharded = 0;
  int64_t replicated = 0;
  int64_t expert = 0;
  int64_t total() const { return tp_sharded + kv_sharded + replicated + expert; }
};

// Bytes kept from forward to backward for one micro-batch, by how parallelism divides them:
// `replicated` is divided by t only with sequence parallelism; `sharded` always by t; `scores`
// (the a*s^2 softmax/dropout tensors) by t and dropped by selective recomputation. `input` is what
// full recomputation keeps instead (the layer's input).
struct ActivationBytes {
  double replicated = 0;
  double sharded = 0;
  double scores = 0;
  double input = 0;
  double total() const { return replicated + sharded + scores; }
};

// Memory-bound traffic (bytes read + written) outside GEMMs — norms, softmax, activation
// functions, dropout, residual adds, rotary embeddings, the loss, the embedding's gradient — of
// the forward and of the backward pass, split like activations: `replicated` is divided by t only
// with sequence parallelism, `sharded` always by t, `scores` (the attention core's softmax and
// dropout over the s x s scores) by t, absent under fused attention and replayed by selective
// recomputation. An elementwise op's backward reads the output gradient and the saved input and
// writes the input gradient: 1.5 x its forward bytes unless the layer says otherwise.
struct TrafficBytes {
  double replicated = 0;
  double sharded = 0;
  double scores = 0;
  double backward_replicated = 0;
  double backward_sharded = 0;
  double backward_scores = 0;
  // Per micro-batch whatever its tokens (not divided by cp): the vocab-parallel embedding
  // table's dense gradient, divided by t only.
  double backward_table = 0;
};

ParamSplit layer_params(const Layer& layer);
std::vector<Gemm> layer_gemms(const Layer& layer, int64_t batch, int64_t seq);
double layer_forward_flops(const Layer& layer, int64_t batch, int64_t seq);  // sum of GEMM flops
ActivationBytes layer_activations(const Layer& layer, int64_t batch, int64_t seq);
TrafficBytes layer_traffic(const Layer& layer, int64_t batch, int64_t seq);

}  // namespace tessera::ir
