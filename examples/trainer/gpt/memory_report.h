// The trainer's device memory beside the planner's prediction for the same plan (issue 16 §2
// "Memory"): the allocator's high-water mark (hal::Device::memory_stats), the trainer's own
// accounting per role (GptTrainer::memory) and the planner's per-rank breakdown for this rank's
// pipeline stage (plan::StageModel::stage_memory), role by role.
//
//   auto predicted = gpt::predict_memory(model, gpt::plan_shape(options, tp, dp, pp), stage);
//   (create + init; setup_peak = device.memory_stats().peak; device.reset_peak(); steps)
//   auto report = gpt::compare_memory(trainer->memory(), device.memory_stats().peak, setup_peak,
//                                     *predicted);
//   std::fputs(gpt::memory_report_text(report).c_str(), stdout);
//
// Roles: weights = the working copy (act dtype); gradients = the f32 gradient buffer; optimizer =
// fp32 master + AdamW moments (+ the norm scratch): the planner's 12 bytes per parameter also
// hold the master. Activations = the trainer's arena against the planner's activations + transient
// (recomputed block). Pipeline = the 1F1B schedule's kept inputs and received gradient (pp > 1),
// which the planner does not price (0). Thread-safe (pure functions of values).
#pragma once

#include <cstdint>
#include <string>

#include "tessera/ir/model.h"
#include "tessera/plan/plan.h"
#include "trainer.h"

namespace tessera::gpt {

// The plan a trainer runs, in the planner's terms.
struct PlanShape {
  int tp = 1, dp = 1, pp = 1;
  int ep = 1;  // carved from dp, as the planner assumes
  int zero = 0;
  Recompute recompute = Recompute::kNone;
  bool sp = false;  // sequence parallelism (the planner's Plan::sp)
  int vp = 1;       // virtual pipeline stages (the planner's Plan::vp)
  int64_t micro_batch = 1, seq = 1, micro_batches = 1;
  DType act = DType::kBF16;
};
PlanShape plan_shape(const TrainOptions& options, int tp, int dp, int pp, int ep = 1);

// The planner's per-rank bytes for pipeline stage `stage`, with the trainer's block split
// (stage_range) and the planner's default cost options on a dgx-h100 resized to tp*dp*pp devices
// (the memory model does not depend on the cluster). Errors: the planner's refusal of the plan
// (validate_plan's message), or `stage` outside 0..pp-1.
Result<plan::MemoryBreakdown> predict_memory(const ir::Model& model, const PlanShape& shape,
                                             int stage);

// One role: the trainer's accounted bytes and the planner's prediction.
struct MemoryRole {
  const char* name = "";
  double accounted = 0, predicted = 0;
};

struct MemoryComparison {
  MemoryRole weights, gradients, optimizer, activations, pipeline, other;
  double accounted_total = 0;  // GptTrainer::Memory::total()
  double measured_peak = 0;    // the allocator's high-water mark over the training steps
  double setup_peak = 0;       // ... while the trainer was created and initialised
  double predicted_total = 0;  // plan::MemoryBreakdown::total()
  // (measured_peak - predicted_total) / predicted_total; 0 when nothing is predicted.
  double difference() const;
};

// The planner models the steady state: compare it with the steps' peak; the set-up peak shows
// what creation holds on top (full-size state before ZeRO shards it).
MemoryComparison compare_memory(const GptTrainer::Memory& accounted, uint64_t measured_peak,
                                uint64_t setup_peak, const plan::MemoryBreakdown& predicted);

// "rank R peak measured X MB, planner predicts Y MB (+Z%); trainer accounts A MB, set-up peak
// S MB" and one line per role (MB = 1e6 bytes).
std::string memory_report_text(const MemoryComparison& c, int rank);

}  // namespace tessera::gpt
