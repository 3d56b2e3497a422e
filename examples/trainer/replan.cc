#include "replan.h"

#include "tessera/ir/loaders.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/search.h"

namespace tessera::trainer {
namespace {

Result<ir::Model> model_of(const TrainOptions& options) {
  if (!options.gpt_config.empty()) return ir::load_model(options.gpt_config);
  return model_ir(options.model);
}

// The trainer's micro-batching: the whole per-dp-rank batch without a pipeline; with one, two
// micro-batches per stage where they divide (as `tessera demo` chooses).
void fit_microbatches(TrainPlan* p, int64_t batch, bool even_stages) {
  if (p->pp == 1 || even_stages) p->stage_blocks.clear();
  const int64_t local = batch / p->dp;
  p->mbs = 0;
  if (p->pp > 1 && local % (2 * p->pp) == 0) p->mbs = local / (2 * p->pp);
}

}  // namespace

Result<Replan> replan_for_world(const TrainOptions& options, int world) {
  const std::string where = "re-planning for " + std::to_string(world) + " ranks";
  TSR_ASSIGN_OR_RETURN(const ir::Model model, model_of(options));
  plan::Calibration c;
  c.backend = "host";
  c.device = "host (nominal figures)";
  c.devices = world;
  c.memory_gib = 4;
  c.gemm = {{128, 0.05}, {256, 0.1}};
  c.d2d_copy_gbps = 2;
  TSR_RETURN_IF_ERROR(plan::fit_gemm_curve(&c).with_context(where));
  plan::ClusterSpec cluster = plan::cluster_from_calibration(c);
  plan::CostOptions cost;
  plan::apply_calibration(c, &cluster, &cost);
  plan::SearchConstraints k;
  k.cp = 1;
  k.ep = 1;
  k.vp = 1;
  k.sp = false;
  k.zero = 0;
  k.recompute = plan::Recompute::kNone;
  k.top = 1;
  const int64_t seq = options.gpt_config.empty() ? 1 : options.seq;
  const plan::Workload workload{options.global_batch, seq, plan::Dtype::kBf16};
  Replan out;
  std::string refused;
  auto found = plan::search_plans(model, cluster, workload, k, cost);
  if (found.ok() && !found->plans.empty()) {
    auto p = plan_from_planner(found->plans.front().plan);
    if (p.ok()) {
      fit_microbatches(&*p, options.global_batch, !options.gpt_config.empty());
      const Status ok = check_trainer_plan(options, *p, options.global_batch, world);
      if (ok.ok()) {
        out.plan = *p;
        out.why = "planner: " + plan::plan_summary(found->plans.front().plan);
        return out;
      }
      refused = plan_text(*p) + ": " + ok.message();
    } else {
      refused = p.status().message();
    }
  } else {
    refused = found.ok() ? "no plan fits" : found.status().message();
  }
  TrainPlan dp;
  dp.dp = world;
  TSR_RETURN_IF_ERROR(
      check_trainer_plan(options, dp, options.global_batch, world).with_context(where));
  out.plan = dp;
  out.why = "fallback: pure data parallelism (the planner's choice was refused: " + refused + ")";
  return out;
}

}  // namespace tessera::trainer
