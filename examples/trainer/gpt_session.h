// The GPT/MoE decoder (examples/trainer/gpt) as a SessionTrainer, so that tessera-train (and
// `tessera demo`) run it under the same Session as the MLP: snapshots through the checkpointer
// (gpt/checkpoint.h), elastic recovery from the buddy's memory, the plan switch in memory, the
// gathered final parameters.
//
// The plan maps as the planner means it: tp (Megatron splits), pp (1F1B, even stages), dp, zero
// 0..3; mbs sequences per micro-batch (0: the dp rank's whole share), global_batch sequences of
// TrainOptions::seq tokens per step. Activations bf16, f32 master weights and AdamW; the dp
// gradient sum goes through the overlap engine where the GPT trainer runs it (zero 0, dp > 1,
// pp 1); gradients clipped to the global norm 1.0 (summed over tp, dp shards and pp stages).
// Refused by name: stages= (uneven stages).
#pragma once

#include <memory>

#include "session_trainer.h"
#include "trainer.h"

namespace tessera::trainer {

Result<std::unique_ptr<SessionTrainer>> create_gpt_session_trainer(
    const TrainOptions& options, std::shared_ptr<coll::Bootstrap> bootstrap);

// check_trainer_plan for the decoder.
Status check_gpt_plan(const TrainPlan& plan, int64_t global_batch, int world);

}  // namespace tessera::trainer
