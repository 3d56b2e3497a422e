// The blocks and parameters a pipeline stage owns (pipeline.h describes the split and the
// schedule; GptModel builds a stage's model from them).
#pragma once

#include <cstdint>

#include "params.h"

namespace tessera::gpt {

struct StageRange {
  int first_layer = 0, end_layer = 0;  // blocks [first_layer, end_layer)
  bool first = true, last = true;      // holds the embedding / the head and loss
};

// Stage `stage` of `stages` over `layers` blocks. INVALID_ARGUMENT when layers < stages.
Result<StageRange> stage_range(int64_t layers, int stage, int stages);

// `full` (make_layout) restricted to the tensors of `range`, re-packed: blocks outside it keep
// default (all -1) indices; the tied head stays the embedding matrix on the last stage.
ParamLayout stage_layout(const ParamLayout& full, const StageRange& range);

}  // namespace tessera::gpt
