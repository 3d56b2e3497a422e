// The GPT/MoE decoder on device memory: forward of one micro-batch (keeping its activations),
// the cross-entropy loss, and the backward that accumulates f32 gradients into Params. Every
// tensor lives on the device; the host sees only token ids going in, and loss values, MoE
// routing decisions (top-k indices, to size the per-expert GEMMs) and norms coming out.
//
//   auto model = GptModel::create(device, config, kernels, groups, DType::kBF16, 4, 64).value();
//   model.params().init(stream, seed);
//   auto loss = model.forward(stream, corpus.batch(0, 4, 64)).value();
//   model.backward(stream, 1.0f);           // weight of this micro-batch in the step's loss
//
// Tensor parallelism (Megatron): QKV, gate and up are column-parallel (heads / ffn rows split),
// attention out and down row-parallel with an allreduce of their outputs in the forward; the
// gradient of every column-parallel input is allreduced in the backward; the embedding and the
// head are vocabulary-parallel (embedding outputs summed, xent statistics allreduced). Every
// other tensor (residual stream, norms, router) is replicated and gets identical gradients.
// Sequence parallelism (`sp`, Korthikanti et al. 2022): outside the tensor-parallel regions the
// residual stream and the norms hold only this tp rank's contiguous slice of T/tp tokens (rows
// [rank * T/tp, (rank+1) * T/tp) of the row-major [T, h] activations; with row t = b * seq + s a
// contiguous row split is Megatron's sequence split). Each column-parallel GEMM (QKV, gate/up, the
// head) allgathers its normed input to [T, h] first; each row-parallel output (attention out, MLP
// down, the vocabulary-parallel embedding) is reduce-scattered to the slice instead of allreduced;
// the backward runs the transposes. The replicated norm weights and row-parallel biases then see
// only their rank's tokens: their gradients are summed over tp (Megatron's sequence_parallel
// parameters), per micro-batch through a scratch so that accumulated gradients are not re-summed.
// MoE is dropless: every token reaches its top_k experts (no capacity limit yet).
// Not thread-safe: one model per rank, used from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "activations.h"
#include "config.h"
#include "data.h"
#include "kernels.h"
#include "parallel.h"
#include "params.h"
#include "stage.h"
#include "tessera/overlap/collective_matmul.h"
#include "zero.h"

namespace tessera::gpt {

// How much of its forward a block's backward recomputes (Korthikanti et al. 2022; the planner's
// plan::Recompute names the same three). kSelective recomputes only the attention core: with this
// fused core (kernels.h: no s^2 scores are ever stored) the only state the core keeps beyond its
// inputs q, k, v and its output (the output projection's input, kept as Megatron keeps it) is the
// per-row log-sum-exp, so selective drops that and reruns the core into one shared scratch.
enum class Recompute { kNone, kSelective, kFull };
std::string_view recompute_name(Recompute recompute);  // "none", "selective", "full"

struct StepLoss {
  double xent = 0;  // mean next-token cross-entropy of the micro-batch, nats
  double aux = 0;   // MoE load-balancing loss (router_aux_coef included), summed over layers
  double total() const { return xent + aux; }
};

class GptModel {
 public:
  // Parameters (uninitialised: call params().init) and activations for micro-batches of `batch`
  // sequences of `seq` tokens. `act`: f32, bf16 or f16. `recompute`: kFull keeps only each block's
  // input from the forward and reruns the block before its backward, so one block's activations
  // are allocated instead of `layers`; kSelective keeps every block's activations but the
  // attention core's log-sum-exp and reruns the core before each attention backward, so one
  // [batch * heads/tp * seq] f32 scratch replaces `layers` of them. Either way the results are
  // bitwise those without recomputation (the same kernels on the same inputs).
  // Under pipeline parallelism (groups.pp) the model is this rank's stage (stage.h): its blocks,
  // and the embedding / head where the stage has them. INVALID_ARGUMENT for a seq beyond the
  // learned positions, a tp degree the config does not divide, or fewer layers than stages.
  // `zero` (zero.h): the ZeRO level over groups.dp; from 1 the parameter buffers are allocated
  // sharded (never whole) and the model owns the ZeroEngine whose hooks its forward and backward
  // call; INVALID_ARGUMENT naming zero for levels outside 0..3.
  // `vp`: virtual pipeline stages (pipeline.h, stage_chunks): the stage holds vp chunks of blocks;
  // INVALID_ARGUMENT naming vp where it is below 1, above 1 without pp, or layers < pp * vp.
  // `sp`: sequence parallelism over groups.tp (above); INVALID_ARGUMENT naming sp where tp is 1,
  // batch * seq is not a multiple of tp, or the config has MoE layers (not supported yet).
  // `tp_comm_overlap` (Megatron's name): under sp, the forward's gather + column-parallel GEMM
  // (QKV, MLP up, head) and row-parallel GEMM + reduce-scatter (attention out, MLP down) run as
  // the ring collective matmuls (linear.h); the backward is unchanged. INVALID_ARGUMENT naming
  // tp_comm_overlap without sp or with activations other than f32.
  static Result<std::unique_ptr<GptModel>> create(
      const hal::Device& device, const GptConfig& config, GptKernels kernels, ParallelGroups groups,
      DType act, int64_t batch, int64_t seq, Recompute recompute = Recompute::kNone, int zero = 0,
      bool sp = false, int vp = 1, bool tp_comm_overlap = false);

