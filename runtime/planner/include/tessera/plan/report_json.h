// The JSON of a plan search, one shape for every caller: `tessera plan --json` prints it and the
// C API's tessera_plan() returns it (with one plan). docs/PLANNER.md describes the fields.
#pragma once

#include <string>

#include "tessera/ir/model.h"
#include "tessera/plan/search.h"

namespace tessera::plan {

// {"model": {...}, "cluster": {...}, "workload": {...},
//  "plans": [{tp, pp, dp, cp, ep, vp, mbs, num_microbatches, zero, recompute, sp, stage_layers,
//             summary, step_time_s, tokens_per_s, model_tflops_per_device,
//             hardware_tflops_per_device, mfu, memory_gib_per_device, breakdown{...},
//             memory_breakdown_gib{...}}, ...fastest first],
//  "search": {candidates, evaluated, feasible, elapsed_ms}}, indented by `indent` spaces.
std::string search_report_json(const ir::Model& model, const ClusterSpec& cluster,
                               const Workload& workload, const SearchResult& result,
                               int indent = 2);

}  // namespace tessera::plan
