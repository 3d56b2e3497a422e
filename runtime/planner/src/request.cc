#include "tessera/plan/request.h"

#include <utility>

#include "tessera/common/env.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/report_json.h"

namespace tessera::plan {
namespace {

// An integer flag in 1..max (the planner's limits, plan.h / cluster.h).
Result<int64_t> positive(const std::string& flag, const std::string& text, int64_t max) {
  auto v = env::parse_int(text);
  if (!v.ok() || *v < 1 || *v > max) {
    return invalid_argument(flag + " must be an integer in 1.." + std::to_string(max) + ", got '" +
                            text + "'");
  }
  return *v;
}

// The flags that need no file, in the command's order (after --model and the calibration).
Status check_required(const PlanRequest& r, bool calibrated) {
  if (r.cluster.empty() && !calibrated) {
    return invalid_argument(
        "--cluster is required (a preset or a cluster JSON), or --calibration FILE");
  }
  if (r.phases.empty() && r.global_batch.empty()) {
    return invalid_argument("--global-batch is required");
  }
  if (r.phases.empty() && r.seq_len.empty()) return invalid_argument("--seq-len is required");
  if (r.dtype != "bf16" && r.dtype != "fp16") {
    return invalid_argument("--dtype must be bf16 or fp16, got '" + r.dtype + "'");
  }
  return Status();
}

}  // namespace

Result<PlanRun> run_plan_request(const PlanRequest& r) {
  if (r.model.empty()) {
    return invalid_argument("--model is required (a preset or a config.json / layer list)");
  }
  std::optional<Calibration> calibration;
  if (!r.calibration.empty()) {
    TSR_ASSIGN_OR_RETURN(calibration, load_calibration(r.calibration));
  }
  TSR_RETURN_IF_ERROR(check_required(r, calibration.has_value()));
  PlanRun run;
  TSR_ASSIGN_OR_RETURN(run.model, ir::load_model(r.model));
  if (r.cluster.empty()) {
    run.cluster = cluster_from_calibration(*calibration);
  } else {
    TSR_ASSIGN_OR_RETURN(run.cluster, load_cluster(r.cluster, calibration.has_value()));
  }
  if (!r.devices.empty()) {
    TSR_ASSIGN_OR_RETURN(const int64_t devices, positive("--devices", r.devices, kMaxDevices));
    TSR_ASSIGN_OR_RETURN(run.cluster, with_devices(run.cluster, devices));
  }
  SearchConstraints constraints;
  TSR_RETURN_IF_ERROR(parse_fixes(r.fix, &constraints));
  TSR_ASSIGN_OR_RETURN(const int64_t top, positive("--top", r.top, 1 << 20));
  constraints.top = static_cast<int>(top);
  if (r.attention != "flash" && r.attention != "materialized") {
    return invalid_argument("--attention must be flash or materialized, got '" + r.attention + "'");
  }
  run.options.flash_attention = r.attention == "flash";
  if (r.zero3 != "flat" && r.zero3 != "hierarchical") {
    return invalid_argument("--zero3 must be flat or hierarchical, got '" + r.zero3 + "'");
  }
  run.options.zero3_flat = r.zero3 == "flat";
  if (calibration) apply_calibration(*calibration, &run.cluster, &run.options);
  run.dtype = r.dtype == "fp16" ? Dtype::kFp16 : Dtype::kBf16;
  if (calibration && calibration->dtype != (run.dtype == Dtype::kFp16 ? "fp16" : "bf16")) {
    // Priced anyway (the file's rate is the best figure there is), but never silently.
    run.model.notes.push_back("the calibration measured " + calibration->dtype +
                              " GEMMs; this plan's " + r.dtype + " GEMMs are priced at that rate");
  }
  if (!r.phases.empty()) {
    TSR_ASSIGN_OR_RETURN(run.phases, replan_phases_file(run.model, run.cluster, run.dtype, r.phases,
                                                        constraints, run.options));
    return run;
  }
  TSR_ASSIGN_OR_RETURN(const int64_t batch,
                       positive("--global-batch", r.global_batch, kMaxGlobalBatch));
  TSR_ASSIGN_OR_RETURN(const int64_t seq_len, positive("--seq-len", r.seq_len, kMaxSeqLen));
  run.workload = Workload{batch, seq_len, run.dtype};
  TSR_ASSIGN_OR_RETURN(
      run.result, search_plans(run.model, run.cluster, run.workload, constraints, run.options));
  return run;
}

std::string plan_run_json(const PlanRun& run) {
  if (run.phases) return phases_json(*run.phases);
  return search_report_json(run.model, run.cluster, run.workload, run.result) + "\n";
}

}  // namespace tessera::plan
