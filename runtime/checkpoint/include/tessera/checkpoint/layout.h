// Parallel layouts and the rule that gives each rank its slice of a tensor under one: what offline
// resharding (`tessera ckpt reshard SRC --to PLAN.json --out DST`) writes, and what a trainer can
// use to register its slices. Thread-safe (pure functions).
//
// Rank order (tp innermost, then cp, then dp, pp outermost; the planner's, plan/groups.h):
//   rank = tp_index + tp * (cp_index + cp * (dp_index + dp * pp_index)),  ep_index = dp_index % ep
// (expert parallelism is carved out of dp: ep divides dp, consecutive dp indices form an ep group).
// A tensor's slice on a rank (Placement, state.h):
//   1. with pp > 1 and placement.layer >= 0, only the ranks of the stage holding that layer (the
//      plan's stage_layers, blocks per stage) hold the tensor; the others hold nothing. With
//      vp > 1 (interleaved schedule) each stage holds vp chunks of stage_layers[0] / vp layers,
//      chunk c on stage c % pp (Megatron-LM's order);
//   2. with tp_dim >= 0 the tensor is split evenly along tp_dim into tp parts, part tp_index;
//   3. with expert_dim >= 0 (an expert tensor) that part is split evenly along expert_dim into ep
//      parts, part ep_index;
//   4. with zero_dim >= 0 and the plan's zero >= zero_stage, that part is split evenly along
//      zero_dim over the ranks that reduce its gradients (ZeRO sharding): the dp x cp ranks of
//      its (tp, pp) position, part cp_index + cp * dp_index; for an expert tensor the
//      dp / ep x cp ranks holding the same experts, part cp_index + cp * (dp_index / ep);
//   5. otherwise the ranks hold identical copies (replicas: only the lowest rank writes them).
//      Context parallelism splits activations, not parameters: cp ranks hold replicas unless
//      ZeRO shards over them.
// A dim that does not split evenly is an error naming the tensor, the degree and the dim.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/checkpoint/state.h"
#include "tessera/common/status.h"

namespace tessera::ckpt {

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;
  int cp = 1;                     // context (sequence) parallel degree
  int ep = 1;                     // expert parallel degree (divides dp)
  int zero = 0;                   // ZeRO stage 0..3
  int vp = 1;                     // virtual pipeline chunks per stage (interleaved 1F1B)
  std::vector<int> stage_layers;  // blocks per pipeline stage (needed when pp > 1)
  // Valid once check_layout_bounds() passed (every parsed layout has): then it cannot overflow.
  int size() const { return tp * cp * dp * pp; }
  // "tp=2 pp=1 dp=2 zero=1" (cp, ep and vp when > 1; what the manifest records as `layout`)
  std::string text() const;
};

// Bounds that keep size() and slice arithmetic in range: each degree (tp, pp, dp, cp, ep, vp) in
// 1..kMaxLayoutDegree, tp*cp*dp*pp <= kMaxLayoutRanks, zero 0..3, stage_layers entries in
// 0..kMaxLayoutDegree. Errors name `where` and the field.
inline constexpr int64_t kMaxLayoutDegree = int64_t(1) << 20;
inline constexpr int64_t kMaxLayoutRanks = int64_t(1) << 24;
Status check_layout_bounds(const ParallelLayout& layout, std::string_view where);

// A layout file: a plan object {"tp","pp","dp","zero"[,"cp"][,"ep"][,"vp"][,"stage_layers"]} or
// the output of `tessera plan --json` ({"plans": [plan, ...]}; `plan_index` picks one, 0 = the
// best). Either may carry "tensors": {"name": {"tp_dim", "zero_dim", "zero_stage", "layer"}}
// placements (and "expert_dim"), returned in *placements when given. Errors name `where` and the
// missing or bad field (ep not dividing dp included).
Result<ParallelLayout> parse_layout_json(std::string_view text, std::string_view where,
                                         int plan_index = 0,
                                         std::map<std::string, Placement>* placements = nullptr);

// The slice of a tensor of `shape` that `rank` holds under `layout` (the rule above); nullopt
// when that rank's pipeline stage does not hold it. *replicated: other ranks hold the same slice.
Result<std::optional<Slice>> layout_slice(const std::string& name,
                                          const std::vector<int64_t>& shape,
                                          const std::optional<Placement>& placement,
                                          const ParallelLayout& layout, int rank,
                                          bool* replicated = nullptr);

}  // namespace tessera::ckpt
