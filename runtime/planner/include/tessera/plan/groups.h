// Plan to process groups: each rank's coordinates and the rank lists of every TP, CP, DP, PP and
// EP group, with TP innermost (consecutive ranks, so a TP group stays inside a host), then CP,
// then DP (EP groups are consecutive runs inside DP), PP outermost:
//   rank = tp_index + tp * (cp_index + cp * (dp_index + dp * pp_index)).
// The collectives layer creates its communicators from these lists. Thread-safe (values).
#pragma once

#include <vector>

#include "tessera/common/status.h"
#include "tessera/plan/plan.h"

namespace tessera::plan {

struct RankCoord {
  int rank = 0;
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0;          // index inside its EP group (dp % ep)
  int host = 0;        // rank / devices_per_host
  int local_rank = 0;  // rank % devices_per_host
};

struct ProcessGroups {
  int world_size = 0;
  std::vector<RankCoord> ranks;  // indexed by rank
  // Each entry is one group's ranks in ascending order; every rank is in exactly one group of
  // each kind. `expert_dp` groups the ranks that hold the same experts (their gradients reduce).
  std::vector<std::vector<int>> tp, cp, dp, pp, ep, expert_dp;
};

// Errors: INVALID_ARGUMENT when a size is < 1 or ep does not divide dp.
Result<ProcessGroups> plan_groups(const Plan& plan, int devices_per_host);

}  // namespace tessera::plan
