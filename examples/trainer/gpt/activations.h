// The device buffers one micro-batch's forward keeps for its backward, and the backward's
// scratch, all sized once for (batch, seq) and owned by an Arena. Internal to GptModel (model.h).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/platform.h"

namespace tessera::gpt {

using hal::DType;
using hal::ReduceOp;

// Owns device allocations for the lifetime of a model; hands out their addresses. Move-only.
class Arena {
 public:
  explicit Arena(const hal::Device& device) : device_(&device) {}
  Result<void*> alloc(uint64_t count, DType dtype);
  uint64_t bytes() const { return bytes_; }  // the total allocated, for memory reports

 private:
  const hal::Device* device_;
  std::vector<hal::DeviceBuffer> buffers_;
  uint64_t bytes_ = 0;
};

// "act" below: the activation dtype; sizes use local (tensor-parallel) widths: qL = heads/tp *
// head_dim, kvL = kv_heads/tp * head_dim, fL = ffn/tp, VL = vocab/tp; T = batch * seq. Under
// expert parallelism the MoE row buffers (T*k rows below) have E*T rows (moe.cc: capacity T per
// expert and source rank), and so do gather, dh, dgate, dup, de_out and dxe.
// Under sequence parallelism (model.h) the residual stream and the norms hold this rank's slice:
// resid, y1, mid, y2, yf and dx, dy have T/tp rows, and mean*/rstd* T/tp entries; the
// tensor-parallel regions (q, k, v, att, gate, up, act, logits and their gradients) keep T rows.
struct MoeActivations {
  float* logits = nullptr;       // [T, E] f32
  float* probs = nullptr;        // [T, E] f32
  int32_t* top_index = nullptr;  // [T, k]
  float* top_weight = nullptr;   // [T, k]
  int32_t* slot = nullptr;       // [T*k]: the row of (t, j) in the expert-sorted buffers
  int32_t* gather = nullptr;     // [T*k]: the token of each expert-sorted row
  float* fraction = nullptr;     // [E]: share of the T*k slots routed to each expert
  void* xe = nullptr;            // [T*k, h] act: expert inputs, grouped by expert
  void* gate = nullptr;          // [T*k, fL] act (SwiGLU)
  void* up = nullptr;            // [T*k, fL] act
  void* act = nullptr;           // [T*k, fL] act
  void* out = nullptr;           // [T*k, h] act (this rank's partial sums under tp)
  std::vector<int32_t> top;      // host: top_index as read back (the routing decision)
  std::vector<int64_t> count;    // host: rows per expert
  std::vector<int64_t> offset;   // host: first row of each expert
  double aux = 0;                // host: the load-balancing loss of this layer (unweighted)
  // host, ep > 1: the rows this rank's experts received, [source][local expert] (moe.cc)
  std::vector<int64_t> received;
};

struct BlockActivations {
  void* y1 = nullptr;  // norm1 output [T, h]
  float* mean1 = nullptr;
  float* rstd1 = nullptr;
  void* q = nullptr;  // [T, qL] after bias and RoPE
  void* k = nullptr;  // [T, kvL]
  void* v = nullptr;
  void* att = nullptr;   // attention output [T, qL]
  float* lse = nullptr;  // [batch * headsL * seq]; null under selective recomputation
  void* mid = nullptr;   // residual after attention [T, h]
  void* y2 = nullptr;    // norm2 output
  float* mean2 = nullptr;
  float* rstd2 = nullptr;
  void* gate = nullptr;  // dense MLP [T, fL] (SwiGLU)
  void* up = nullptr;    // pre-activation [T, fL]
  void* act = nullptr;   // activation output [T, fL]
  MoeActivations moe;
};

struct Activations {
  int32_t* tokens = nullptr;   // [T]
  int32_t* targets = nullptr;  // [T]
  std::vector<void*> resid;    // layers + 1 residual states [T, h]: resid[0] = embedding output
  std::vector<BlockActivations> blocks;
  void* yf = nullptr;  // final norm output
  float* meanf = nullptr;
  float* rstdf = nullptr;
  float* logits = nullptr;   // [T, VL] f32
  float* row_max = nullptr;  // [T] f32 each
  float* sum_exp = nullptr;
  float* target_logit = nullptr;
  float* loss = nullptr;
};

struct Scratch {
  void* dx = nullptr;     // residual gradient [T, h]
  void* dy = nullptr;     // gradient of a norm output [T, h]
  void* d_att = nullptr;  // [T, qL]
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* delta = nullptr;  // [batch * headsL * seq]
  // Selective recomputation: the attention core's log-sum-exp of the block being differentiated,
  // recomputed per block (GptModel::attention_core); null otherwise.
  float* lse = nullptr;
  void* dh = nullptr;  // [T*k or T, fL]
  void* dgate = nullptr;
  void* dup = nullptr;
  void* dlogits = nullptr;      // [T, VL] act
  void* de_out = nullptr;       // MoE [T*k, h]
  void* dxe = nullptr;          // MoE [T*k, h]
  float* dweight = nullptr;     // MoE [T*k]
  float* drouter = nullptr;     // MoE [T, E] f32
  void* drouter_act = nullptr;  // MoE [T, E] act
  // MoE under ep: [2 * E] int32, the rows sent to and received from each expert (moe.cc)
  int32_t* ep_counts = nullptr;
  // Sequence parallelism only (null otherwise): full_in [T, h] act holds a gathered norm output
  // (the column-parallel GEMMs' input) or a row-parallel layer's partial sums before the
  // reduce-scatter; full_grad [T, h] act the gathered residual gradient (the row-parallel
  // backward's input) or the gradient of the gathered input before its reduce-scatter; sp_grad
  // [2 * h] f32 a replicated parameter's gradient from this rank's tokens, summed over tp.
  void* full_in = nullptr;
  void* full_grad = nullptr;
  float* sp_grad = nullptr;
};

}  // namespace tessera::gpt
