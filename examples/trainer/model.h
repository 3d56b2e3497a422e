// The trainer's model, data and initial parameters, all pure functions of a seed.
//
// Model: `blocks` residual MLP blocks y = x + W2 gelu(W1 x + b1) + b2 (W1: h -> ffn, W2: ffn -> h)
// and a softmax cross-entropy head (Wo: h -> classes). Expressed in the model IR (one kMlp layer
// per block, a kLmHead after the last block) so the planner can plan it.
//
// Data: sample j of step t is x = N(0,1)^h drawn from hash(seed, t, j); its label is the argmax of
// a fixed random teacher network. Every rank can generate any sample on its own, so the data of a
// step does not depend on the layout, and a replayed step sees the same bits.
//
// Storage conventions (column-major, as the HAL's GEMM): an activation of n samples is an
// (features x n) matrix, ld = features. A weight mapping `in` to `out` features is an (out x in)
// column-major matrix, which is the same memory as a row-major [in][out] array: its global shape
// (for the checkpointer and the dumps) is [in, out]. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/ir/model.h"

namespace tessera::trainer {

struct ModelSpec {
  int64_t hidden = 64;
  int64_t blocks = 4;
  int64_t ffn = 0;  // 0: 4 * hidden
  int64_t classes = 16;
  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * hidden; }
};

// "tiny" (h 32, 2 blocks), "small" (h 64, 4 blocks), "medium" (h 128, 8 blocks), "large"
// (h 256, 8 blocks). INVALID_ARGUMENT naming the size otherwise.
Result<ModelSpec> model_spec_preset(const std::string& name);
Status validate_spec(const ModelSpec& spec);

// The IR of the model: block b is layer b (kMlp, bias, GeLU); the head is a kLmHead of `classes`.
ir::Model model_ir(const ModelSpec& spec);

// What each parameter is: its kind inside a block (or the head) and global row-major shape.
enum class ParamKind { kW1, kB1, kW2, kB2, kHeadW, kHeadB };
struct ParamInfo {
  std::string name;  // "block2.w1", "head.w"
  ParamKind kind = ParamKind::kW1;
  int block = -1;  // -1 for the head
  std::vector<int64_t> shape;
  int64_t elements() const;
  int id = 0;  // position in global order: the seed of its initial values
};
// Global order: block 0 (w1, b1, w2, b2), block 1, ..., head (w, b).
std::vector<ParamInfo> model_params(const ModelSpec& spec);

// Initial value of element `flat` (row-major over the global shape) of parameter `info`:
// weights N(0, 1/fan_in), biases 0.
float initial_value(const ParamInfo& info, uint64_t seed, int64_t flat);

// Samples [first, first + count) of step `step`: x as (hidden x count) column-major, labels.
void make_inputs(const ModelSpec& spec, uint64_t seed, int64_t step, int64_t first, int64_t count,
                 float* out_x);
void make_labels(const ModelSpec& spec, uint64_t seed, int64_t step, int64_t first, int64_t count,
                 int32_t* out_labels);

}  // namespace tessera::trainer
