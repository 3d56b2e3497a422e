// One training step of the GPT/MoE decoder on one rank of a (dp x tp) grid: `micro_batches`
// forward/backward passes accumulating gradients, the data-parallel gradient allreduce (f32, so
// that dp matches a 1-rank run closely; with options.overlap through the overlap engine, bucket by
// bucket during the last backward: grad_overlap.h), then clipped AdamW. Data comes from
// MarkovCorpus (data.h): step s, micro-batch j, dp rank r draws samples s*G + (j*dp + r)*B .. + B,
// G = the global batch; a 1-rank run with micro_batch = dp*B draws exactly the same samples.
//
//   GptTrainer::create(device, config, kernels, groups, options) -> init(stream) -> step(stream)...
//
// Not thread-safe: one trainer per rank, driven from one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "data.h"
#include "grad_overlap.h"
#include "loss_scale.h"
#include "model.h"
#include "optimizer.h"
#include "pipeline.h"
#include "zero.h"

namespace tessera::gpt {

struct TrainOptions {
  int64_t micro_batch = 4;  // sequences per micro-batch on this rank
  int64_t seq = 32;
  int64_t micro_batches = 1;  // gradient accumulation steps
  uint64_t seed = 1234;       // parameter initialisation
  uint64_t data_seed = 42;    // the Markov chain and its samples
  DType act = DType::kBF16;   // activation/working-weight dtype (kF32 for tight checks)
  Recompute recompute = Recompute::kNone;  // none, selective or full (GptModel::create)
  // The data-parallel gradient allreduce's wire type: kF32, or kBF16 (half the bytes; the f32
  // gradients are rounded to bf16 before the sum and the sum is widened back).
  DType grad_comm = DType::kF32;
  // ZeRO stage over dp (zero.h): 0 none, 1 optimizer state (master, m, v) sharded, 2 also the
  // gradients (reduce-scattered per unit as the backward finishes it), 3 also the working
  // weights (gathered per unit before use). f32 gradient communication only; under pp each stage
  // shards its own units over dp.
  int zero = 0;
  // Megatron sequence parallelism over tp (GptModel::create's sp): the residual stream, norms and
  // their activations split over the tp ranks by tokens. Needs tp > 1; dense models only.
  bool sp = false;
  // Megatron's tp-comm-overlap under sp (GptModel::create's tp_comm_overlap): the forward's
  // gather + column-parallel GEMMs and row-parallel GEMMs + reduce-scatter as ring collective
  // matmuls. Needs sp and f32 activations; the backward is unchanged.
  bool tp_comm_overlap = false;
  // Virtual pipeline stages under pp (pipeline.h: Megatron's interleaved 1F1B): each stage holds
  // vp chunks of blocks. Needs pp > 1, micro_batches a multiple of pp and layers >= pp * vp; not
  // with zero >= 1 (the ZeRO snapshot names carry no vp) or overlap (not verified yet).
  int vp = 1;
  // Sum the dp gradients through the overlap engine (grad_overlap.h), each unit's bucket launched
  // as the last micro-batch's backward finishes it, instead of one allreduce after the backward:
  // zero 0 or 1, f32 or bf16 on the wire (the engine's bf16 codec), pp (each stage's own engine).
  // zero 2/3: ZeroEngine's reduce-scatters (and zero 3's gathers) on a communication stream
  // instead (zero.h, "Overlap"). ep > 1: the expert gradients through a second engine over
  // expert_dp. Nothing to do where dp = 1.
  bool overlap = false;
  // --overlap's bucket capacity in bytes; 0: the engine's (TESSERA_BUCKET_MB, else alpha-beta).
  uint64_t overlap_bucket_bytes = 0;
  AdamWOptions adamw;
  // Loss scaling (loss_scale.h): off by default; static or dynamic with any act, meant for f16.
  // A step whose gradients overflow is skipped: the data moves on (steps_done() counts it), the
  // optimizer does not (its step count, bias correction and schedule stay), as Megatron does.
  LossScaleOptions loss_scale;
};

struct StepResult {
  int64_t step = 0;
  double loss = 0;  // mean over micro-batches and dp ranks of xent + aux
  double xent = 0;
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the step's scheduled learning rate
  // options.overlap: the engine's communication stream busy time, and how much of it the step
  // still waited for after the backward (GradSync's StepStats), seconds; 0 otherwise.
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
  // The device time of the step's tensor-parallel collectives (tp > 1) and of its pipeline
  // point-to-point transfers (pp > 1; a receive's wait for its peer included), seconds, summed
  // over the step (ParallelGroups' timers). Both run on the compute stream: all of it is exposed.
  double tp_comm_seconds = 0;
  double pp_comm_seconds = 0;
  // Loss scaling: the scale this step's backward was seeded with (1 when off), and whether its
  // gradients overflowed so that nothing was updated (grad_norm is then inf or NaN).
  double loss_scale = 1;
  bool skipped = false;
};

class GptTrainer {
 public:
  static Result<std::unique_ptr<GptTrainer>> create(const hal::Device& device,
                                                    const GptConfig& config, GptKernels kernels,
                                                    ParallelGroups groups, TrainOptions options);
  // Initialises the parameters from options.seed (identical on every rank of a dp group).
  Status init(const hal::Stream& stream);
  // One optimizer step. Synchronises the stream.
  Result<StepResult> step(const hal::Stream& stream);

