// Why the best plan of a search wins (`tessera plan --explain`): where its step time goes, what
// binds it, its memory, and what each single change would cost, re-evaluated with the same model
// so the reasons are the model's own. Pure functions of values: thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/ir/model.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/plan.h"

namespace tessera::plan {

// The best plan changed in one value (recompute, zero, sp, mbs) and priced again.
struct SingleChange {
  std::string label;        // "zero=3", "recompute=full", "mbs=2", ...
  bool fits = false;        // within the memory budget
  double slowdown = 0;      // step time / the best's - 1 (0.05: 5 % slower); meaningful if fits
  double memory_bytes = 0;  // per device, of its binding stage
};

struct Explanation {
  Estimate best;
  std::string bound_by;      // the largest time component: "compute", "the pipeline bubble", ...
  double bound_seconds = 0;  // that component's seconds of the step
  std::vector<SingleChange> changes;  // valid single changes only, in a fixed order
  std::optional<Plan> runner_up;      // the second plan, when the search kept more than one
  double runner_up_slowdown = 0;      // its step time / the best's - 1
};

// `plans`: search_plans' fitting plans, fastest first (at least one). Changes that break a
// validity rule are left out: there is nothing to compare.
Explanation explain_best(const ir::Model& model, const ClusterSpec& cluster,
                         const Workload& workload, const std::vector<Estimate>& plans,
                         const CostOptions& options);

// The explanation as the lines `tessera plan --explain` prints, starting with a blank line and
// "Why plan 1 (tp=.. pp=..):".
std::string explanation_text(const Explanation& explanation);

}  // namespace tessera::plan
