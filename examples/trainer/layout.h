// A parallel plan as the trainer executes it, and what one rank holds under it.
//
// Ranks follow the planner's layout (runtime/planner groups.h, cp = 1): tp innermost, then dp,
// pp outermost. TP is Megatron's: W1/b1 column-parallel (the ffn features split), W2
// row-parallel (its input features split, an allreduce after it), b2 and the head replicated on
// every TP rank. PP: stage s owns a contiguous run of blocks; the last stage also owns the head.
// Thread-safe (values).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model.h"
#include "tessera/common/status.h"
#include "tessera/plan/plan.h"
#include "tessera/plan/search.h"

namespace tessera::trainer {

struct TrainPlan {
  int tp = 1, pp = 1, dp = 1;
  // The MLP trainer: 0 or 1 (ZeRO-1: Adam state sharded over DP through the overlap engine);
  // the GPT trainer: 0..3 (examples/trainer/gpt/zero.h).
  int zero = 0;
  int64_t mbs = 0;  // micro-batch size; 0: the whole per-DP-rank batch in one micro-batch
  std::vector<int> stage_blocks;  // blocks per stage; empty: as even as possible, earlier larger
  // GPT trainer only (the MLP trainer refuses them by name): virtual pipeline stages per rank
  // (Megatron's interleaved 1F1B) and sequence parallelism over tp.
  int vp = 1;
  bool sp = false;
  int world() const { return tp * pp * dp; }
};

// What a plan read from a flag or a file may hold: each of tp, pp, dp in 1..kMaxPlanDegree with
// tp*pp*dp <= kMaxPlanRanks (so world() cannot overflow), zero 0..3, mbs >= 0, stage entries in
// 1..kMaxPlanDegree. Larger values are refused by name, never truncated into an int.
inline constexpr int64_t kMaxPlanDegree = int64_t{1} << 20;
inline constexpr int64_t kMaxPlanRanks = int64_t{1} << 24;

// "tp=2 pp=2 dp=1 zero=0 mbs=4 stages=2,2" (then " vp=2", " sp=1" where set)
std::string plan_text(const TrainPlan& plan);
// "tp=2,pp=2,dp=1,zero=1,mbs=4,stages=2+2,vp=2,sp=1" (any subset; others keep their defaults).
Result<TrainPlan> parse_plan(std::string_view text);
// The first plan of `tessera plan --json` output, or a bare plan object with the same keys
// (tp, pp, dp, zero, mbs, stage_layers). `source` names the file in errors.
Result<TrainPlan> plan_from_json(std::string_view json_text, std::string_view source);
// A planner plan to what the trainers run: cp and ep must be 1 (refused naming them); tp, pp,
// dp, vp, sp, zero, mbs and the stage split are taken as they are (the MLP trainer then refuses
// vp > 1, sp and zero > 1 by name: validate_plan).
Result<TrainPlan> plan_from_planner(const plan::Plan& p);
plan::Plan to_planner_plan(const TrainPlan& plan, int64_t global_batch);

// What the planner may choose for these trainers (the demo's plans, the re-plan after a node
// loss): cp = ep = vp = 1 without sequence parallelism or recomputation, and ZeRO-0, which the
// in-memory move of a plan switch needs. `top` plans.
plan::SearchConstraints trainer_search_constraints(int top);
// The trainer's micro-batching for plan `p` at `batch`: the whole per-dp-rank batch without a
// pipeline (few GEMM calls on a busy host); with one, two micro-batches per stage where they
// divide, so 1F1B has something to overlap. Stage sizes that do not sum to `blocks` are dropped,
// and all of them where `even_stages` (the GPT trainer splits evenly and takes no stages=).
void fit_trainer_microbatches(TrainPlan* p, int64_t batch, int64_t blocks, bool even_stages);

// Checks the plan against the model, the batch and the world size; errors name the field.
Status validate_plan(const TrainPlan& plan, const ModelSpec& spec, int64_t global_batch, int world);

// One rank's place in the plan.
struct Layout {
  TrainPlan plan;
  int rank = 0;
  int tp_index = 0, dp_index = 0, pp_index = 0;
  std::vector<int> stage_first;  // first block of each stage (size pp + 1, last = blocks)
  int64_t local_batch = 0;       // samples per DP rank per step
  int64_t mbs = 0;               // samples per micro-batch
  int64_t microbatches = 0;
  int first_block() const { return stage_first[size_t(pp_index)]; }
  int end_block() const { return stage_first[size_t(pp_index) + 1]; }
  bool first_stage() const { return pp_index == 0; }
  bool last_stage() const { return pp_index == plan.pp - 1; }
  int stage_of_block(int block) const;  // -1 (the head): the last stage
  // The rank holding (tp, dp, pp) coordinates.
  int rank_of(int tp, int dp, int pp) const { return tp + plan.tp * (dp + plan.dp * pp); }
};

Result<Layout> make_layout(const TrainPlan& plan, const ModelSpec& spec, int64_t global_batch,
                           int rank);

// What part of a global parameter a rank holds: [offset, offset + len) along each dimension of
// the global row-major shape.
struct LocalParam {
  ParamInfo info;
  std::vector<int64_t> offset, len;
  bool tp_sharded = false;  // false: the same on every TP rank
  int64_t elements() const;
};
// The parameters of this rank's stage, in global order.
std::vector<LocalParam> local_params(const Layout& layout, const ModelSpec& spec);
// The slice of `info` that TP rank `tp_index` of `tp` holds.
LocalParam param_slice(const ParamInfo& info, int tp, int tp_index);

}  // namespace tessera::trainer
