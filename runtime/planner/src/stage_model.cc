// Stage times, per-device memory and the step estimate of one plan.
#include "tessera/plan/stage_model.h"

#include <algorithm>
#include <cmath>

#include "data_parallel.h"

namespace tessera::plan {
namespace {

// Bytes per parameter for weights, gradients and Adam state under a ZeRO stage sharded over d
// ranks. The gradients are held in the type they are reduced in, `grad` bytes (CostOptions::
// grad_reduce_bytes): bf16 models accumulate into fp32 gradients (Megatron-LM's main_grad; its
// distributed-optimizer table: 18 bytes, 6 + 12/d sharded), so bf16 is 18, ZeRO-1 6 + 12/d,
// ZeRO-2 2 + 16/d, ZeRO-3 18/d; with 2-byte gradients hardware.md's 16, 4 + 12/d, 2 + 14/d, 16/d.
struct ParamBytes {
  double weights, grads, optimizer;
};
ParamBytes param_bytes(int zero, double d, double grad) {
  return {zero >= 3 ? 2.0 / d : 2.0, zero >= 2 ? grad / d : grad, zero >= 1 ? 12.0 / d : 12.0};
}

}  // namespace

StepFlops step_flops(const ir::Model& model, const Workload& w) {
  StepFlops f;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const bool in_block = model.block_of[i] >= 0 && model.block_of[i] < model.num_blocks;
    for (const ir::Gemm& g : ir::layer_gemms(model.layers[i], w.global_batch, w.seq_len)) {
      f.model += 3 * g.flops();
      if (in_block) f.full_extra += g.flops();
      if (in_block && g.attention_core) f.selective_extra += g.flops();
    }
  }
  return f;
}

StageModel::StageModel(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
                       const Plan& plan, const ShapeCosts& costs, const StepFlops& flops,
                       const CostOptions& options)
    : plan_(plan), options_(options), flops_(flops), costs_(&costs) {
  devices_ = cluster.devices();
  tokens_per_step_ = static_cast<double>(w.global_batch) * static_cast<double>(w.seq_len);
  peak_ = cluster.device.peak_flops(w.dtype);
  membw_ = cluster.device.memory_bandwidth_gbps * 1e9 * options.memory_efficiency;
  budget_ = cluster.device.memory_gib * 1073741824.0 * (1 - options.reserve_fraction);
  const int64_t tc = static_cast<int64_t>(plan.tp) * plan.cp;
  if (plan.pp > 1) {
    // Megatron-LM's scatter/gather (or SP) sends 1/t of the activation from each TP rank.
    const bool split = options.p2p_scatter_gather || plan.sp;
    const double bytes = 2.0 * plan.mbs * static_cast<double>(w.seq_len) / plan.cp *
                         static_cast<double>(model.hidden) / (split ? plan.tp : 1);
    const LinkPath pp_path = group_path(cluster, tc * plan.dp, plan.pp);
    p2p_s_ = 2.0 * plan.vp * p2p_time(bytes, pp_path);  // activation forward, gradient back
  }
  dense_group_ = static_cast<double>(plan.dp) * plan.cp;
  expert_group_ = std::max(1.0, dense_group_ / plan.ep);
  // ZeRO-3's flat collectives move each device's share through its own NICs (cost_model.h).
  const auto path = plan.zero >= 3 && options.zero3_flat ? flat_group_path : group_path;
  dense_path_ = path(cluster, plan.tp, plan.cp * plan.dp);
  expert_path_ = path(cluster, tc * plan.ep, std::max(1, plan.dp / plan.ep));
  grad_bytes_ = grad_reduce_bytes(w.dtype, options);
  bucket_params_ = std::max(options.dp_bucket_params, 1e6 * plan.dp);
  if (plan.pp > 1 && model.tied_embeddings) {
    // The last stage keeps its own copy of the tied embedding matrix; after the backward the
    // first and last stage all-reduce its gradient (Megatron-LM), each TP rank its shard.
    post_extra_params_ =
        static_cast<double>(model.vocab) * static_cast<double>(model.hidden) / plan.tp;
    const LinkPath ends = group_path(cluster, tc * plan.dp * (plan.pp - 1), 2);
    embedding_sync_s_ = allreduce_time(grad_bytes_ * post_extra_params_, 2, ends);
  }
  // The gradient norm is summed over every device: one all-reduce of a scalar.
  norm_sync_s_ = allreduce_latency(devices_, group_path(cluster, 1, devices_));
}

double StageModel::range(const std::vector<double>& p, int stage, int first, int end) const {
  if (plan_.vp == 1) return p[static_cast<size_t>(end)] - p[static_cast<size_t>(first)];
  // Interleaved: the device holds chunk c * pp + stage for every c, each (end - first) / vp
  // blocks long (even partitions only, see validate_plan).
  const int chunk = (end - first) / plan_.vp;
  double sum = 0;
  for (int c = 0; c < plan_.vp; ++c) {
    const int start = (c * plan_.pp + stage) * chunk;
    sum += p[static_cast<size_t>(start + chunk)] - p[static_cast<size_t>(start)];
  }
  return sum;
}

