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
//           (with --overlap it runs on a communication stream: "Overlap" below). Two slots are used
//           where they still hold less than the whole working copy, else one: work bytes = (shard +
//           slots * largest part) * act size
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
// Collectives run on the caller's stream (coll orders them with its other work), except under
// enable_overlap (below). Not thread-safe.
//
// Overlap (TrainOptions::overlap, issue 16). zero 1 goes through the overlap engine
// (grad_overlap.h: its gradient is whole, so the engine's allreduce sums it as at zero 0;
// ZeroEngine then updates the slices). zero 2 does not go through GradSync's sharded modes:
// GradSync shards per bucket through full-size flat bucket buffers it keeps
// (ShardedMemory::staging_bytes: the whole gradient again, which undoes what zero 2 saves), reduces
// once per step (zero 2 reduces every micro-batch so that no whole gradient lives across
// micro-batches), and its shard of a bucket is not ZeroEngine's per-unit slice (checkpoint names
// and the resharding depend on that). So zero 2 keeps its own reduce-scatters and moves them to a
// communication stream instead: enable_overlap() splits a communicator from dp and creates the
// stream; grads_end() records an event after the part's backward on the compute stream, and the
// part's reduce-scatter, the add into the shard and the clearing of its scratch are queued on the
// communication stream after that event, while the compute stream goes on with the next part's
// backward. The gradient scratch is doubled: a second buffer holds the largest block (the
// embedding and the head, the vocabulary-sized parts, take the first one). grads_end() picks the
// next part's buffer (the next lower part holding units; after the lowest, the highest: the next
// micro-batch's backward): the other one if the part fits, else the first; the compute stream
// waits until that buffer's last reduce cleared it, so one reduce overlaps the next part's
// backward (a part that does not fit the other buffer waits for the previous part's reduce).
// grads_begin() refuses (INTERNAL) a part other than the one chosen for. grad bytes = (shard +
// largest part + largest block) * 4 (the second buffer: overlap_bytes()). reduce() then waits for
// the communication stream (AdamW reads the shard) and measures its busy time (timing events
// around each part's reduce) and how long the step still waited for it after the compute stream
// was done. The same collectives on the same data in the same order: bitwise the steps without
// the option. zero 3 also gathers on that stream: gather() records an event behind the compute
// queued so far (the last reads of what the slot held, AdamW's writes of the slices), the
// communication stream waits for it and allgathers the part into its slot, and use() makes the
// compute stream wait for the slot's gather before the part's forward, replay or backward. With
// two slots the prefetch of the next part is then a real overlap (the next part's gather runs
// while this part computes); with one slot each gather is waited for at once. The gather slots
// are unchanged; the second gradient scratch as at zero 2.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
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
  // After the micro-batches: zero 1 allreduces the whole gradient (zero 2/3 reduced already;
  // under enable_overlap `s` waits for the communication stream).
  Status reduce(const hal::Stream& s);
  // zero 2, dp > 1: the reduce-scatters on a communication stream of `device` (header comment).
  // Collective over dp (splits a communicator); allocates the second gradient scratch. Call once,
  // before the first step.
  Status enable_overlap(const hal::Device& device);
  bool overlapped() const { return overlap_ != nullptr; }
  // Device bytes enable_overlap allocated (the second gradient scratch, f32).
  uint64_t overlap_bytes() const;
  // Of the last reduce() under enable_overlap: the communication stream's busy seconds and the
  // seconds the step waited for it after the compute stream was done.
  double comm_seconds() const;
  double exposed_seconds() const;
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
  // `comm`: the dp group's (null where dp = 1: the unit is only folded into the shard).
  Status reduce_unit(const hal::Stream& s, coll::Communicator* comm, int unit);
  uint64_t part_elements(int part) const;  // padded elements of the part's units

  // enable_overlap's state. Declared last: destroyed first, after its stream drained.
  struct Overlap {
    std::shared_ptr<coll::Communicator> comm;  // split from dp
    hal::Stream stream;
    hal::DeviceBuffer scratch;  // the second gradient scratch (`largest` f32, kept zero)
    int next = 0;               // the scratch the next part binds (0: Params', 1: ours)
    int next_part = -1;         // the part grads_end chose it for (-1: any: the step's first)
    uint64_t second = 0;        // elements of the second scratch: the largest block part
    int cleared[2] = {-1, -1};  // per scratch: its last reduce (index into spans), -1 none
    int filled[2] = {-1, -1};   // zero 3, per gather slot: its last gather (spans), -1 none
    // Per part reduce and zero-3 gather: start, end (timing events on the stream).
    std::vector<std::pair<hal::Event, hal::Event>> spans;
    double comm_seconds = 0, exposed_seconds = 0;
    ~Overlap() { (void)stream.synchronize(); }
  };

  ZeroPlan plan_;
  ParallelGroups groups_;
  Params* params_;
  GptKernels kernels_;
  std::vector<int> slot_part_;  // zero 3: the part each gather slot holds (-1: none)
  std::unique_ptr<Overlap> overlap_;
};

}  // namespace tessera::gpt
