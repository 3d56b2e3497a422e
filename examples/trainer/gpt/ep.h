// Expert parallelism (ParallelGroups::ep, carved from dp as the planner assumes): the ep ranks of
// an expert group each hold E/ep of every MoE layer's experts (rank r: experts [r * E/ep,
// (r+1) * E/ep)) and exchange their tokens with an all-to-all (moe.cc); every other tensor stays
// replicated over dp. Expert gradients then sum over the dp/ep ranks holding the same experts
// (expert_dp), the rest over dp.
//
// Layout: expert_layout keeps the non-expert tensors in make_layout's order and packs this rank's
// experts after them, so the flat buffers split into a dp-reduced prefix and an expert suffix
// starting at expert_begin(). Names keep the global expert index ("block0.moe.expert3.up"), so
// initialisation (by name) gives each expert the weights of the 1-rank run.
#pragma once

#include <cstdint>

#include "config.h"
#include "parallel.h"
#include "params.h"

namespace tessera::gpt {

// `full` (make_layout, any tp; under pp a stage's stage_layout, whose other blocks hold no
// experts and stay empty) with only the experts of ep rank `ep_rank` of `ep`, re-packed as
// above; BlockParams::experts holds the E/ep local experts in order. INVALID_ARGUMENT naming the
// config when it has no experts or ep does not divide them.
Result<ParamLayout> expert_layout(const GptConfig& config, const ParamLayout& full, int ep_rank,
                                  int ep);

// The first flat element of the expert tensors (layout.total when there are none).
uint64_t expert_begin(const ParamLayout& layout);

// Sums `data` (a flat buffer of `layout`, `dtype`) over the data-parallel ranks in place: all of
// it over dp, or under ep the prefix before expert_begin over dp and the experts over expert_dp.
Status allreduce_gradients(const ParallelGroups& groups, const hal::Stream& stream,
                           const ParamLayout& layout, void* data, DType dtype, const char* what);

}  // namespace tessera::gpt
