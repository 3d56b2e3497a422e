// The validity rules of a plan: one table, read by the search (search.cc) to filter candidates
// as its loops fix each dimension, by search_plans to name the rule that the user's fixed values
// break, and by validate_plan (evaluate.cc) for a whole plan. Adding a rule is one table entry
// in rules.cc; every caller then applies it.
//
// A rule reads only the plan dimensions in its `needs` mask (plus the model, cluster, workload
// and options), so it can be judged on a partial plan as soon as those dimensions are known.
// Pure functions of values: thread-safe.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/ir/model.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/plan.h"

namespace tessera::plan::rules {

// Plan dimensions, in the order the search nests its loops (a rule becomes checkable at the
// loop of the last dimension it needs).
enum Dim : uint16_t {
  kTp = 1 << 0,
  kCp = 1 << 1,
  kPp = 1 << 2,
  kDp = 1 << 3,
  kEp = 1 << 4,
  kMbs = 1 << 5,
  kSp = 1 << 6,
  kRecompute = 1 << 7,
  kVp = 1 << 8,
  kZero = 1 << 9,
};
inline constexpr int kLevels = 10;
inline constexpr uint16_t kAll = (1u << kLevels) - 1;

// What every rule may read besides the plan. References: the caller keeps them alive.
struct Context {
  const ir::Model& model;
  const ClusterSpec& cluster;
  const Workload& workload;
  const CostOptions& options;
};

struct Rule {
  const char* name;  // kebab-case, e.g. "tp-divides-heads"
  uint16_t needs;    // Dim mask; 0: model/workload only
  bool (*holds)(const Context&, const Plan&);
  // The error when it does not hold, naming the values: "tp=3 does not divide
  // num_attention_heads 32".
  std::string (*message)(const Context&, const Plan&);
};

// Every rule, in reporting order (the first broken one is the error).
std::span<const Rule> table();

// INVALID_ARGUMENT with the message of the first rule broken among those whose dimensions are
// all in `known`, after checking that the known sizes are in range (>= 1, zero 0..3) so no rule
// divides by zero. OK when none is broken.
Status check(const Context& context, const Plan& plan, uint16_t known);

// The table split by the search loop at which each rule becomes checkable, for filtering
// without looking at the rules of other loops. Rules needing no dimension are left to check().
class ByLevel {
 public:
  ByLevel();
  // True when every rule of loop `dim` (one Dim bit) holds for `plan`, whose dimensions up to
  // that loop are set.
  bool holds(Dim dim, const Context& context, const Plan& plan) const {
    for (const Rule* r : levels_[level_of(dim)]) {
      if (!r->holds(context, plan)) return false;
    }
    return true;
  }

 private:
  static int level_of(uint16_t dim) { return std::bit_width(dim) - 1; }
  std::array<std::vector<const Rule*>, kLevels> levels_;
};

}  // namespace tessera::plan::rules