double StageModel::in_flight(int stage) const {
  if (plan_.pp == 1) return 1;
  double n = std::min<double>(static_cast<double>(plan_.num_microbatches), plan_.pp - stage);
  if (plan_.vp > 1) n *= 1.0 + static_cast<double>(plan_.pp - 1) / (plan_.pp * plan_.vp);
  return n;
}

double StageModel::stage_time(int stage, int first, int end) const {
  double t = range(costs_->time, stage, first, end) + p2p_s_;
  if (stage == 0) t += costs_->pre.total_s();
  if (stage == plan_.pp - 1) t += costs_->post.total_s();
  return t;
}

double StageModel::stage_memory(int stage, int first, int end, MemoryBreakdown* out) const {
  double dense = range(costs_->dense, stage, first, end);
  double act = range(costs_->act, stage, first, end);
  const double expert = range(costs_->expert, stage, first, end);
  if (stage == 0) {
    dense += costs_->pre.dense_params;
    act += costs_->pre.act_bytes;
  }
  if (stage == plan_.pp - 1) {
    dense += costs_->post.dense_params + post_extra_params_;
    act += costs_->post.act_bytes;
  }
  const ParamBytes d = param_bytes(plan_.zero, dense_group_, grad_bytes_);
  const ParamBytes e = param_bytes(plan_.zero, expert_group_, grad_bytes_);
  MemoryBreakdown m;
  m.weights = dense * d.weights + expert * e.weights;
  m.gradients = dense * d.grads + expert * e.grads;
  m.optimizer = dense * d.optimizer + expert * e.optimizer;
  m.activations = act * in_flight(stage);
  m.transient = end > first ? costs_->max_transient : 0;
  // ZeRO-3 gathers a block's weights to use them, and prefetches the next one. DeepSpeed's flat
  // ZeRO-3 gathers module by module (a weight matrix, within its live-parameter limit): the one in
  // use and, in the backward, its 16-bit gradient before the reduce-scatter.
  if (plan_.zero >= 3) {
    m.transient +=
        2 * 2.0 * (options_.zero3_flat ? costs_->max_module_params : costs_->max_block_params);
  }
  if (out != nullptr) *out = m;
  return m.total();
}

double StageModel::pipeline_seconds(const std::vector<int>& counts) const {
  double sum = 0, max = 0;
  int first = 0;
  for (int i = 0; i < plan_.pp; ++i) {
    const int end = first + counts[static_cast<size_t>(i)];
    const double t = stage_time(i, first, end);
    sum += t;
    max = std::max(max, t);
    first = end;
  }
  return static_cast<double>(plan_.num_microbatches) * max + (sum - max) / plan_.vp;
}