  GptModel& model() { return *model_; }
  const GptModel& model() const { return *model_; }
  const MarkovCorpus& corpus() const { return corpus_; }
  const TrainOptions& options() const { return options_; }
  // The ZeRO plan (level 0 when options.zero is 0).
  const ZeroPlan& zero() const { return model_->zero() ? model_->zero()->plan() : no_zero_; }
  // The dp gradient sum through the overlap engine: null without options.overlap or where dp = 1.
  const GradOverlap* overlap() const { return overlap_.get(); }
  // Steps taken so far (the next step() draws the data of step steps_done() + 1).
  int64_t steps_done() const { return step_; }
  // Updates the optimizer applied: steps_done() less the steps loss scaling skipped (the next
  // step is this + 1 of the schedule and the bias correction).
  int64_t optimizer_steps() const { return adamw_.steps(); }
  // The loss scaler (scale 1 and no skips when options.loss_scale is off); checkpoint.h saves and
  // restores its state.
  const LossScaler& loss_scaler() const { return scaler_; }
  LossScaler& loss_scaler() { return scaler_; }
  // Continues after `step` steps from master weights and AdamW moments written by a checkpoint
  // load, restore or in-memory reshard (checkpoint.h): rebuilds the working copy from master
  // (under ZeRO each rank casts its slices and the units are allgathered over dp) and sets the
  // step count, so the data and the schedule continue where the snapshot was taken (the
  // optimizer at step - loss_scaler().skipped_steps(): restore the scaler first). Synchronous.
  Status resume_at(const hal::Stream& stream, int64_t step);
  // The whole master weights (gathered over dp under ZeRO). Synchronous.
  Result<std::vector<float>> download_master(const hal::Stream& stream) const;

  // This rank's device bytes as the trainer allocated them (every device allocation it and its
  // model hold; nothing is allocated per step except gather_master's temporary).
  struct Memory {
    Params::Bytes params;      // master, work, grad, m, v
    uint64_t optimizer = 0;    // AdamW's norm scratch
    uint64_t activations = 0;  // GptModel's arena
    uint64_t trainer = 0;      // loss scalars, bf16 wire (--overlap: the engine's bf16 codec)
    uint64_t pipeline = 0;     // pp > 1: kept inputs, received gradient, loss sums (pipeline.h)
    uint64_t total() const { return params.total() + optimizer + activations + trainer + pipeline; }
  };
  Memory memory() const;

 private:
  GptTrainer(std::unique_ptr<GptModel> model, AdamW adamw, TrainOptions options,
             hal::DeviceBuffer scalars, hal::DeviceBuffer wire);
  Status allreduce_grads(const hal::Stream& s);
  Result<std::vector<double>> dp_mean(const hal::Stream& s, std::vector<double> values);

  std::unique_ptr<GptModel> model_;
  AdamW adamw_;
  TrainOptions options_;
  MarkovCorpus corpus_;
  hal::DeviceBuffer scalars_;  // f64 [2]: losses averaged over dp
  hal::DeviceBuffer wire_;     // bf16 gradients for the dp allreduce (grad_comm kBF16 only)
  ZeroPlan no_zero_;           // zero(): level 0
  std::unique_ptr<Pipeline> pipeline_;   // pp > 1: the 1F1B schedule (pipeline.h)
  const hal::Device* device_ = nullptr;  // for gather_master's temporary
  // options.overlap with dp > 1; reads model_'s gradients: declared after it, destroyed first.
  std::unique_ptr<GradOverlap> overlap_;
  int64_t step_ = 0;
  LossScaler scaler_;
};

}  // namespace tessera::gpt
