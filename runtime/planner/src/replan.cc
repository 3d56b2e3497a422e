// Re-planning across phases (see replan.h).
#include "tessera/plan/replan.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/common/untrusted.h"

namespace tessera::plan {
namespace {

using Json = nlohmann::ordered_json;
constexpr double kGiB = 1073741824.0;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Result<std::vector<Phase>> parse_phases(std::string_view text, std::string_view source_view,
                                        Dtype dtype, double* out_overhead) {
  const std::string source(source_view);
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(source + ": not valid JSON");
  if (!j.is_object() || !j.contains("phases") || !j["phases"].is_array() || j["phases"].empty()) {
    return invalid_argument(source + ": field 'phases' missing (a non-empty list)");
  }
  *out_overhead = 0;
  if (j.contains("switch_overhead_s")) {
    if (!j["switch_overhead_s"].is_number() || j["switch_overhead_s"].get<double>() < 0) {
      return invalid_argument(source + ": field 'switch_overhead_s' must be a number >= 0");
    }
    *out_overhead = j["switch_overhead_s"].get<double>();
  }
  std::vector<Phase> phases;
  for (size_t i = 0; i < j["phases"].size(); ++i) {
    const Json& p = j["phases"][i];
    const std::string where = source + ": phases[" + std::to_string(i) + "]";
    auto integer = [&](const char* key, bool required) -> Result<int64_t> {
      if (!p.is_object() || !p.contains(key)) {
        if (!required) return int64_t{0};
        return invalid_argument(where + ": field '" + key + "' missing");
      }
      if (!p[key].is_number_integer() || p[key].get<int64_t>() < 1) {
        return invalid_argument(where + ": field '" + key + "' must be a positive integer");
      }
      return p[key].get<int64_t>();
    };
    Phase phase;
    phase.name = "phase " + std::to_string(i);
    if (p.is_object() && p.contains("name")) {
      // json::value would throw type_error for a name of another type.
      if (!p["name"].is_string())
        return invalid_argument(where + ": field 'name' must be a string");
      phase.name = p["name"].get<std::string>();
    }
    TSR_ASSIGN_OR_RETURN(phase.steps, integer("steps", true));
    TSR_ASSIGN_OR_RETURN(phase.workload.global_batch, integer("global_batch", true));
    TSR_ASSIGN_OR_RETURN(phase.workload.seq_len, integer("seq_len", true));
    TSR_ASSIGN_OR_RETURN(phase.devices, integer("devices", false));
    phase.workload.dtype = dtype;
    phases.push_back(phase);
  }
  return phases;
}

double reshard_bytes_per_device(const Estimate& from, const Estimate& to) {
  const Plan& a = from.plan;
  const Plan& b = to.plan;
  const bool same_split = a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.ep == b.ep &&
                          a.vp == b.vp && a.stage_blocks == b.stage_blocks;
  // The checkpointer's state: weights and optimizer (gradients are rebuilt every step).
  const double state = to.memory.weights + to.memory.optimizer;
  if (!same_split) return state;
  if (a.dp == b.dp && (a.zero >= 1) == (b.zero >= 1) && (a.zero >= 3) == (b.zero >= 3)) return 0;
  return to.memory.optimizer + (a.zero >= 3 || b.zero >= 3 ? to.memory.weights : 0);
}

Result<PhaseReport> replan(const ir::Model& model, const ClusterSpec& base,
                           const std::vector<Phase>& phases, double overhead,
                           const SearchConstraints& constraints, const CostOptions& options) {
  PhaseReport report;
  report.switch_overhead_s = overhead;
  const Estimate* previous = nullptr;
  for (const Phase& phase : phases) {
    ClusterSpec cluster = base;
    if (phase.devices > 0) {
      auto resized = with_devices(base, phase.devices);
      if (!resized.ok()) return resized.status().with_context("phase '" + phase.name + "'");
      cluster = *resized;
    }
    auto found = search_plans(model, cluster, phase.workload, constraints, options);
    if (!found.ok()) return found.status().with_context("phase '" + phase.name + "'");
    PhasePlan pp;
    pp.phase = phase;
    pp.best = found->plans.front();
    const double steps = static_cast<double>(phase.steps);
    if (previous == nullptr) {
      pp.switched = true;
      pp.phase_s = steps * pp.best.step_time_s;
    } else {
      Plan old = previous->plan;
      old.num_microbatches = phase.workload.global_batch / std::max<int64_t>(1, old.dp * old.mbs);
      auto keep = evaluate(model, cluster, phase.workload, old, options);
      if (!keep.ok()) {
        pp.keep_reason = keep.status().message();
      } else if (!keep->fits) {
        pp.keep_reason = "needs " + fixed(keep->memory.total() / kGiB, 1) + " GiB";
      } else {
        pp.keep = *keep;
      }
      pp.reshard_bytes = reshard_bytes_per_device(*previous, pp.best);
      // Each device fetches its share over its part of the host's NICs.
      const double per_device = cluster.hosts > 1 ? cluster.inter_host.busbw_gbps * 1e9 *
                                                        cluster.inter_host.nics_per_host /
                                                        cluster.devices_per_host
                                                  : cluster.intra_host.busbw_gbps * 1e9;
      pp.switch_s = (pp.reshard_bytes > 0 ? overhead : 0) + pp.reshard_bytes / per_device;
      const double stay = pp.keep ? steps * pp.keep->step_time_s : 0;
      const double move = steps * pp.best.step_time_s + pp.switch_s;
      pp.switched = !pp.keep || move < stay;
      pp.phase_s = pp.switched ? move : stay;
    }
    report.total_s += pp.phase_s;
    report.phases.push_back(std::move(pp));
    const PhasePlan& last = report.phases.back();
    previous = last.switched ? &last.best : &*last.keep;
  }
  return report;
}

Result<PhaseReport> replan_phases_file(const ir::Model& model, const ClusterSpec& cluster,
                                       Dtype dtype, const std::string& path,
                                       const SearchConstraints& constraints,
                                       const CostOptions& options) {
  TSR_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxConfigFileBytes));
  double overhead = 0;
  TSR_ASSIGN_OR_RETURN(std::vector<Phase> phases, parse_phases(text, path, dtype, &overhead));
  return replan(model, cluster, phases, overhead, constraints, options);
}

