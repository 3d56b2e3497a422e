// explain_best and explanation_text (explain.h).
#include "tessera/plan/explain.h"

#include <cstdio>
#include <sstream>
#include <utility>

namespace tessera::plan {
namespace {

constexpr double kGiB = 1073741824.0;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string gib(double bytes) {
  return fixed(bytes / kGiB, 1);
}

// The largest component of the step; the first one on ties.
std::pair<const char*, double> largest_part(const TimeBreakdown& t, int zero) {
  const std::pair<const char*, double> parts[] = {
      {"compute", t.compute_s},
      {"the pipeline bubble", t.bubble_s},
      {"TP communication", t.tp_comm_s},
      {"CP communication", t.cp_comm_s},
      {"EP all-to-alls", t.ep_comm_s},
      {"PP transfers", t.pp_comm_s},
      {zero >= 3 ? "ZeRO-3 gathers and reduce-scatters" : "DP gradient reduction", t.dp_comm_s},
      {"the optimizer", t.optimizer_s},
      {"memory-bound work", t.memory_bound_s},
      {"kernel launches", t.launch_s},
      {"gradient clipping", t.grad_clip_s},
      {"the tied embedding's sync", t.embedding_sync_s}};
  const auto* top = &parts[0];
  for (const auto& part : parts) {
    if (part.second > top->second) top = &part;
  }
  return *top;
}

// The variants of `b` worth showing: other recomputation and ZeRO choices, sp toggled, the
// micro-batch doubled and halved. Validity is left to evaluate (the rule table).
std::vector<std::pair<std::string, Plan>> single_changes(const Plan& b, const CostOptions& o) {
  std::vector<std::pair<std::string, Plan>> out;
  for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    // Under fused attention selective equals none: not a separate choice.
    const bool twin = o.flash_attention &&
                      (rc == Recompute::kSelective || b.recompute == Recompute::kSelective) &&
                      rc != Recompute::kFull && b.recompute != Recompute::kFull;
    if (rc == b.recompute || twin) continue;
    Plan p = b;
    p.recompute = rc;
    out.emplace_back("recompute=" + std::string(recompute_name(rc)), p);
  }
  for (int z = 0; z <= 3; ++z) {
    if (z == b.zero) continue;
    Plan p = b;
    p.zero = z;
    out.emplace_back("zero=" + std::to_string(z), p);
  }
  if (b.tp > 1) {
    Plan p = b;
    p.sp = !b.sp;
    out.emplace_back(std::string("sp=") + (p.sp ? "1" : "0"), p);
  }
  for (int mbs : {b.mbs * 2, b.mbs / 2}) {
    if (mbs < 1) continue;
    Plan p = b;
    p.mbs = mbs;
    out.emplace_back("mbs=" + std::to_string(mbs), p);
  }
  return out;
}

}  // namespace

Explanation explain_best(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
                         const std::vector<Estimate>& plans, const CostOptions& options) {
  Explanation x;
  x.best = plans.front();
  const auto [name, seconds] = largest_part(x.best.time, x.best.plan.zero);
  x.bound_by = name;
  x.bound_seconds = seconds;
  for (auto& [label, p] : single_changes(x.best.plan, options)) {
    p.stage_blocks.clear();  // re-partitioned for the new memory and time
    p.num_microbatches = w.global_batch / (static_cast<int64_t>(p.dp) * p.mbs);
    auto e = evaluate(model, cluster, w, p, options);
    if (!e.ok()) continue;  // breaks a rule: nothing to compare
    x.changes.push_back(
        {label, e->fits, e->step_time_s / x.best.step_time_s - 1, e->memory.total()});
  }
  if (plans.size() > 1) {
    x.runner_up = plans[1].plan;
    x.runner_up_slowdown = plans[1].step_time_s / x.best.step_time_s - 1;
  }
  return x;
}

std::string explanation_text(const Explanation& x) {
  const Estimate& best = x.best;
  const TimeBreakdown& t = best.time;
  const MemoryBreakdown& m = best.memory;
  auto pct = [&](double s) { return fixed(100 * s / best.step_time_s, 1) + "%"; };
  std::ostringstream out;
  out << "\nWhy plan 1 (" << plan_summary(best.plan) << "):\n";
  out << "  step " << fixed(best.step_time_s, 3) << " s = compute " << fixed(t.compute_s, 3) << " ("
      << pct(t.compute_s) << ") + memory-bound " << fixed(t.memory_bound_s, 3) << " ("
      << pct(t.memory_bound_s) << ") + launches " << fixed(t.launch_s, 3) << " + bubble "
      << fixed(t.bubble_s, 3) << " (" << pct(t.bubble_s) << ") + TP " << fixed(t.tp_comm_s, 3)
      << " + CP " << fixed(t.cp_comm_s, 3) << " + EP " << fixed(t.ep_comm_s, 3) << " + PP "
      << fixed(t.pp_comm_s, 3) << " + DP " << fixed(t.dp_comm_s, 3) << " + optimizer "
      << fixed(t.optimizer_s, 3) << " + gradient clipping " << fixed(t.grad_clip_s, 3)
      << " + tied embedding sync " << fixed(t.embedding_sync_s, 3)
      << " s (communication figures are the exposed part)\n";
  out << "  bound by " << x.bound_by << " (" << pct(x.bound_seconds)
      << " of the step); memory: stage " << best.binding_stage << " uses " << gib(m.total())
      << " of " << gib(best.memory_budget_bytes) << " GiB (weights " << gib(m.weights)
      << ", gradients " << gib(m.gradients) << ", optimizer " << gib(m.optimizer)
      << ", activations " << gib(m.activations) << ", transient " << gib(m.transient) << ")\n";
  out << "  layers per stage:";
  for (int b : best.plan.stage_blocks) out << " " << b;
  out << "\n  single changes:\n";
  for (const SingleChange& c : x.changes) {
    out << "    " << c.label << ": ";
    if (!c.fits) {
      out << "does not fit (needs " << gib(c.memory_bytes) << " GiB)\n";
    } else {
      out << fixed(100 * c.slowdown, 1) << "% slower, " << gib(c.memory_bytes) << " GiB\n";
    }
  }
  if (x.runner_up) {
    out << "  runner-up (" << plan_summary(*x.runner_up) << ") is "
        << fixed(100 * x.runner_up_slowdown, 2) << "% slower\n";
  }
  return out.str();
}

}  // namespace tessera::plan
