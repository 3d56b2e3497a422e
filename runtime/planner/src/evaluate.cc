// validate_plan and evaluate: one plan, checked (the rule table, rules.h, plus the plan's own
// consistency) and priced.
#include <string>

#include "rules.h"
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
  TSR_RETURN_IF_ERROR(rules::check({model, cluster, w, options}, p, rules::kAll));
  const int64_t m = w.global_batch / (static_cast<int64_t>(p.dp) * p.mbs);
  if (p.num_microbatches != m) {
    return invalid_argument("num_microbatches " + n(p.num_microbatches) + " should be " + n(m));
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
