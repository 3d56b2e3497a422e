// The model IR: an ordered list of layers grouped into blocks, the unit a pipeline stage owns.
// Block -1 holds what precedes the first block (embedding), block `num_blocks` what follows the
// last one (final norm, LM head); the planner puts them on the first and last stage.
//
// Build one with the loaders in loaders.h; check a hand-built one with validate_model().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/ir/layer.h"

namespace tessera::ir {

// The largest sizes the IR accepts. Far beyond published models (h 25600, f ~100k, V 256k, 126
// blocks, hundreds of experts) and small enough that every per-layer count in layer.h fits in 64
// bits (h x 2f x experts < 2^61). Loaders refuse larger values naming the field; validate_model
// checks them again for hand-built models.
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;    // hidden, head_dim
inline constexpr int64_t kMaxFfn = int64_t{1} << 22;      // ffn (the default 4 x hidden fits)
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;    // heads, kv_heads
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;    // vocab, positions, max_seq_len
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;  // experts, top_k
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;   // layers in a model (blocks too)
inline constexpr int64_t kMaxParams = int64_t{1} << 53;   // total parameters (exact as double)

struct Model {
  std::string name;
  std::vector<Layer> layers;
  std::vector<int> block_of;  // per layer: -1 (pre), 0..num_blocks-1, num_blocks (post)
  int num_blocks = 0;
  int64_t max_seq_len = 0;  // 0 when unknown; the planner warns above it, learned positions fail
  // Summary fields for display and for the planner's divisibility rules (the widest attention).
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t vocab = 0;
  int64_t experts = 0;  // 0 for dense models
  bool tied_embeddings = false;
  // What a loader read but left out of the model because it does not change cost (e.g.
  // "rope_scaling ignored: ..."); for display. Keys that would change cost are refused instead.
  std::vector<std::string> notes;
};

// Total parameters (a tied LM head counts once).
int64_t model_params(const Model& model);
// Parameters touched per token: MoE counts top_k of E experts. For MFU of sparse models.
int64_t model_active_params(const Model& model);
// Forward GEMM FLOPs for `batch` sequences of `seq` tokens.
double model_forward_flops(const Model& model, int64_t batch, int64_t seq);
// Model FLOPs of one training iteration without recomputation: 3 x forward (backward = 2 x).
double model_training_flops(const Model& model, int64_t batch, int64_t seq);

// Checks sizes (against the limits above) and the block structure; errors name the layer
// ("layer 3 (attention): ...").
Status validate_model(const Model& model);
// Builders mark layers after the last block with kPostBlock; finalize_model renumbers them.
inline constexpr int kPostBlock = 1 << 30;
// Fills num_blocks from block_of (renumbering kPostBlock) and the summary fields from the layers.
void finalize_model(Model& model);

}  // namespace tessera::ir
