#include "loss_scale.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace tessera::gpt {

Status check_loss_scale(const LossScaleOptions& o) {
  if (!o.enabled()) return Status();
  auto refuse = [](const char* field, double value, const char* rule) {
    char text[160];
    std::snprintf(text, sizeof text, "GPT trainer: loss_scale.%s %g must be %s", field, value,
                  rule);
    return invalid_argument(text);
  };
  if (o.mode != LossScaleMode::kStatic && o.mode != LossScaleMode::kDynamic) {
    return refuse("mode", double(uint32_t(o.mode)), "off (0), static (1) or dynamic (2)");
  }
  if (!(std::isfinite(o.initial_scale) && o.initial_scale > 0)) {
    return refuse("initial_scale", o.initial_scale, "finite and > 0");
  }
  if (o.mode == LossScaleMode::kStatic) return Status();
  if (!(std::isfinite(o.growth_factor) && o.growth_factor > 1)) {
    return refuse("growth_factor", o.growth_factor, "finite and > 1");
  }
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
    return refuse("backoff_factor", o.backoff_factor, "in (0, 1)");
  }
  if (o.growth_interval < 1) {
    return refuse("growth_interval", double(o.growth_interval), ">= 1");
  }
  if (!(o.min_scale > 0 && o.min_scale <= o.initial_scale)) {
    return refuse("min_scale", o.min_scale, "in (0, initial_scale]");
  }
  return Status();
}

std::string loss_scale_text(const LossScaleOptions& o) {
  char text[160];
  switch (o.mode) {
    case LossScaleMode::kOff: return "off";
    case LossScaleMode::kStatic:
      std::snprintf(text, sizeof text, "static %g", o.initial_scale);
      return text;
    case LossScaleMode::kDynamic: break;
  }
  std::snprintf(text, sizeof text, "dynamic %g (x%g every %" PRId64 ", x%g on overflow, min %g)",
                o.initial_scale, o.growth_factor, o.growth_interval, o.backoff_factor, o.min_scale);
  return text;
}

LossScaler::LossScaler(const LossScaleOptions& options)
    : options_(options), scale_(options.enabled() ? options.initial_scale : 1.0) {}

void LossScaler::update(bool applied) {
  if (!options_.enabled()) return;
  if (!applied) {
    ++skipped_steps_;
    good_steps_ = 0;
    if (options_.mode == LossScaleMode::kDynamic) {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    }
    return;
  }
  if (options_.mode != LossScaleMode::kDynamic) return;
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

namespace {

const char* mode_word(LossScaleMode mode) {
  switch (mode) {
    case LossScaleMode::kOff: return "off";
    case LossScaleMode::kStatic: return "static";
    case LossScaleMode::kDynamic: return "dynamic";
  }
  return "?";
}

}  // namespace

std::string LossScaler::state() const {
  char text[160];
  std::snprintf(text, sizeof text, "mode=%s scale=%a good=%" PRId64 " skipped=%" PRId64,
                mode_word(options_.mode), scale_, good_steps_, skipped_steps_);
  return text;
}

Status LossScaler::set_state(std::string_view text) {
  const std::string copy(text);
  char mode[16] = {};
  double scale = 0;
  int64_t good = 0, skipped = 0;
  int consumed = 0;
  const bool parsed =
      std::sscanf(copy.c_str(), "mode=%15s scale=%la good=%" SCNd64 " skipped=%" SCNd64 "%n", mode,
                  &scale, &good, &skipped, &consumed) == 4 &&
      size_t(consumed) == copy.size();
  const std::string saved_mode(mode);
  if (!parsed || (saved_mode != "off" && saved_mode != "static" && saved_mode != "dynamic") ||
      !(std::isfinite(scale) && scale > 0) || good < 0 || skipped < 0) {
    return invalid_argument("GPT loss scaler: malformed state '" + copy + "'");
  }
  // The skipped steps are history (AdamW's step count is the steps taken minus them), whatever
  // this run's mode. The scale and its good-step count continue only from dynamic to dynamic: a
  // static or disabled run keeps its configured scale, and a dynamic run resumed from a static or
  // unscaled checkpoint (bf16 -> f16 at a resume) starts from its initial scale.
  skipped_steps_ = skipped;
  if (options_.mode == LossScaleMode::kDynamic && saved_mode == "dynamic") {
    scale_ = scale;
    good_steps_ = good;
  }
  return Status();
}

}  // namespace tessera::gpt
