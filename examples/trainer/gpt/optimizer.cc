#include "optimizer.h"

#include <algorithm>
#include <cmath>

#include "ep.h"

namespace tessera::gpt {

float scheduled_lr(const AdamWOptions& o, int64_t step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * float(step) / float(o.warmup_steps);
  }
  if (o.decay_steps <= o.warmup_steps) return o.lr;
  const double progress =
      std::min(1.0, double(step - o.warmup_steps) / double(o.decay_steps - o.warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return float(o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine));
}

Result<AdamW> AdamW::create(const hal::Device& device, const ParamLayout& layout,
                            AdamWOptions options) {
  AdamW opt;
  opt.options_ = options;
  TSR_ASSIGN_OR_RETURN(opt.sums_, device.allocate(std::max<size_t>(layout.specs.size(), 1) * 4));
  TSR_ASSIGN_OR_RETURN(opt.norm_, device.allocate(2 * sizeof(double)));
  return opt;
}

namespace {

// Under pp a tied embedding is on the first and the last stage (identical gradients, summed over
// ParallelGroups::embed): only the first stage counts it, as the 1-rank run counts it once.
bool counted_on_stage(const ParamLayout& layout, const ParallelGroups& groups, size_t tensor) {
  return !(groups.pp_rank() > 0 && int(tensor) == layout.wte);
}

}  // namespace

// ZeRO (params.sharded()): each dp rank sums squares over its shard pieces only; the replicated and
// tp-sharded parts are then summed over dp, and the tp-sharded part over tp.
Result<double> AdamW::sharded_grad_norm(const hal::Stream& s, const Params& params,
                                        const GptKernels& kernels,
                                        const ParallelGroups& groups) const {
  const ParamLayout& layout = params.layout();
  float* sums = static_cast<float*>(sums_.data());
  std::vector<bool> present(layout.specs.size(), false);
  for (const ShardPiece& piece : params.shards().pieces) {
    present[size_t(piece.tensor)] = true;
    TSR_RETURN_IF_ERROR(
        kernels.sum_squares(s, params.shard_grad(piece), sums + piece.tensor, piece.count));
  }
  TSR_ASSIGN_OR_RETURN(std::vector<float> host, download<float>(s, sums, layout.specs.size()));
  std::vector<double> parts{0, 0};  // replicated, tp-sharded
  for (size_t i = 0; i < host.size(); ++i) {
    if (present[i] && counted_on_stage(layout, groups, i))
      parts[layout.specs[i].split == Split::kReplicated ? 0 : 1] += double(host[i]);
  }
  TSR_RETURN_IF_ERROR(upload(s, norm_.data(), parts));
  TSR_RETURN_IF_ERROR(allreduce_on(groups.dp, s, norm_.data(), 2, DType::kF64, ReduceOp::kSum,
                                   "gradient norm (ZeRO shards)"));
  double* sharded = static_cast<double*>(norm_.data()) + 1;
  TSR_RETURN_IF_ERROR(
      allreduce_on(groups.tp, s, sharded, 1, DType::kF64, ReduceOp::kSum, "gradient norm"));
  TSR_ASSIGN_OR_RETURN(parts, download<double>(s, norm_.data(), 2));
  return over_stages(s, groups, parts[0] + parts[1]);
}

// Each pipeline stage holds its own tensors: the squares of the stages add up (every rank of a
// stage holds its stage's whole sum by now, so the pp group of any tp/dp index sums the same).
Result<double> AdamW::over_stages(const hal::Stream& s, const ParallelGroups& groups,
                                  double stage_squares) const {
  if (groups.pp_size() == 1) return std::sqrt(stage_squares);
  TSR_RETURN_IF_ERROR(upload(s, norm_.data(), std::vector<double>{stage_squares}));
  TSR_RETURN_IF_ERROR(allreduce_on(groups.pp, s, norm_.data(), 1, DType::kF64, ReduceOp::kSum,
                                   "gradient norm (pipeline stages)"));
  TSR_ASSIGN_OR_RETURN(std::vector<double> total, download<double>(s, norm_.data(), 1));
  return std::sqrt(total[0]);
}

Result<double> AdamW::grad_norm(const hal::Stream& s, const Params& params,
                                const GptKernels& kernels, const ParallelGroups& groups) const {
  if (params.sharded()) return sharded_grad_norm(s, params, kernels, groups);
  const ParamLayout& layout = params.layout();
  float* sums = static_cast<float*>(sums_.data());
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    TSR_RETURN_IF_ERROR(
        kernels.sum_squares(s, params.grad(int(i)), sums + i, layout.specs[i].local_count()));
  }
  TSR_ASSIGN_OR_RETURN(std::vector<float> host, download<float>(s, sums, layout.specs.size()));
  double replicated = 0, sharded = 0, experts = 0;
  // Under ep (ep.h) the expert tensors after expert_begin are distinct on each ep rank: their
  // squares are summed over the expert group first (they are tp-split, so then over tp).
  const uint64_t expert_offset = groups.ep_size() > 1 ? expert_begin(layout) : layout.total;
  for (size_t i = 0; i < host.size(); ++i) {
    if (!counted_on_stage(layout, groups, i)) continue;
    if (layout.specs[i].offset >= expert_offset) {
      experts += double(host[i]);
      continue;
    }
    (layout.specs[i].split == Split::kReplicated ? replicated : sharded) += double(host[i]);
  }
  if (groups.ep_size() > 1) {
    TSR_RETURN_IF_ERROR(upload(s, norm_.data(), std::vector<double>{experts}));
    TSR_RETURN_IF_ERROR(allreduce_on(groups.ep, s, norm_.data(), 1, DType::kF64, ReduceOp::kSum,
                                     "expert gradient norm"));
    TSR_ASSIGN_OR_RETURN(std::vector<double> total, download<double>(s, norm_.data(), 1));
    sharded += total[0];
  }
  if (groups.tp_size() > 1) {
    TSR_RETURN_IF_ERROR(upload(s, norm_.data(), std::vector<double>{sharded}));
    TSR_RETURN_IF_ERROR(
        allreduce_on(groups.tp, s, norm_.data(), 1, DType::kF64, ReduceOp::kSum, "gradient norm"));
    TSR_ASSIGN_OR_RETURN(std::vector<double> total, download<double>(s, norm_.data(), 1));
    sharded = total[0];
  }
  return over_stages(s, groups, replicated + sharded);
}

