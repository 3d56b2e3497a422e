// The data-parallel gradient sum through the overlap engine (TrainOptions::overlap, `--overlap`;
// runtime/overlap grad_sync.h, docs/OVERLAP.md) instead of one allreduce of the flat gradient on
// the compute stream after the whole backward. Covers zero 0 and zero 1 (whose gradient is whole:
// the engine sums it, then ZeroEngine updates the rank's slices and allgathers the working copy as
// without the option), f32 or bf16 on the wire (the engine's bf16 codec: cast, allreduce in bf16,
// cast back, per bucket, as the trainer does for the whole gradient), pp (each stage's units
// through the stage's own engine on the stage's dp group) and ep (ep.h: the expert tensors, packed
// after the rest, sum over expert_dp through a second engine, one unit per block marked with the
// block; where dp = ep no rank shares experts and they are not summed, as without the option).
//
// Each unit of the flat layout (zero.h: the embedding, each block, the final norm with the head;
// under pp the stage's units) is one GradSync parameter, registered in layout order, so the
// engine's buckets fill head first. GptModel calls part_done() as each part's backward is queued
// (model.h, set_grads_done). A part's units are marked ready on the compute stream at the step's
// micro_batches-th backward of that part (begin_step()): the last micro-batch's, whether the
// backwards run one after another or interleaved with forwards under 1F1B (pipeline.h: the
// backwards of a stage still come in micro-batch order). A bucket whose units are all marked is
// summed on the engine's communication stream while the backward of the earlier layers goes on.
// Earlier micro-batches only accumulate (one reduction per step, as without the option). A unit is
// marked after the last part that writes its gradient: a tied embedding after the embedding's
// backward, not the head's. Under pp a tied embedding (first and last stage) is summed over the
// embedding group by Pipeline::run after the schedule, on the compute stream; its unit is then
// marked by mark_deferred() after that sum (the same order of sums as without the option, and no
// two streams writing the gradient at once; that bucket's communication is exposed).
//
// The engine sums (Reduction::kSum): every rank's gradient already carries its 1/(micro_batches *
// dp) share, as for the plain allreduce. A bucket's units are adjacent in the flat gradient, so the
// engine reduces them in place: with f32 on the wire it allocates no bucket buffers (the device
// peak is unchanged); the bf16 codec holds a bf16 wire copy of each bucket (bytes(): the same
// layout.total * 2 the trainer's bf16 path holds, which the trainer then does not allocate). Under
// zero 1 a unit is its padded region of the padded gradient (ShardUnit::padded; the padding is zero
// on every rank), as ZeroEngine::reduce allreduces it. It runs on its own communicator, split from
// the dp group at creation, since the trainer's tp, pp and dp collectives would interleave with its
// buckets differently on different ranks. Not thread-safe (the trainer's thread, like the model).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel.h"
#include "params.h"
#include "tessera/overlap/grad_sync.h"
#include "zero.h"

namespace tessera::gpt {

struct GradOverlapOptions {
  uint64_t bucket_bytes = 0;  // 0: the engine's rule (TESSERA_BUCKET_MB, else alpha-beta)
  DType wire = DType::kF32;   // kBF16: the engine's bf16 codec
  // Under pp with a tied embedding: the embedding's unit is marked by mark_deferred(), after
  // Pipeline::run summed it over the embedding group.
  bool defer_embedding = false;
};

class GradOverlap {
 public:
  // An engine over a split of groups.dp (collective over it) for the gradients of `params`
  // (`layers` blocks; sharded params: zero 1's padded units). Forms the buckets (collective:
  // checks every dp rank registered the same units).
  static Result<std::unique_ptr<GradOverlap>> create(const hal::Device& device,
                                                     const ParallelGroups& groups, Params& params,
                                                     int64_t layers, GradOverlapOptions options);

  // A step of `micro_batches` backwards per part begins: part_done() marks a part's units at its
  // micro_batches-th call.
  void begin_step(int64_t micro_batches);
  // The model's hook: (part, layer)'s backward is queued on `s`.
  Status part_done(const hal::Stream& s, Part part, int layer);
  // Marks the deferred units (defer_embedding) ready after the work queued so far on `s`.
  Status mark_deferred(const hal::Stream& s);
  // Waits until every bucket is summed: the gradients then hold the sum over dp.
  Status finish();
  // The engine's counters of the last finished step (communication busy and exposed seconds).
  const overlap::StepStats& last_step() const { return last_; }

  // The units (in layout order: the embedding, each block, the head) whose gradients the backward
  // of (part, layer) completes, which part_done() marks ready.
  const std::vector<int>& units_completed_by(Part part, int layer) const {
    return marks_[size_t(key(part, layer))];
  }
  const std::vector<int>& deferred_units() const { return deferred_; }
  // ep with expert_dp: the expert units (one per MoE block) block `layer`'s backward completes.
  std::vector<int> expert_units_completed_by(int layer) const {
    return experts_ ? expert_marks_[size_t(1 + layer)] : std::vector<int>{};
  }
  size_t buckets() const { return buckets_; }
  // Device bytes the engine holds for the step (the bf16 codec's wire copies; 0 with f32).
  uint64_t bytes() const { return bytes_; }

 private:
  GradOverlap(std::unique_ptr<overlap::GradSync> sync, std::vector<std::vector<int>> marks,
              std::vector<int> deferred);
  int64_t key(Part part, int layer) const {
    return part == Part::kEmbed ? 0 : part == Part::kHead ? layers_ + 1 : 1 + layer;
  }

  std::unique_ptr<overlap::GradSync> sync_;
  // Per part key (0 the embedding, 1 + l block l, layers + 1 the head): the units it completes.
  std::vector<std::vector<int>> marks_;
  std::vector<int> deferred_;   // units marked by mark_deferred()
  std::vector<int64_t> calls_;  // per part key: part_done() calls this step
  // ep with expert_dp: the experts' engine (a unit per block over expert_dp) and, per part key,
  // the expert units it completes.
  std::unique_ptr<overlap::GradSync> experts_;
  std::vector<std::vector<int>> expert_marks_;
  int64_t layers_ = 0;
  int64_t micro_batches_ = 1;
  size_t buckets_ = 0;
  uint64_t bytes_ = 0;
  overlap::StepStats last_;
};

}  // namespace tessera::gpt
