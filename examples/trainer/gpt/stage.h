// The blocks and parameters a pipeline stage owns (pipeline.h describes the split and the
// schedule; GptModel builds a stage's model from them).
#pragma once

#include <cstdint>
#include <vector>

#include "params.h"

namespace tessera::gpt {

// One model chunk: a contiguous run of blocks. Without virtual stages (vp = 1) a stage holds one
// chunk; with vp it holds vp of them (pipeline.h).
struct StageRange {
  int first_layer = 0, end_layer = 0;  // blocks [first_layer, end_layer)
  bool first = true, last = true;      // holds the embedding / the head and loss
};

// Stage `stage` of `stages` over `layers` blocks. INVALID_ARGUMENT when layers < stages.
Result<StageRange> stage_range(int64_t layers, int stage, int stages);

// The vp chunks of stage `stage` of `stages` under the interleaved schedule: `layers` blocks cut
// into stages * vp chunks (as even as possible, earlier chunks larger), chunk c of the stage is
// chunk c * stages + stage of the model; the embedding goes with the model's chunk 0 (stage 0's
// chunk 0), the head with its last (stage stages - 1's chunk vp - 1). vp = 1 is stage_range.
// INVALID_ARGUMENT naming vp when layers < stages * vp or vp < 1.
Result<std::vector<StageRange>> stage_chunks(int64_t layers, int stage, int stages, int vp);

// `full` (make_layout) restricted to the tensors of `range`, re-packed: blocks outside it keep
// default (all -1) indices; the tied head stays the embedding matrix on the last stage.
ParamLayout stage_layout(const ParamLayout& full, const StageRange& range);
// The same over a stage's chunks (stage_chunks, in order): the embedding, each chunk's blocks in
// layer order, then the final norm and head where the stage has them.
ParamLayout stage_layout(const ParamLayout& full, const std::vector<StageRange>& chunks);

}  // namespace tessera::gpt