Result<double> AdamW::step(const hal::Stream& s, Params& params, const GptKernels& kernels,
                           const ParallelGroups& groups) {
  TSR_ASSIGN_OR_RETURN(Outcome outcome, scaled_step(s, params, kernels, groups, 1.0, false));
  return outcome.norm;
}

Result<AdamW::Outcome> AdamW::scaled_step(const hal::Stream& s, Params& params,
                                          const GptKernels& kernels, const ParallelGroups& groups,
                                          double loss_scale, bool skip_overflow) {
  TSR_ASSIGN_OR_RETURN(double scaled_norm, grad_norm(s, params, kernels, groups));
  const double norm = scaled_norm / loss_scale;
  if (!std::isfinite(norm)) {
    if (skip_overflow) return Outcome{norm, true};
    return failed_precondition("AdamW step " + std::to_string(steps_ + 1) +
                               ": gradient norm is not finite");
  }
  // The clipping coefficient and the unscaling in one factor on the scaled gradients.
  const double clip =
      options_.clip_norm > 0 && norm > options_.clip_norm ? options_.clip_norm / norm : 1.0;
  const float scale = float(clip / loss_scale);
  ++steps_;
  const float bias1 = 1.0f - std::pow(options_.beta1, float(steps_));
  const float bias2 = 1.0f - std::pow(options_.beta2, float(steps_));
  const ParamLayout& layout = params.layout();
  const uint32_t act = uint32_t(hal::to_abi(params.act()));
  const float lr = scheduled_lr(options_, steps_);
  if (params.sharded()) {
    // This rank's piece of each tensor; master, m, v are shard-relative.
    for (const ShardPiece& piece : params.shards().pieces) {
      const float decay = layout.at(piece.tensor).decay ? options_.weight_decay : 0.0f;
      TSR_RETURN_IF_ERROR(kernels.adamw(
          s, params.master_base() + piece.at, params.shard_grad(piece), params.m_base() + piece.at,
          params.v_base() + piece.at, params.shard_work(piece), piece.count, lr, options_.beta1,
          options_.beta2, options_.eps, decay, bias1, bias2, scale, act));
    }
    return Outcome{norm, false};
  }
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ParamSpec& spec = layout.specs[i];
    const int index = int(i);
    TSR_RETURN_IF_ERROR(
        kernels.adamw(s, params.master(index), params.grad(index), params.m_base() + spec.offset,
                      params.v_base() + spec.offset, params.work(index), spec.local_count(), lr,
                      options_.beta1, options_.beta2, options_.eps,
                      spec.decay ? options_.weight_decay : 0.0f, bias1, bias2, scale, act));
  }
  return Outcome{norm, false};
}

}  // namespace tessera::gpt
