// ZeRO over the data-parallel group for the flat parameter buffers (params.h). The flat layout of
// `total` elements is padded to `shard * dp` and dp rank r owns elements [r * shard, (r+1) *
// shard):
//   zero 0  every rank holds master, m, v (f32) for all elements; gradients allreduced
//   zero 1  master, m, v only for the rank's shard (1/dp of them); gradients allreduced (every
//           rank keeps the whole reduced gradient), AdamW on the shard, the working copy
//           allgathered
//   zero 2  as zero 1, but the gradient is reduce-scattered: each rank receives only its
//           shard's sum (half the allreduce's traffic). The gradient *buffer* stays whole: the
//           backward accumulates every tensor's gradient into the flat buffer across
//           micro-batches, so the unreduced parts are needed until the last micro-batch ends.
//           Freeing reduced buckets needs per-bucket gradient storage inside GptModel's backward.
//   zero 3  refused (parameters sharded and gathered per block needs GptModel to gather before
//           each block's use).
// Collectives run in place on the caller's stream. Not thread-safe.
#pragma once

#include <cstdint>

#include "parallel.h"
#include "params.h"

namespace tessera::gpt {

struct ZeroPlan {
  int level = 0;
  uint64_t shard = 0;   // elements per dp rank (0 when level is 0)
  uint64_t begin = 0;   // this rank's first element
  uint64_t padded = 0;  // shard * dp >= total
};

// The plan for `level` on dp rank `dp_rank` of `dp_size`; INVALID_ARGUMENT naming `zero` for
// levels other than 0, 1, 2.
Result<ZeroPlan> make_zero_plan(int level, uint64_t total, int dp_rank, int dp_size);

// zero 1: allreduce of the whole padded gradient; zero 2: reduce-scatter (rank r's shard sum lands
// at its own place in the flat buffer). f32 sums.
Status reduce_gradients(const ZeroPlan& plan, const ParallelGroups& groups,
                        const hal::Stream& stream, const Params& params);

// After the sharded AdamW step: every rank's shard of the working copy to every rank.
Status gather_work(const ZeroPlan& plan, const ParallelGroups& groups, const hal::Stream& stream,
                   const Params& params);

// The whole master (layout total elements) gathered from the dp ranks' shards into a temporary
// device buffer and read back (synchronous; for tests and checkpoints).
Result<std::vector<float>> gather_master(const ZeroPlan& plan, const ParallelGroups& groups,
                                         const hal::Device& device, const hal::Stream& stream,
                                         const Params& params);

}  // namespace tessera::gpt
