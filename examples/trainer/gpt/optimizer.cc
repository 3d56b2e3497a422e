#include "optimizer.h"

#include <algorithm>
#include <cmath>

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

// The part of tensor `spec` inside the flat range [begin, end): elements [first, first + count)
// of the tensor (count 0 when they do not meet).
struct Span {
  uint64_t first = 0, count = 0;
};
Span clip(const ParamSpec& spec, uint64_t begin, uint64_t end) {
  const uint64_t lo = std::max(spec.offset, begin);
  const uint64_t hi = std::min(spec.offset + spec.local_count(), end);
  return hi > lo ? Span{lo - spec.offset, hi - lo} : Span{};
}

}  // namespace

// ZeRO (params.sharded()): each dp rank sums squares over its shard only; the replicated and
// tp-sharded parts are then summed over dp, and the tp-sharded part over tp.
Result<double> AdamW::sharded_grad_norm(const hal::Stream& s, const Params& params,
                                        const GptKernels& kernels,
                                        const ParallelGroups& groups) const {
  const ParamLayout& layout = params.layout();
  const uint64_t begin = params.shard_begin(), end = begin + params.shard_size();
  float* sums = static_cast<float*>(sums_.data());
  std::vector<bool> present(layout.specs.size(), false);
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const Span part = clip(layout.specs[i], begin, end);
    if (part.count == 0) continue;
    present[i] = true;
    TSR_RETURN_IF_ERROR(
        kernels.sum_squares(s, params.grad(int(i)) + part.first, sums + i, part.count));
  }
  TSR_ASSIGN_OR_RETURN(std::vector<float> host, download<float>(s, sums, layout.specs.size()));
  std::vector<double> parts{0, 0};  // replicated, tp-sharded
  for (size_t i = 0; i < host.size(); ++i) {
    if (present[i]) parts[layout.specs[i].split == Split::kReplicated ? 0 : 1] += double(host[i]);
  }
  TSR_RETURN_IF_ERROR(upload(s, norm_.data(), parts));
  TSR_RETURN_IF_ERROR(allreduce_on(groups.dp, s, norm_.data(), 2, DType::kF64, ReduceOp::kSum,
                                   "gradient norm (ZeRO shards)"));
  double* sharded = static_cast<double*>(norm_.data()) + 1;
  TSR_RETURN_IF_ERROR(
      allreduce_on(groups.tp, s, sharded, 1, DType::kF64, ReduceOp::kSum, "gradient norm"));
  TSR_ASSIGN_OR_RETURN(parts, download<double>(s, norm_.data(), 2));
  return std::sqrt(parts[0] + parts[1]);
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
  double replicated = 0, sharded = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    (layout.specs[i].split == Split::kReplicated ? replicated : sharded) += double(host[i]);
  }
  if (groups.tp_size() > 1) {
    TSR_RETURN_IF_ERROR(upload(s, norm_.data(), std::vector<double>{sharded}));
    TSR_RETURN_IF_ERROR(
        allreduce_on(groups.tp, s, norm_.data(), 1, DType::kF64, ReduceOp::kSum, "gradient norm"));
    TSR_ASSIGN_OR_RETURN(std::vector<double> total, download<double>(s, norm_.data(), 1));
    sharded = total[0];
  }
  return std::sqrt(replicated + sharded);
}

Result<double> AdamW::step(const hal::Stream& s, Params& params, const GptKernels& kernels,
                           const ParallelGroups& groups) {
  TSR_ASSIGN_OR_RETURN(double norm, grad_norm(s, params, kernels, groups));
  if (!std::isfinite(norm)) {
    return failed_precondition("AdamW step " + std::to_string(steps_ + 1) +
                               ": gradient norm is not finite");
  }
  const float scale =
      options_.clip_norm > 0 && norm > options_.clip_norm ? float(options_.clip_norm / norm) : 1.0f;
  ++steps_;
  const float bias1 = 1.0f - std::pow(options_.beta1, float(steps_));
  const float bias2 = 1.0f - std::pow(options_.beta2, float(steps_));
  const ParamLayout& layout = params.layout();
  const uint32_t act = uint32_t(hal::to_abi(params.act()));
  const float lr = scheduled_lr(options_, steps_);
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ParamSpec& spec = layout.specs[i];
    const int index = int(i);
    if (params.sharded()) {
      // The tensor's part inside this rank's shard; master, m, v are shard-relative.
      const uint64_t begin = params.shard_begin();
      const Span part = clip(spec, begin, begin + params.shard_size());
      if (part.count == 0) continue;
      const uint64_t at = spec.offset + part.first - begin;
      void* work =
          static_cast<char*>(params.work(index)) + part.first * hal::dtype_size(params.act());
      TSR_RETURN_IF_ERROR(kernels.adamw(
          s, params.master_base() + at, params.grad(index) + part.first, params.m_base() + at,
          params.v_base() + at, work, part.count, lr, options_.beta1, options_.beta2, options_.eps,
          spec.decay ? options_.weight_decay : 0.0f, bias1, bias2, scale, act));
      continue;
    }
    TSR_RETURN_IF_ERROR(
        kernels.adamw(s, params.master(index), params.grad(index), params.m_base() + spec.offset,
                      params.v_base() + spec.offset, params.work(index), spec.local_count(), lr,
                      options_.beta1, options_.beta2, options_.eps,
                      spec.decay ? options_.weight_decay : 0.0f, bias1, bias2, scale, act));
  }
  return norm;
}

}  // namespace tessera::gpt
