// The data-parallel gradient sum of zero 0 through the overlap engine (TrainOptions::overlap,
// `--overlap`; runtime/overlap grad_sync.h, docs/OVERLAP.md) instead of one allreduce of the flat
// gradient on the compute stream after the whole backward.
//
// Each unit of the flat layout (zero.h: the embedding, each block, the final norm with the head)
// is one GradSync parameter, registered in layout order, so the engine's buckets fill head first.
// GptModel calls part_done() as each part's backward is queued (model.h, set_grads_done); on the
// step's last micro-batch that marks the part's units ready on the compute stream, and a bucket
// whose units are all marked is summed on the engine's communication stream while the backward of
// the earlier layers goes on. Earlier micro-batches only accumulate (one reduction per step, as
// without the option). A unit is marked after the last part that writes its gradient: a tied
// embedding after the embedding's backward, not the head's.
//
// The engine sums (Reduction::kSum): every rank's gradient already carries its 1/(micro_batches *
// dp) share, as for the plain allreduce. A bucket's units are adjacent in the flat gradient, so the
// engine reduces them in place: it allocates no bucket buffers (the device peak is unchanged). It
// runs on its own communicator, split from the dp group at creation, since the trainer's tp and dp
// collectives would interleave with its buckets differently on different ranks. Not thread-safe
// (the trainer's thread, like the model).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel.h"
#include "params.h"
#include "tessera/overlap/grad_sync.h"
#include "zero.h"

namespace tessera::gpt {

class GradOverlap {
 public:
  // An engine over a split of groups.dp (collective over it) for the gradients of `params`
  // (`layers` blocks); `bucket_bytes` 0: the engine's rule (TESSERA_BUCKET_MB, else alpha-beta).
  // Forms the buckets (collective: checks every dp rank registered the same units).
  static Result<std::unique_ptr<GradOverlap>> create(const hal::Device& device,
                                                     const ParallelGroups& groups, Params& params,
                                                     int64_t layers, uint64_t bucket_bytes);

  // Whether the coming micro-batch is the step's last (whose part_done() marks gradients ready).
  void set_last_micro_batch(bool last) { last_micro_batch_ = last; }
  // The model's hook: (part, layer)'s backward is queued on `s`.
  Status part_done(const hal::Stream& s, Part part, int layer);
  // Waits until every bucket is summed: the gradients then hold the sum over dp.
  Status finish();
  // The engine's counters of the last finished step (communication busy and exposed seconds).
  const overlap::StepStats& last_step() const { return last_; }

  // The units (in layout order: the embedding, each block, the head) whose gradients the backward
  // of (part, layer) completes, which part_done() marks ready.
  const std::vector<int>& units_completed_by(Part part, int layer) const {
    return marks_[size_t(key(part, layer))];
  }
  size_t buckets() const { return buckets_; }

 private:
  GradOverlap(std::unique_ptr<overlap::GradSync> sync, std::vector<std::vector<int>> marks);
  int64_t key(Part part, int layer) const {
    return part == Part::kEmbed ? 0 : part == Part::kHead ? layers_ + 1 : 1 + layer;
  }

  std::unique_ptr<overlap::GradSync> sync_;
  // Per part key (0 the embedding, 1 + l block l, layers + 1 the head): the units it completes.
  std::vector<std::vector<int>> marks_;
  int64_t layers_ = 0;
  size_t buckets_ = 0;
  bool last_micro_batch_ = true;
  overlap::StepStats last_;
};

}  // namespace tessera::gpt