  // Runs the forward and the loss on `batch` (batch * seq tokens, as created). Synchronises the
  // stream (to read the loss and MoE routing back). A pipeline stage runs its blocks from
  // stage_input() (the embedding on the first stage) to stage_output(), and the head and loss
  // only on the last stage (xent 0 elsewhere; aux covers the stage's MoE layers). Under virtual
  // stages (vp > 1) it runs chunk `chunk` of the stage (chunks()[chunk]): its blocks, and the
  // embedding / head only where that chunk has them.
  Result<StepLoss> forward(const hal::Stream& stream, const Batch& batch, int chunk = 0);
  // Accumulates into params().grad the gradient of weight * (xent + aux) of the last forward.
  // Queued on `stream`; MoE layers synchronise it. A stage other than the last starts from the
  // gradient of its output in residual_grad(); every stage leaves the gradient of its input there.
  // Under vp, the backward of chunk `chunk`'s last forward (the pipeline replays it first where
  // another micro-batch's forward of the chunk came since; load_batch restores the tokens and
  // targets the embedding's and the head's backward read).
  Status backward(const hal::Stream& stream, float weight, int chunk = 0);
  // Copies `batch`'s tokens and targets to the device (forward does it first). Queued.
  Status load_batch(const hal::Stream& stream, const Batch& batch);

  // ZeRO (zero.h): null at level 0. Its hooks run around each part (the embedding, each block,
  // the head) of the forward and backward; the trainer runs its reduce and finish_step.
  ZeroEngine* zero() const { return zero_.get(); }
  // Called once each part's backward (the head, each block, the embedding) is queued on its
  // stream, after ZeRO's grads_end: the trainer's --overlap marks that part's gradients ready
  // there (grad_overlap.h). Empty (the default): nothing is called.
  using GradsDone = std::function<Status(const hal::Stream&, Part, int layer)>;
  void set_grads_done(GradsDone hook) { grads_done_ = std::move(hook); }

  Params& params() { return params_; }
  const Params& params() const { return params_; }
  const GptConfig& config() const { return config_; }
  const ParallelGroups& groups() const { return groups_; }
  const GptKernels& kernels() const { return kernels_; }
  int64_t tokens() const { return batch_ * seq_; }
  // The residual stream's rows on this rank: tokens() / tp under sequence parallelism.
  int64_t local_tokens() const { return sp_ ? tokens() / groups_.tp_size() : tokens(); }
  bool sequence_parallel() const { return sp_; }
  uint64_t activation_bytes() const { return arena_.bytes(); }
  Recompute recompute() const { return recompute_; }
  // Pipeline stages (pipeline.h): the residual stream entering and leaving this stage's blocks
  // and its gradient, act [local_tokens, hidden] each (this rank's token slice under sp).
  // Under vp, stage() spans the first chunk's first block to the last chunk's end (first / last:
  // the stage holds the embedding / the head) and chunks() lists its chunks; the input and output
  // are chunk `chunk`'s (resid[first_layer], resid[end_layer]).
  const StageRange& stage() const { return stage_; }
  const std::vector<StageRange>& chunks() const { return chunks_; }
  void* stage_input(int chunk = 0) const {
    return a_.resid[size_t(chunks_[size_t(chunk)].first_layer)];
  }
  const void* stage_output(int chunk = 0) const {
    return a_.resid[size_t(chunks_[size_t(chunk)].end_layer)];
  }
  void* residual_grad() const { return g_.dx; }
  uint64_t residual_count() const { return uint64_t(local_tokens() * config_.hidden); }
  // A hash of the last forward's MoE routing (every layer's top-k experts per token); constant
  // for dense models. Finite differences are only valid where it does not change.
  uint64_t routing_signature() const;