std::string phases_text(const PhaseReport& r) {
  std::ostringstream out;
  for (size_t i = 0; i < r.phases.size(); ++i) {
    const PhasePlan& p = r.phases[i];
    out << "phase " << i + 1 << " '" << p.phase.name << "': " << p.phase.steps << " steps of "
        << p.phase.workload.global_batch << " x " << p.phase.workload.seq_len << " tokens\n"
        << "  best    " << plan_summary(p.best.plan) << ": " << fixed(p.best.step_time_s, 3)
        << " s/step, MFU " << fixed(100 * p.best.mfu, 1) << "%\n";
    if (i > 0) {
      if (p.keep) {
        out << "  keep    " << plan_summary(p.keep->plan) << ": " << fixed(p.keep->step_time_s, 3)
            << " s/step\n";
      } else {
        out << "  keep    impossible: " << p.keep_reason << "\n";
      }
      out << "  switch  " << fixed(p.reshard_bytes / kGiB, 2) << " GiB per device to reshard, "
          << fixed(p.switch_s, 1) << " s -> "
          << (p.switched ? (p.keep ? "switch (pays off)" : "switch (required)")
                         : "keep (switching does not pay)")
          << "\n";
    }
    out << "  phase   " << fixed(p.phase_s / 3600, 2) << " h\n";
  }
  out << "total " << fixed(r.total_s / 3600, 2) << " h\n";
  return out.str();
}

std::string phases_json(const PhaseReport& r) {
  Json phases = Json::array();
  for (const PhasePlan& p : r.phases) {
    Json j = {{"name", p.phase.name},
              {"steps", p.phase.steps},
              {"best", plan_summary(p.best.plan)},
              {"best_step_time_s", p.best.step_time_s},
              {"reshard_gib_per_device", p.reshard_bytes / kGiB},
              {"switch_s", p.switch_s},
              {"switched", p.switched},
              {"phase_s", p.phase_s}};
    if (p.keep) j["keep_step_time_s"] = p.keep->step_time_s;
    if (!p.keep_reason.empty()) j["keep_impossible"] = p.keep_reason;
    phases.push_back(j);
  }
  return Json{{"phases", phases}, {"total_s", r.total_s}}.dump(2) + "\n";
}

}  // namespace tessera::plan
