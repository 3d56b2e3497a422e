// Assembles per-block costs (ShapeCosts) into stage times, per-device memory and a step estimate
// for one plan. The search builds one per candidate; the partitioner queries stage_time and
// stage_memory for ranges of blocks in O(1) through prefix sums. Not thread-safe to share while
// being constructed; const methods are safe.
//
// Pipeline time (per step, m micro-batches, v chunks per device, T_i the per-micro-batch time of
// device i): m * max_i T_i + (sum_i T_i - max_i T_i) / v, which is (m + (p-1)/v) T for equal
// stages, hardware.md's bubble (p-1)/(v m).
#pragma once

#include <vector>

#include "tessera/ir/model.h"
#include "tessera/plan/cost_model.h"

namespace tessera::plan {

// FLOPs of one step for the whole global batch: the model's (3 x forward) and what each
// recomputation adds (full: the blocks' forward again; selective: the attention core again).
struct StepFlops {
  double model = 0, full_extra = 0, selective_extra = 0;
};
StepFlops step_flops(const ir::Model& model, const Workload& workload);

class StageModel {
 public:
  // `plan` must be valid (validate_plan); its stage_blocks is ignored here. Keeps a pointer to
  // `costs`, which must outlive the StageModel. O(1).
  StageModel(const ir::Model& model, const ClusterSpec& cluster, const Workload& workload,
             const Plan& plan, const ShapeCosts& costs, const StepFlops& flops,
             const CostOptions& options);

  int num_blocks() const { return static_cast<int>(costs_->blocks.size()); }
  int stages() const { return plan_.pp; }
  double budget_bytes() const { return budget_; }
  // Per-micro-batch seconds on the device of pipeline stage `stage` holding blocks [first, end).
  double stage_time(int stage, int first, int end) const;
  // Peak bytes on that device; fills `out` when given.
  double stage_memory(int stage, int first, int end, MemoryBreakdown* out = nullptr) const;
  // The full prediction for blocks per stage (size pp, summing to num_blocks). With vp > 1 the
  // counts must be equal and each device holds vp chunks spread over the model.
  Estimate estimate(const std::vector<int>& stage_blocks) const;
  // The pipeline part of estimate(stage_blocks).step_time_s (fill, steady state and drain), a
  // lower bound of it: what follows the pipeline (DP, optimizer, ...) only adds. O(pp x vp).
  double pipeline_seconds(const std::vector<int>& stage_blocks) const;

 private:
  double range(const std::vector<double>& prefix, int stage, int first, int end) const;
  double in_flight(int stage) const;

  Plan plan_;
  CostOptions options_;
  StepFlops flops_;
  const ShapeCosts* costs_;       // not owned; must outlive this
  double post_extra_params_ = 0;  // the tied embedding's copy on the last stage
  double embedding_sync_s_ = 0;   // its gradient all-reduce between first and last stage
  double norm_sync_s_ = 0;        // the gradient norm's all-reduce over every device
  double grad_bytes_ = 4;         // per gradient value in the DP reduction
  double bucket_params_ = 40e6;   // DP reduction bucket
  int64_t devices_ = 1;
  double peak_ = 0, membw_ = 0, budget_ = 0, tokens_per_step_ = 0;
  double p2p_s_ = 0;  // exposed pipeline transfers per micro-batch per device
  double dense_group_ = 1, expert_group_ = 1;  // ranks sharing a parameter (ZeRO shards over them)
  LinkPath dense_path_, expert_path_;
};

}  // namespace tessera::plan
