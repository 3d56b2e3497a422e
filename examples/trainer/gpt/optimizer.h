// AdamW on the flat f32 master weights with global-norm gradient clipping. The norm is computed
// per tensor on the device (sum_squares), read back and summed on the host in tensor order; the
// tensor-parallel shards' part is summed over the tp group (replicated tensors count once), and
// under pipeline parallelism the stages' sums over the pp group (a tied embedding, on the first
// and the last stage, counted once: on the first).
// Gradients must already be averaged over data parallelism (identical on every dp rank), so
// every dp rank takes the same step. Under ZeRO (Params::sharded(), zero.h) each dp rank
// updates only its shard of master, m, v and the working copy, and the norm is summed over dp.
// Under loss scaling (loss_scale.h) the gradients arrive scaled; scaled_step unscales them
// within the clipping coefficient and skips a step whose norm overflowed.
// Not thread-safe.
#pragma once

#include <cstdint>

#include "kernels.h"
#include "parallel.h"
#include "params.h"

namespace tessera::gpt {

struct AdamWOptions {
  float lr = 3e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // matrices only (ParamSpec::decay)
  float clip_norm = 1.0f;     // <= 0: no clipping
  // Schedule: linear warmup over `warmup_steps`, then cosine decay to min_lr_ratio * lr at
  // `decay_steps` (and constant after); decay_steps 0 keeps lr constant after the warmup.
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  float min_lr_ratio = 0.1f;
};

// The learning rate of step `step` (1-based) under `options`' schedule.
float scheduled_lr(const AdamWOptions& options, int64_t step);

class AdamW {
 public:
  static Result<AdamW> create(const hal::Device& device, const ParamLayout& layout,
                              AdamWOptions options);

  // The global L2 norm of the gradients (before clipping). Synchronises the stream.
  Result<double> grad_norm(const hal::Stream& s, const Params& params, const GptKernels& kernels,
                           const ParallelGroups& groups) const;
  // One step: clip to clip_norm, update master, m, v and the working copy. Returns the norm.
  // FAILED_PRECONDITION naming the step when the norm is not finite.
  Result<double> step(const hal::Stream& s, Params& params, const GptKernels& kernels,
                      const ParallelGroups& groups);
  struct Outcome {
    double norm = 0;       // of the unscaled gradients, before clipping; inf/NaN when skipped
    bool skipped = false;  // an overflow: nothing was updated and steps() did not advance
  };
  // One step on gradients multiplied by `loss_scale` (loss_scale.h). A non-finite norm (the norm
  // is global over tp, pp, dp and ep, so every rank sees the same) skips the step: master, m, v
  // and the working copy stay bitwise, steps() and with it the schedule and bias correction stay.
  // Otherwise 1/loss_scale is folded into the clipping coefficient (no extra pass). loss_scale 1
  // with a non-finite norm fails as step() does only when `skip_overflow` is false.
  Result<Outcome> scaled_step(const hal::Stream& s, Params& params, const GptKernels& kernels,
                              const ParallelGroups& groups, double loss_scale, bool skip_overflow);
  int64_t steps() const { return steps_; }
  // The steps already taken (a checkpoint's step when continuing from it): the next step is
  // steps + 1 for the bias correction and the schedule.
  void set_steps(int64_t steps) { steps_ = steps; }
  uint64_t scratch_bytes() const { return sums_.size() + norm_.size(); }

 private:
  Result<double> sharded_grad_norm(const hal::Stream& s, const Params& params,
                                   const GptKernels& kernels, const ParallelGroups& groups) const;
  // sqrt of the squares summed over the pipeline stages (pp > 1), from this stage's sum.
  Result<double> over_stages(const hal::Stream& s, const ParallelGroups& groups,
                             double stage_squares) const;

  AdamWOptions options_;
  hal::DeviceBuffer sums_;  // f32 [tensors]: per-tensor sums of squares
  hal::DeviceBuffer norm_;  // f64 [2]: dp/tp allreduces of the norm's parts
  int64_t steps_ = 0;
};

}  // namespace tessera::gpt
