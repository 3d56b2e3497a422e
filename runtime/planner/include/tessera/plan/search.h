// The exact plan search: enumerates every valid combination of tp, cp, pp, dp, ep, vp, mbs, sp,
// recomputation and ZeRO stage (fixed values are respected), prunes candidates whose memory lower
// bound exceeds the budget, partitions layers over stages with the exact DP (partition.h) and
// ranks the fitting plans by predicted step time. Deterministic: same inputs, same order; ties go
// to the earlier candidate in enumeration order (smaller tp, cp, pp, ...). Single-threaded;
// thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ir/model.h"
#include "tessera/plan/cost_model.h"

namespace tessera::plan {

// Values the user fixed (`--fix tp=8,zero=1`); nullopt: searched.
struct SearchConstraints {
  std::optional<int> tp, pp, dp, cp, ep, vp, mbs, zero;
  std::optional<Recompute> recompute;
  std::optional<bool> sp;
  int max_cp = 16;    // context-parallel sizes searched: every divisor up to this
  int max_vp = 16;    // virtual stages searched up to this
  int top = 5;        // plans returned
  bool prune = true;  // memory lower-bound pruning (tests turn it off to brute-force)
};

// Parses "tp=8,pp=4,zero=1,recompute=full,sp=1" into `out`; errors name the key or value.
Status parse_fixes(std::string_view text, SearchConstraints* out);

struct SearchResult {
  std::vector<Estimate> plans;  // fitting plans, fastest first, at most `top`
  int64_t candidates = 0;       // valid combinations considered (pruned ones included)
  int64_t evaluated = 0;        // candidates priced in full (not pruned by the bound)
  int64_t feasible = 0;         // candidates that fit in memory
  double elapsed_ms = 0;
  // When nothing fits: the candidate needing the least memory (under its least-memory
  // partition), for the error message.
  std::optional<Estimate> smallest;
};

// The most work one search may do, in units of about a nanosecond on one core: each candidate
// costs its pipeline stages, plus blocks^2 when the blocks differ (the exact partition DP), so
// any accepted input plans in well under a second. Above it the search is refused up front.
inline constexpr double kMaxSearchWork = 1e9;

// Errors: INVALID_ARGUMENT for a workload or cluster outside the limits (plan.h, cluster.h) and
// when the fixed values admit no valid plan (the message names the first rule broken);
// RESOURCE_EXHAUSTED when the search would exceed kMaxSearchWork (the message says what to fix)
// and when plans exist but none fits (the message gives the smallest requirement, the budget and
// that plan).
Result<SearchResult> search_plans(const ir::Model& model, const ClusterSpec& cluster,
                                  const Workload& workload, const SearchConstraints& constraints,
                                  const CostOptions& options);

}  // namespace tessera::plan