Estimate StageModel::estimate(const std::vector<int>& counts) const {
  Estimate e;
  e.plan = plan_;
  e.plan.stage_blocks = counts;
  e.memory_budget_bytes = budget_;
  e.p2p_s = p2p_s_ / (2.0 * plan_.vp);
  const int p = plan_.pp;
  const double m = static_cast<double>(plan_.num_microbatches);
  std::vector<int> first(static_cast<size_t>(p) + 1, 0);
  for (int i = 0; i < p; ++i) first[i + 1] = first[i] + counts[static_cast<size_t>(i)];
  // With vp > 1 the counts are equal and range() spreads each device's share over vp chunks.
  auto lo = [&](int i) { return first[static_cast<size_t>(i)]; };
  auto hi = [&](int i) { return first[static_cast<size_t>(i) + 1]; };
  auto r = [&](const std::vector<double>& v, int i) { return range(v, i, lo(i), hi(i)); };

  int crit = 0;
  double sum_t = 0, max_t = -1, max_mem = -1, slack = 0, fwd_slack = 0, dp_exposed = 0;
  double optimizer = 0, clip = 0;
  for (int i = 0; i < p; ++i) {
    const double t = stage_time(i, lo(i), hi(i));
    e.stage_time_s.push_back(t);
    // Forward share: compute plus half of the TP/CP/EP traffic (one of each pair is backward).
    double f = r(costs_->fwd, i) + 0.5 * (r(costs_->tp, i) + r(costs_->cp, i) + r(costs_->ep, i));
    if (i == 0) f += costs_->pre.fwd_s + 0.5 * costs_->pre.tp_comm_s;
    if (i == p - 1) f += costs_->post.fwd_s + 0.5 * costs_->post.tp_comm_s;
    e.stage_fwd_s.push_back(f);
    sum_t += t;
    if (t > max_t) {
      max_t = t;
      crit = i;
    }
    MemoryBreakdown mem;
    const double bytes = stage_memory(i, lo(i), hi(i), &mem);
    e.stage_memory_bytes.push_back(bytes);
    if (bytes > max_mem) {
      max_mem = bytes;
      e.memory = mem;
      e.binding_stage = i;
    }
    // Gradient reduction of stage i: after its last backward, which ends sum_{j<i} B_j before
    // stage 0's (the drain), and overlapped with that backward itself. The next step's weights
    // (ZeRO-1/2) arrive during the fill, sum_{j<i} F_j, and the stage's first forward.
    double dense = r(costs_->dense, i), expert = r(costs_->expert, i);
    double bwd = r(costs_->bwd, i), fwd = r(costs_->fwd, i);
    if (i == 0)
      dense += costs_->pre.dense_params, bwd += costs_->pre.bwd_s, fwd += costs_->pre.fwd_s;
    if (i == p - 1) {
      dense += costs_->post.dense_params + post_extra_params_;
      bwd += costs_->post.bwd_s, fwd += costs_->post.fwd_s;
    }
    const dp::Group dg{dense, static_cast<int64_t>(dense_group_), dense_path_};
    const dp::Group eg{expert, static_cast<int64_t>(expert_group_), expert_path_};
    double exposed;
    if (plan_.zero >= 3) {
      // DeepSpeed and FSDP reduce-scatter ZeRO-3 gradients in the 16-bit training dtype.
      // Under full recomputation a flat (DeepSpeed) ZeRO-3 does not prefetch the backward's
      // gathers: its prefetch follows the forward's recorded module order, which the recomputed
      // forwards inside the backward break.
      const bool full = plan_.recompute == Recompute::kFull;
      exposed = m * dp::zero3_exposed_per_microbatch(*costs_, lo(i), hi(i), i == 0, i == p - 1, dg,
                                                     eg, 2.0, full, full && options_.zero3_flat);
    } else {
      exposed = dp::reduction_exposed(dg, eg, plan_.zero, grad_bytes_, bucket_params_,
                                      options_.dp_overlap * bwd + slack,
                                      options_.dp_overlap * fwd + fwd_slack);
    }
    slack += bwd;
    fwd_slack += fwd;
    dp_exposed = std::max(dp_exposed, exposed);
    const double held =
        (plan_.zero >= 1 ? dense / dense_group_ + expert / expert_group_ : dense + expert);
    optimizer = std::max(optimizer, held * options_.optimizer_bytes_per_param / membw_);
    const double buffer = plan_.zero >= 2 ? held : dense + expert;  // the local gradient buffer
    clip = std::max(
        clip, grad_bytes_ *
                  (held * options_.grad_norm_passes + buffer * options_.grad_zero_passes) / membw_);
  }

  const double pipeline = m * max_t + (sum_t - max_t) / plan_.vp;
  TimeBreakdown& tb = e.time;
  double crit_compute = r(costs_->fwd, crit) + r(costs_->bwd, crit);
  double crit_tp = r(costs_->tp, crit), crit_cp = r(costs_->cp, crit),
         crit_ep = r(costs_->ep, crit);
  double crit_mem = r(costs_->mem, crit), crit_launch = r(costs_->launch, crit);
  for (const auto& [stage, g] : {std::pair{0, &costs_->pre}, std::pair{p - 1, &costs_->post}}) {
    if (stage != crit) continue;
    crit_compute += g->fwd_s + g->bwd_s;
    crit_tp += g->tp_comm_s;
    crit_cp += g->cp_comm_s;
    crit_ep += g->ep_comm_s;
    crit_mem += g->mem_s;
    crit_launch += g->launch_s;
  }
  tb.compute_s = m * (crit_compute - crit_mem - crit_launch);
  tb.memory_bound_s = m * crit_mem;
  tb.launch_s = m * crit_launch;
  tb.tp_comm_s = m * crit_tp;
  tb.cp_comm_s = m * crit_cp;
  tb.ep_comm_s = m * crit_ep;
  tb.pp_comm_s = m * p2p_s_;
  tb.bubble_s = pipeline - m * max_t;
  tb.dp_comm_s = dp_exposed;
  tb.optimizer_s = optimizer;
  tb.grad_clip_s = clip + norm_sync_s_;
  tb.embedding_sync_s = embedding_sync_s_;
  e.step_time_s = tb.total();
  // Rounding can leave compute + comm a hair off m * max_t; the bubble absorbs it.
  tb.bubble_s = std::max(0.0, tb.bubble_s);

  double hardware = flops_.model;
  if (plan_.recompute == Recompute::kFull) hardware += flops_.full_extra;
  if (plan_.recompute == Recompute::kSelective && !options_.flash_attention) {
    hardware += flops_.selective_extra;
  }
  // Fused attention recomputes QK^T in backward: half the attention core's forward again.
  if (options_.flash_attention) hardware += 0.5 * flops_.selective_extra;
  const double n = static_cast<double>(devices_);
  e.tokens_per_s = tokens_per_step_ / e.step_time_s;
  e.model_tflops_per_device = flops_.model / e.step_time_s / n / 1e12;
  e.hardware_tflops_per_device = hardware / e.step_time_s / n / 1e12;
  e.mfu = flops_.model / (e.step_time_s * n * peak_);
  e.fits = max_mem <= budget_;
  return e;
}

}  // namespace tessera::plan
