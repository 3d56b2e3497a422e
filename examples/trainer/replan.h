// Re-planning for another device count (issue 18: a node was lost and the survivors re-formed on
// fewer ranks). The planner's best plan for `world` devices, within what the trainers run and what
// the in-memory move needs: cp = ep = vp = 1, no sequence parallelism, ZeRO-0, no recomputation;
// the GPT decoder's even stages (no stages=). The planner prices a host whose figures are nominal
// (the survivors do not stop to calibrate): among plans for the same devices what matters is how
// they compare. A plan the trainer refuses (check_trainer_plan) falls back to pure data
// parallelism over the world, and that too refused is an error naming the plan and the batch.
#pragma once

#include <cstdint>
#include <string>

#include "trainer.h"

namespace tessera::trainer {

struct Replan {
  TrainPlan plan;
  std::string why;  // "planner: ..." or "fallback: ... (the planner's ... was refused: ...)"
};

Result<Replan> replan_for_world(const TrainOptions& options, int world);

}  // namespace tessera::trainer
