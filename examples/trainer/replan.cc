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
  cost.zero3_flat = false;  // the trainer's ZeroEngine gathers whole blocks, as FSDP does
  plan::apply_calibration(c, &cluster, &cost);
  const plan::SearchConstraints k = trainer_search_constraints(1);
  const int64_t seq = options.gpt_config.empty() ? 1 : options.seq;
  const plan::Workload workload{options.global_batch, seq, plan::Dtype::kBf16};
  Replan out;
  std::string refused;
  auto found = plan::search_plans(model, cluster, workload, k, cost);
  if (found.ok() && !found->plans.empty()) {
    auto p = plan_from_planner(found->plans.front().plan);
    if (p.ok()) {
      fit_trainer_microbatches(&*p, options.global_batch, model.num_blocks,
                               !options.gpt_config.empty());
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
