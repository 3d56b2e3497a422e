#include "memory_report.h"

#include <cstdio>

#include "stage.h"
#include "tessera/plan/cluster.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/stage_model.h"

namespace tessera::gpt {

PlanShape plan_shape(const TrainOptions& o, int tp, int dp, int pp, int ep) {
  PlanShape s;
  s.tp = tp, s.dp = dp, s.pp = pp, s.ep = ep;
  s.zero = o.zero;
  s.recompute = o.recompute;
  s.sp = o.sp;
  s.vp = o.vp;
  s.micro_batch = o.micro_batch, s.seq = o.seq, s.micro_batches = o.micro_batches;
  s.act = o.act;
  return s;
}

Result<plan::MemoryBreakdown> predict_memory(const ir::Model& model, const PlanShape& s,
                                             int stage) {
  if (stage < 0 || stage >= s.pp) {
    return invalid_argument("predict_memory: stage " + std::to_string(stage) + " of pp " +
                            std::to_string(s.pp));
  }
  // The planner prices 16-bit training only; an f32 run is compared as if bf16 (its activations
  // and working weights are then twice the prediction).
  const plan::Workload workload{s.micro_batch * s.micro_batches * s.dp, s.seq, plan::Dtype::kBf16};
  plan::Plan p;
  p.tp = s.tp, p.dp = s.dp, p.pp = s.pp, p.ep = s.ep;
  p.mbs = int(s.micro_batch);
  p.num_microbatches = s.micro_batches;
  p.zero = s.zero;
  p.sp = s.sp;
  p.vp = s.vp;
  p.recompute = s.recompute == Recompute::kFull        ? plan::Recompute::kFull
                : s.recompute == Recompute::kSelective ? plan::Recompute::kSelective
                                                       : plan::Recompute::kNone;
  int first = 0, end = 0;
  for (int i = 0; i < s.pp; ++i) {
    TSR_ASSIGN_OR_RETURN(StageRange r, stage_range(model.num_blocks, i, s.pp));
    p.stage_blocks.push_back(r.end_layer - r.first_layer);
    if (i == stage) first = r.first_layer, end = r.end_layer;
  }
  TSR_ASSIGN_OR_RETURN(plan::ClusterSpec preset, plan::cluster_preset("dgx-h100"));
  TSR_ASSIGN_OR_RETURN(plan::ClusterSpec cluster,
                       plan::with_devices(preset, int64_t(s.tp) * s.dp * s.pp));
  plan::CostOptions options;
  options.zero3_flat = false;  // ZeroEngine gathers whole blocks into two slots, as FSDP does
  TSR_RETURN_IF_ERROR(plan::validate_plan(model, cluster, workload, p, options));
  const plan::ShapeCosts costs = plan::compute_shape_costs(
      model, cluster, workload, plan::ShapeKey{p.tp, p.cp, p.ep, p.mbs, p.sp, p.recompute},
      options);
  const plan::StageModel stages(model, cluster, workload, p, costs,
                                plan::step_flops(model, workload), options);
  plan::MemoryBreakdown m;
  stages.stage_memory(stage, first, end, &m);
  return m;
}

double MemoryComparison::difference() const {
  return predicted_total > 0 ? (measured_peak - predicted_total) / predicted_total : 0;
}

MemoryComparison compare_memory(const GptTrainer::Memory& a, uint64_t measured_peak,
                                uint64_t setup_peak, const plan::MemoryBreakdown& p) {
  MemoryComparison c;
  c.weights = {"weights (working copy)", double(a.params.work), p.weights};
  c.gradients = {"gradients", double(a.params.grad), p.gradients};
  c.optimizer = {"optimizer (master, m, v)",
                 double(a.params.master + a.params.m + a.params.v + a.optimizer), p.optimizer};
  c.activations = {"activations", double(a.activations), p.activations + p.transient};
  // The planner's stage memory has no term for the point-to-point buffers.
  c.pipeline = {"pipeline (p2p, kept inputs)", double(a.pipeline), 0};
  c.other = {"other (losses, bf16 wire)", double(a.trainer), 0};
  c.accounted_total = double(a.total());
  c.measured_peak = double(measured_peak);
  c.setup_peak = double(setup_peak);
  c.predicted_total = p.total();
  return c;
}

std::string memory_report_text(const MemoryComparison& c, int rank) {
  std::string out;
  char line[240];
  std::snprintf(line, sizeof line,
                "rank %d peak measured %.3f MB, planner predicts %.3f MB (%+.1f%%); trainer "
                "accounts %.3f MB, set-up peak %.3f MB\n",
                rank, c.measured_peak / 1e6, c.predicted_total / 1e6, 100 * c.difference(),
                c.accounted_total / 1e6, c.setup_peak / 1e6);
  out += line;
  for (const MemoryRole* r :
       {&c.weights, &c.gradients, &c.optimizer, &c.activations, &c.pipeline, &c.other}) {
    std::snprintf(line, sizeof line, "  %-28s trainer %9.3f MB, planner %9.3f MB\n", r->name,
                  r->accounted / 1e6, r->predicted / 1e6);
    out += line;
  }
  return out;
}

}  // namespace tessera::gpt
