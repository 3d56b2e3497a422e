// validate_plan and evaluate: one plan, checked and priced.
#include <string>

#include "tessera/plan/partition.h"
#include "tessera/plan/stage_model.h"

namespace tessera::plan {
namespace {

std::string n(int64_t v) {
  return std::to_string(v);
}

}  // namespace

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}

std::string plan_summary(const Plan& p) {
  return "tp=" + n(p.tp) + " pp=" + n(p.pp) + " dp=" + n(p.dp) + " cp=" + n(p.cp) +
         " ep=" + n(p.ep) + " vp=" + n(p.vp) + " mbs=" + n(p.mbs) + " zero=" + n(p.zero) +
         " recompute=" + std::string(recompute_name(p.recompute)) + " sp=" + (p.sp ? "1" : "0");
}

Status validate_plan(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
                     const Plan& p, const CostOptions& options) {
  if (w.global_batch < 1 || w.global_batch > kMaxGlobalBatch) {
    return invalid_argument("global batch must be in 1.." + n(kMaxGlobalBatch));
  }
  if (w.seq_len < 1 || w.seq_len > kMaxSeqLen) {
    return invalid_argument("sequence length must be in 1.." + n(kMaxSeqLen));
  }
  TSR_RETURN_IF_ERROR(validate_cluster(cluster, w.dtype));
  if (p.tp < 1 || p.pp < 1 || p.dp < 1 || p.cp < 1 || p.ep < 1 || p.vp < 1 || p.mbs < 1) {
    return invalid_argument("tp, pp, dp, cp, ep, vp and mbs must be at least 1");
  }
  const int64_t used = static_cast<int64_t>(p.tp) * p.pp * p.dp * p.cp;
  if (used != cluster.devices()) {
    return invalid_argument("tp*pp*dp*cp = " + n(used) + " but the cluster has " +
                            n(cluster.devices()) + " devices");
  }
  if (model.heads % p.tp != 0) {
    return invalid_argument("tp=" + n(p.tp) + " does not divide num_attention_heads " +
                            n(model.heads));
  }
  if (model.kv_heads % p.tp != 0 && p.tp % model.kv_heads != 0) {
    return invalid_argument("tp=" + n(p.tp) + " neither divides nor is a multiple of " +
                            "num_key_value_heads " + n(model.kv_heads));
  }
  if (p.tp > cluster.devices_per_host && !options.allow_tp_across_hosts) {
    return invalid_argument("tp=" + n(p.tp) + " exceeds the " + n(cluster.devices_per_host) +
                            " devices of a host");
  }
  if (p.pp > model.num_blocks) {
    return invalid_argument("pp=" + n(p.pp) + " exceeds the model's " + n(model.num_blocks) +
                            " layers");
  }
  if (w.global_batch % (static_cast<int64_t>(p.dp) * p.mbs) != 0) {
    return invalid_argument(
        "global batch " + n(w.global_batch) +
        " is not a multiple of dp*mbs = " + n(static_cast<int64_t>(p.dp) * p.mbs));
  }
  const int64_t m = w.global_batch / (static_cast<int64_t>(p.dp) * p.mbs);
  if (p.num_microbatches != m) {
    return invalid_argument("num_microbatches " + n(p.num_microbatches) + " should be " + n(m));
  }
  if (p.vp > 1) {
    if (p.pp == 1) return invalid_argument("vp=" + n(p.vp) + " needs pp > 1");
    if (model.num_blocks % (p.pp * p.vp) != 0) {
      return invalid_argument("vp=" + n(p.vp) + ": " + n(model.num_blocks) +
                              " layers do not split evenly into pp*vp = " + n(p.pp * p.vp) +
                              " chunks");
    }
    if (m % p.pp != 0) {
      return invalid_argument("vp=" + n(p.vp) + " needs the " + n(m) +
                              " micro-batches to be a multiple of pp=" + n(p.pp));
    }
  }
  if (w.seq_len % (2 * p.cp) != 0 && p.cp > 1) {
    return invalid_argument("cp=" + n(p.cp) + ": sequence length " + n(w.seq_len) +
                            " is not a multiple of 2*cp (load-balanced causal chunks)");
  }
  if (p.ep > 1) {
    if (model.experts == 0)
      return invalid_argument("ep=" + n(p.ep) + " but the model has no experts");
    if (model.experts % p.ep != 0) {
      return invalid_argument("ep=" + n(p.ep) + " does not divide the " + n(model.experts) +
                              " experts");
    }
    if (p.dp % p.ep != 0) {
      return invalid_argument("ep=" + n(p.ep) + " does not divide dp=" + n(p.dp));
    }
  }
  if (p.zero < 0 || p.zero > 3) return invalid_argument("zero must be 0..3");
  if (p.zero == 3 && p.pp > 1) {
    return invalid_argument(
        "zero=3 with pp>1 is not supported (weights would be gathered per "
        "micro-batch per stage)");
  }
  if (p.sp && p.tp == 1) return invalid_argument("sp=1 needs tp > 1");
  for (const ir::Layer& l : model.layers) {
    if (l.kind == ir::LayerKind::kEmbedding && l.positions > 0 && w.seq_len > l.positions) {
      return invalid_argument("sequence length " + n(w.seq_len) + " exceeds the model's " +
                              n(l.positions) + " learned positions");
    }
  }
  if (!p.stage_blocks.empty()) {
    if (static_cast<int>(p.stage_blocks.size()) != p.pp) {
      return invalid_argument("stage_blocks has " + n(static_cast<int64_t>(p.stage_blocks.size())) +
                              " entries for pp=" + n(p.pp));
    }
    int sum = 0;
    for (int b : p.stage_blocks) {
      if (b < 1) return invalid_argument("every pipeline stage needs at least one layer");
      if (p.vp > 1 && b != p.stage_blocks.front()) {
        return invalid_argument("vp > 1 needs equal layers per stage");
      }
      sum += b;
    }
    if (sum != model.num_blocks) {
      return invalid_argument("stage_blocks sum to " + n(sum) + ", the model has " +
                              n(model.num_blocks) + " layers");
    }
  }
  return Status();
}

Result<Estimate> evaluate(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
                          const Plan& plan, const CostOptions& options) {
  TSR_RETURN_IF_ERROR(validate_plan(model, cluster, w, plan, options));
  const ShapeKey key{plan.tp, plan.cp, plan.ep, plan.mbs, plan.sp, plan.recompute};
  const ShapeCosts costs = compute_shape_costs(model, cluster, w, key, options);
  const StageModel stages(model, cluster, w, plan, costs, step_flops(model, w), options);
  std::vector<int> counts = plan.stage_blocks;
  if (counts.empty() && plan.vp > 1) {
    counts.assign(static_cast<size_t>(plan.pp), model.num_blocks / plan.pp);
  }
  if (counts.empty()) {
    // Fastest partition that fits; if none fits, the one that needs the least memory, so the
    // caller can report by how much the plan misses.
    const double budget = stages.budget_bytes();
    counts = partition_min_max(model.num_blocks, plan.pp, [&](int s, int a, int b) {
      return stages.stage_memory(s, a, b) <= budget ? stages.stage_time(s, a, b)
                                                    : std::numeric_limits<double>::infinity();
    });
    if (counts.empty()) {
      counts = partition_min_max(model.num_blocks, plan.pp,
                                 [&](int s, int a, int b) { return stages.stage_memory(s, a, b); });
    }
  }
  return stages.estimate(counts);
}

}  // namespace tessera::plan
