// Re-planning across phases: a longer sequence, a bigger batch, fewer devices. For each phase the
// search gives the best plan; keeping the previous layout is priced too, and switching is chosen
// only when the time it saves over the phase exceeds the cost of moving the state (the bytes the
// checkpointer would reshard: 2-byte weights + 12-byte fp32 Adam state per parameter, fetched at
// each device's share of the host NICs) plus a fixed restart overhead. Thread-safe (values).
//
// Phases file:
//   {"switch_overhead_s": 60,
//    "phases": [{"name": "2k", "steps": 100000, "global_batch": 1024, "seq_len": 2048},
//               {"name": "16k", "steps": 5000, "global_batch": 128, "seq_len": 16384},
//               {"name": "host lost", "steps": 2000, "global_batch": 128, "seq_len": 16384,
//                "devices": 56}]}
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/ir/model.h"
#include "tessera/plan/search.h"

namespace tessera::plan {

struct Phase {
  std::string name;
  int64_t steps = 0;
  Workload workload;
  int64_t devices = 0;  // 0: the cluster as given
};

struct PhasePlan {
  Phase phase;
  Estimate best;                 // the search's best plan for this phase
  std::optional<Estimate> keep;  // the previous phase's layout, when valid here and fitting
  std::string keep_reason;       // why keeping is impossible, when it is
  double reshard_bytes = 0;      // per device, to switch from the previous layout to `best`
  double switch_s = 0;           // reshard time + overhead
  bool switched = false;         // the chosen plan is `best` (always true for the first phase)
  double phase_s = 0;            // steps x chosen step time (+ switch_s when switching)
};

struct PhaseReport {
  std::vector<PhasePlan> phases;
  double total_s = 0;
  double switch_overhead_s = 0;
};

Result<std::vector<Phase>> parse_phases(std::string_view json_text, std::string_view source,
                                        Dtype dtype, double* out_switch_overhead_s);

// Bytes each device must fetch to move from `from` to `to`: nothing when the layout (tp, pp, cp,
// ep, stage split) and the optimizer sharding are unchanged; only the optimizer shards when just
// dp or the ZeRO stage changes; the whole per-device state otherwise.
double reshard_bytes_per_device(const Estimate& from, const Estimate& to);

Result<PhaseReport> replan(const ir::Model& model, const ClusterSpec& cluster,
                           const std::vector<Phase>& phases, double switch_overhead_s,
                           const SearchConstraints& constraints, const CostOptions& options);
Result<PhaseReport> replan_phases_file(const ir::Model& model, const ClusterSpec& cluster,
                                       Dtype dtype, const std::string& path,
                                       const SearchConstraints& constraints,
                                       const CostOptions& options);

std::string phases_text(const PhaseReport& report);
std::string phases_json(const PhaseReport& report);

}  // namespace tessera::plan
