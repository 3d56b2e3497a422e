// `tessera plan` as a library call: the command's flags as text, checked in the command's order
// with its messages, the model and cluster loaded, the search (or the phase re-planning) run.
// The CLI prints the result as text or JSON; the Python API (tessera.plan) returns the JSON
// document, so both give the same answer and the same errors for the same flags.
#pragma once

#include <optional>
#include <string>

#include "tessera/common/status.h"
#include "tessera/ir/model.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/cluster.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/replan.h"
#include "tessera/plan/search.h"

namespace tessera::plan {

// The flags, as given (an empty string is "not given"). Numbers stay text so that the error for a
// bad value quotes it the way the user wrote it.
struct PlanRequest {
  std::string model, cluster, devices, global_batch, seq_len, dtype = "bf16", fix, top = "5";
  std::string phases, attention = "flash";
  std::string zero3 = "flat";  // flat (DeepSpeed) or hierarchical (CostOptions::zero3_flat)
  std::string calibration;     // a calibration file (--calibration, or what --calibrate wrote)
};

struct PlanRun {
  ir::Model model;
  ClusterSpec cluster;
  Dtype dtype = Dtype::kBf16;
  CostOptions options;
  std::optional<PhaseReport> phases;  // --phases
  Workload workload;                  // otherwise: the search
  SearchResult result;
};

// INVALID_ARGUMENT (or the loaders' errors) with the message `tessera plan` prints after
// "tessera plan: ", e.g. "--model is required (a preset or a config.json / layer list)".
Result<PlanRun> run_plan_request(const PlanRequest& request);

// The document of `tessera plan --json` (with its trailing newline, as the command prints it).
std::string plan_run_json(const PlanRun& run);

}  // namespace tessera::plan
