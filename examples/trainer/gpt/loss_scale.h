// Loss scaling for f16 training (Micikevicius et al. 2018, "Mixed Precision Training"; the scheme
// of PyTorch's GradScaler and Megatron's DynamicGradScaler). f16 keeps 10 mantissa bits but only
// 5 exponent bits: small activation gradients flush to zero. The backward is therefore seeded
// with the loss multiplied by `scale`, the f32 gradients come out `scale` times too large, and the
// optimizer divides them back (folded into the clipping coefficient: AdamW::scaled_step). An
// overflow anywhere (an f16 store past 65504 is infinity, then inf/NaN in the f32 gradients)
// makes the global gradient norm non-finite on every rank: the step is skipped (the optimizer
// does not update, its step count and the learning-rate schedule stay) and a dynamic scale backs
// off; after `growth_interval` consecutive applied steps it grows.
//
//   LossScaler scaler(options.loss_scale);
//   model.backward(stream, weight * float(scaler.scale()));
//   outcome = adamw.scaled_step(..., scaler.scale());
//   scaler.update(!outcome.skipped);
//
// Not thread-safe: one scaler per trainer; every rank's scaler sees the same outcomes (the norm
// is global), so the scales stay identical across ranks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.h"

namespace tessera::gpt {

enum class LossScaleMode : uint32_t {
  kOff = 0,      // no scaling: scale 1, a non-finite gradient norm fails the step
  kStatic = 1,   // a fixed scale; an overflowing step is skipped, the scale kept
  kDynamic = 2,  // skipped steps back the scale off, growth_interval good steps grow it
};

struct LossScaleOptions {
  LossScaleMode mode = LossScaleMode::kOff;
  double initial_scale = 65536.0;  // 2^16; the scale itself under kStatic
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 1000;  // consecutive applied steps before a growth, >= 1
  double min_scale = 1.0;          // the backoff stops here, (0, initial_scale]
  bool enabled() const { return mode != LossScaleMode::kOff; }
};

// INVALID_ARGUMENT naming the field ("loss_scale.growth_factor 0.5 must be > 1") when `options`
// are out of range; OK for kOff whatever the other fields hold.
Status check_loss_scale(const LossScaleOptions& options);
// "off", "static 1024", "dynamic 65536 (x2 every 1000, x0.5 on overflow, min 1)".
std::string loss_scale_text(const LossScaleOptions& options);

class LossScaler {
 public:
  LossScaler() = default;
  explicit LossScaler(const LossScaleOptions& options);

  // The scale of the next step: 1 when scaling is off.
  double scale() const { return scale_; }
  // Applied steps since the last growth or skip.
  int64_t good_steps() const { return good_steps_; }
  // Steps skipped since the start of the run (restored from a checkpoint).
  int64_t skipped_steps() const { return skipped_steps_; }
  // After a step: `applied` false (overflow) backs a dynamic scale off to max(scale * backoff,
  // min_scale) and counts the skip; true counts a good step and grows a dynamic scale after
  // growth_interval of them.
  void update(bool applied);

  // The state a checkpoint keeps ("mode=dynamic scale=0x1p+16 good=12 skipped=3": the scale in
  // hexadecimal floating point, bitwise) and restores: the skipped count always (AdamW's step
  // count is the steps taken minus it), the scale and good steps only from a dynamic run into a
  // dynamic run (otherwise the configured scale stands). set_state refuses malformed text
  // naming it.
  std::string state() const;
  Status set_state(std::string_view text);

 private:
  LossScaleOptions options_;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace tessera::gpt
