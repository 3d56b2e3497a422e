// ZeRO over the data-parallel group for the flat parameter buffers (params.h). The tensors are
// grouped in units the model uses together — the embedding (wte, wpe), each block, the final norm
// with the head — and each unit is sharded as FSDP shards a flat parameter: padded to a multiple
// of dp, dp rank r owns its r-th slice (ShardLayout). What each level keeps per rank:
//   zero 0  everything whole; the gradients allreduced after the backward
//   zero 1  master, m, v: the rank's slices (1/dp); gradient and working copy whole. The gradient
//           is allreduced, AdamW updates the slices, and every unit's working copy is
//           allgathered in place
//   zero 2  as 1, and the gradient too: the backward binds each part's gradient (below) to a
//           full-size scratch (kept zero) as it reaches the part, and as soon as the part's
//           backward is done reduce-scatters it in place, adds the rank's slice into the
//           persistent shard-sized gradient and clears the scratch for the next part. The
//           unsharded gradient exists only for the part in flight: grad bytes = (shard +
//           largest part) * 4. Gradient accumulation reduces after every micro-batch (no
//           full-size gradient lives across micro-batches; DeepSpeed's ZeRO-2 does the same): the
//           sum equals zero 1's up to f32 rounding order
//   zero 3  as 2, and the working copy too: AdamW writes the rank's slices; before a part's
//           forward (and again before its backward or recomputation) its units are allgathered
//           into a gather slot, which the part's next use takes as it is if the slot was not
//           reused meanwhile (the turn from forward to backward, the next micro-batch's start);
//           after AdamW every slot is stale. Prefetch (two slots): as soon as the current part is
//           resident, the next part in walk order is gathered into the other slot, before the
//           current part's compute is queued; on one stream this only orders the gather earlier
//           (a communication stream would overlap it). Two slots are used where they still hold
//           less than the whole working copy, else one: work bytes = (shard + slots * largest
//           part) * act size
// The parts are what the model uses at once: the embedding; each block; the head (the final
// norm's unit, with the embedding's unit when the embedding is tied: its gradient is then reduced
// twice per micro-batch, after the head's backward and after the embedding's).
// Under pipeline parallelism the layout is the stage's (stage_layout): each stage shards its own
// units over its dp group, and the parts it does not hold are empty. The hooks run per micro-batch
// as the 1F1B schedule reaches each part (pipeline.h): zero 2 reduces a part's gradient after each
// of its backwards, zero 3 gathers a part again for a replayed forward unless a slot still holds
// it. Every dp rank of a stage runs the same schedule, so the collectives pair up.
// Refused by name: levels outside 0..3; zero >= 1 with expert parallelism (expert tensors reduce
// over another group) and with bf16 gradients on the wire (trainer.cc).
// Collectives run on the caller's stream (coll orders them with its other work). Not
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels.h"
#include "parallel.h"
#include "params.h"

namespace tessera::gpt {

struct ZeroPlan {
  int level = 0;
  ShardLayout shards;  // level >= 1
  // The units of each part: [0] the embedding, [1 + l] block l, [layers + 1] the head; empty
  // where this rank has no such part (pipeline stages).
  std::vector<std::vector<int>> parts;
  uint64_t largest = 0;  // padded elements of the largest part (the scratch a part needs)
  int slots = 0;         // zero 3: gather slots of `largest` elements (2: prefetch)
  uint64_t shard() const { return shards.shard; }
  // The scratch Params::shard_state allocates for this plan.
  Params::ShardOptions options() const;
};

// The plan for `level` over `layout` on dp rank `dp_rank` of `dp_size` for a model of `layers`
// blocks. INVALID_ARGUMENT naming `zero` for levels outside 0..3; INTERNAL where the layout does
// not keep each unit's tensors contiguous.
Result<ZeroPlan> make_zero_plan(int level, const ParamLayout& layout, int64_t layers, int dp_rank,
                                int dp_size);

// Which part of the model a hook is about, and which way the model walks (for the prefetch).
enum class Part { kEmbed, kBlock, kHead };
enum class Pass { kForward, kBackward };

// The ZeRO step around the model's forward and backward on one rank. GptModel calls use(),
// grads_begin() and grads_end() around each part (no-ops at levels that do not need them); the
// trainer calls reduce() after the backward and finish_step() after AdamW.
class ZeroEngine {
 public:
  ZeroEngine(ZeroPlan plan, ParallelGroups groups, Params& params, GptKernels kernels);

  const ZeroPlan& plan() const { return plan_; }
  // zero 3: make the working weights of (part, layer) resident, then prefetch the next part
  // of `pass` into the other slot.
  Status use(const hal::Stream& s, Part part, int layer, Pass pass);
  // zero >= 2: bind (part, layer)'s gradients to the zeroed scratch before its backward.
  Status grads_begin(Part part, int layer);
  // zero >= 2: the backward of (part, layer) is done: reduce-scatter its gradients into the
  // shard and clear the scratch.
  Status grads_end(const hal::Stream& s, Part part, int layer);
  // After the micro-batches: zero 1 allreduces the whole gradient (zero 2/3 reduced already).
  Status reduce(const hal::Stream& s);
  // After AdamW: zero 1/2 allgather every unit's working copy in place; zero 3 forgets what it
  // gathered (the slices changed).
  Status finish_step(const hal::Stream& s);
  // The whole master weights (layout order) gathered over dp and read back. Synchronous.
  Result<std::vector<float>> gather_master(const hal::Device& device, const hal::Stream& s) const;

 private:
  int part_of(Part part, int layer) const;
  int next_part(int part, Pass pass) const;
  // Makes `part` resident in a gather slot (gathering unless a slot holds it); never evicts
  // `keep`.
  Status gather(const hal::Stream& s, int part, int keep);
  Status reduce_unit(const hal::Stream& s, int unit);

  ZeroPlan plan_;
  ParallelGroups groups_;
  Params* params_;
  GptKernels kernels_;
  std::vector<int> slot_part_;  // zero 3: the part each gather slot holds (-1: none)
};

}  // namespace tessera::gpt
