// Probing the machine and planning the demo model: a quick GEMM calibration of the first host
// device, the planner's search for phase 1, and replan() for phase 2 (a doubled batch).
#include <algorithm>
#include <thread>
#include <vector>

#include "../calibrate.h"
#include "demo.h"
#include "tessera/hal/hal.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/replan.h"
#include "tessera/plan/search.h"

namespace tessera::tools::demo {
namespace {

std::string why(const plan::Estimate& e) {
  const plan::TimeBreakdown& t = e.time;
  return "predicted step " + fixed(1e3 * e.step_time_s, 2) + " ms = compute " +
         fixed(1e3 * t.compute_s, 2) + " + bubble " + fixed(1e3 * t.bubble_s, 2) + " + TP " +
         fixed(1e3 * t.tp_comm_s, 2) + " + PP " + fixed(1e3 * t.pp_comm_s, 2) + " + DP " +
         fixed(1e3 * t.dp_comm_s, 2) + " + optimizer " + fixed(1e3 * t.optimizer_s, 2) +
         " ms (exposed communication)";
}

}  // namespace

std::string plan_flag(const trainer::TrainPlan& p) {
  std::string s = "tp=" + std::to_string(p.tp) + ",pp=" + std::to_string(p.pp) +
                  ",dp=" + std::to_string(p.dp) + ",zero=" + std::to_string(p.zero) +
                  ",mbs=" + std::to_string(p.mbs);
  if (!p.stage_blocks.empty()) {
    s += ",stages=";
    for (size_t i = 0; i < p.stage_blocks.size(); ++i) {
      s += (i ? "+" : "") + std::to_string(p.stage_blocks[i]);
    }
  }
  return s;
}

Result<Probe> probe_machine(const std::string& backend) {
  TSR_ASSIGN_OR_RETURN(auto platform, hal::Platform::create());
  auto devices = platform->devices(backend);
  if (devices.empty()) {
    return not_found("probe: no " + backend + " device (is the " + backend + " backend built?)");
  }
  Probe p;
  p.backend = backend;
  p.device = devices[0].id() + " (" + devices[0].properties().name + ")";
  p.host_devices = int(devices.size());
  p.cores = std::max(1u, std::thread::hardware_concurrency());
  TSR_ASSIGN_OR_RETURN(hal::Stream stream, devices[0].create_stream());
  TSR_ASSIGN_OR_RETURN(const double tflops, gemm_tflops(devices[0], stream, 256));
  p.gemm_gflops = 1e3 * tflops;
  return p;
}

Result<DemoPlan> plan_demo(const DemoOptions& o, const DemoModel& demo_model, const Probe& probe) {
  const int devices = o.devices > 0 ? o.devices : o.ranks;
  // The host as the planner sees it: `devices` devices of the measured GEMM rate (all ranks
  // share the cores, so each gets its share), shared memory between them.
  plan::Calibration c;
  c.backend = probe.backend;
  c.device = probe.device;
  c.devices = devices;
  c.memory_gib = 4;
  const double share = double(std::min<unsigned>(probe.cores, unsigned(devices))) / devices;
  c.gemm = {{128, probe.gemm_gflops * share * 0.6e-3}, {256, probe.gemm_gflops * share * 1e-3}};
  c.d2d_copy_gbps = 2;
  TSR_RETURN_IF_ERROR(plan::fit_gemm_curve(&c));
  plan::ClusterSpec cluster = plan::cluster_from_calibration(c);
  plan::CostOptions options;
  options.zero3_flat = false;  // the trainer's ZeroEngine gathers whole blocks, as FSDP does
  plan::apply_calibration(c, &cluster, &options);
  const ir::Model& model = demo_model.ir;
  DemoPlan out;
  out.switch_step = std::max<int64_t>(2, (2 * o.steps) / 3);
  out.second_batch = 2 * o.global_batch;
  // Phase 1 and phase 2 (a doubled batch, as a "larger batch" phase) through replan().
  std::vector<plan::Phase> phases(2);
  phases[0].name = "phase 1";
  phases[0].steps = out.switch_step;
  phases[0].workload = {o.global_batch, demo_model.seq, plan::Dtype::kBf16};
  phases[1].name = "phase 2 (batch x2)";
  phases[1].steps = o.steps - out.switch_step;
  phases[1].workload = {out.second_batch, demo_model.seq, plan::Dtype::kBf16};
  auto report =
      plan::replan(model, cluster, phases, 0.0, trainer::trainer_search_constraints(5), options);
  if (!report.ok()) return report.status().with_context("planning the demo model");
  const plan::PhasePlan& p1 = report->phases[0];
  const plan::PhasePlan& p2 = report->phases[1];
  out.first_estimate = p1.best;
  auto first = trainer::plan_from_planner(p1.best.plan);
  if (!first.ok()) return first.status();
  out.first = *first;
  out.why_first = "planner's best of " + std::to_string(devices) +
                  " devices: " + plan::plan_summary(p1.best.plan) + "; " + why(p1.best);
  plan::Estimate second = p2.switched ? p2.best : *p2.keep;
  out.why_second =
      p2.switched ? "replan() switches: saves more than the move costs; " + why(p2.best) : "";
  const bool same_layout = second.plan.tp == p1.best.plan.tp && second.plan.pp == p1.best.plan.pp &&
                           second.plan.dp == p1.best.plan.dp;
  if (!p2.switched || same_layout) {
    // The planner keeps the layout for this model: the demo still switches once, to the best
    // plan with tensor parallelism, to show the in-memory move (and says so).
    plan::SearchConstraints fixed_tp = trainer::trainer_search_constraints(5);
    fixed_tp.tp = devices % 2 == 0 && demo_model.tp2_ok ? 2 : 1;
    if (*fixed_tp.tp == p1.best.plan.tp) fixed_tp.tp = 1;
    auto forced = plan::search_plans(model, cluster, phases[1].workload, fixed_tp, options);
    if (!forced.ok()) return forced.status().with_context("planning phase 2");
    second = forced->plans.front();
    out.why_second = "replan() would keep " + plan::plan_summary(p1.best.plan) +
                     " (the switch does not pay off for so small a model); the demo switches "
                     "anyway, to the best plan with tp=" +
                     std::to_string(second.plan.tp) + ", to show the in-memory move; " +
                     why(second);
  }
  out.second_estimate = second;
  auto s = trainer::plan_from_planner(second.plan);
  if (!s.ok()) return s.status();
  out.second = *s;
  return out;
}

}  // namespace tessera::tools::demo