 private:
  GptModel(const hal::Device& device, GptConfig config, GptKernels kernels, ParallelGroups groups,
           Params params, StageRange stage, int64_t batch, int64_t seq, Recompute recompute);
  Status allocate();
  // Whether one of the stage's chunks holds block `layer`; chunk `chunk`'s range, or
  // INVALID_ARGUMENT naming `what` and the chunk.
  bool holds_layer(int layer) const;
  Result<const StageRange*> chunk_range(int chunk, const char* what) const;

  // model.cc
  Status embed_forward(const hal::Stream& s);
  Status attention_forward(const hal::Stream& s, int layer);
  // The attention core (softmax(q k^T) v) of block `layer` into its att and into `lse`.
  Status attention_core(const hal::Stream& s, int layer, float* lse);
  Status mlp_forward(const hal::Stream& s, int layer);
  Status head_forward(const hal::Stream& s);
  Status head_backward(const hal::Stream& s, float weight);
  Status mlp_backward(const hal::Stream& s, int layer);
  Status attention_backward(const hal::Stream& s, int layer);
  Status embed_backward(const hal::Stream& s);
  // moe.cc
  Status moe_forward(const hal::Stream& s, int layer);
  Status moe_route(const hal::Stream& s, int layer);
  Status moe_backward(const hal::Stream& s, int layer, float weight);

  // Norm of `x` into (y, mean, rstd) with weight/bias tensors w, b; and its backward, adding
  // the input gradient into dx.
  Status norm_forward(const hal::Stream& s, const void* x, int w, int b, void* y, float* mean,
                      float* rstd);
  Status norm_backward(const hal::Stream& s, const void* dy, const void* x, int w, int b,
                       const float* mean, const float* rstd, void* dx);
  Status tp_sum(const hal::Stream& s, void* data, uint64_t count, DType dtype, const char* what);
  // Sequence parallelism: the local slice `local` [local_tokens, h] gathered into `full` [T, h],
  // and the partial sums `full` reduce-scattered into the local slice.
  Status sp_gather(const hal::Stream& s, const void* local, void* full, const char* what);
  Status sp_scatter(const hal::Stream& s, const void* full, void* local, const char* what);
  // A row-parallel layer's output `out` [local_tokens, h] from its partial sums `partial`: summed
  // over tp (in place, partial == out) or reduce-scattered under sp.
  Status row_parallel_sum(const hal::Stream& s, void* partial, void* out, const char* what);
  // The gradient of the replicated bias `bias` from dy [local_tokens, h]: under sp summed over tp
  // through g_.sp_grad before it is added to params().grad (see norm_backward).
  Status replicated_bias_grad(const hal::Stream& s, const void* dy, int bias);
  // ZeRO hooks (zero.h); no-ops without an engine.
  Status zero_use(const hal::Stream& s, Part part, int layer, Pass pass) {
    return zero_ ? zero_->use(s, part, layer, pass) : Status();
  }
  Status zero_grads_begin(Part part, int layer) {
    return zero_ ? zero_->grads_begin(part, layer) : Status();
  }
  Status zero_grads_end(const hal::Stream& s, Part part, int layer) {
    if (zero_) TSR_RETURN_IF_ERROR(zero_->grads_end(s, part, layer));
    return grads_done_ ? grads_done_(s, part, layer) : Status();
  }

  // The activations of block `layer` (one shared set under full recomputation).
  bool full_recompute() const { return recompute_ == Recompute::kFull; }
  BlockActivations& block(int layer) { return a_.blocks[full_recompute() ? 0 : size_t(layer)]; }
  const BlockActivations& block(int layer) const {
    return a_.blocks[full_recompute() ? 0 : size_t(layer)];
  }
  uint32_t act_abi() const { return uint32_t(hal::to_abi(params_.act())); }
  DType act() const { return params_.act(); }

  const hal::Device* device_;
  GptConfig config_;
  GptKernels kernels_;
  ParallelGroups groups_;
  Params params_;
  StageRange stage_;
  std::vector<StageRange> chunks_;  // {stage_} without vp (set by create before allocate)
  int64_t batch_, seq_;
  Recompute recompute_;
  bool sp_ = false;  // sequence parallelism (set by create before allocate)
  // tp_comm_overlap: the ring collective matmuls over groups_.tp (null without).
  std::unique_ptr<overlap::CollectiveMatmul> tp_matmul_;
  // Local (tensor-parallel) widths.
  int64_t heads_l_, kv_heads_l_, q_l_, kv_l_, ffn_l_, vocab_l_, vocab_begin_;
  std::unique_ptr<ZeroEngine> zero_;  // binds into params_: declared after it
  GradsDone grads_done_;
  Arena arena_;
  Activations a_;
  Scratch g_;
};

}  // namespace tessera::gpt
