// The GPT trainer's state in the checkpointer (runtime/checkpoint): what a snapshot holds, how it
// is registered, and how the trainer continues from a loaded or restored one.
//
// State: the f32 master weights and AdamW's two moments (device memory, copied by the
// checkpointer on its own stream; never read by the CPU); the step is the checkpoint's; the loss
// scaler's state (mode, scale, good steps, skipped steps: a blob "loss_scaler", saved with or
// without scaling, so that the optimizer resumes at step - skipped in any mode). The
// working copy is not saved: it is cast(master) and rebuilt after a load (refresh). Gradients are
// not saved: a snapshot is taken between steps, where they are zero. The data is a function of
// the step (data.h), so a run continued from step N sees the same samples as one run straight
// through, and ends with the same bits.
//
// Registration (register_gpt_state):
//   zero 0   every tensor by its global name and full shape ("block1.attn.wq" [rows, cols]) with
//            this rank's tensor-parallel slice (rows for column-parallel, columns for row-
//            parallel), replicated over dp; under pp a stage registers its own blocks, under ep a
//            rank its own experts (names keep the global expert index). The names and shapes do
//            not depend on the plan, so a snapshot loads, and reshard_from_memory moves it, into
//            any other zero-0 plan (tp, pp, dp, ep).
//   zero>=1  the flat shards (zero.h: units padded to a multiple of dp) as one tensor per role,
//            named with every degree and this rank's stage and tp index
//            ("zero.tp2.pp1.dp2.s0.t1.master" [dp * shard], this dp rank holding
//            [dp_rank * shard, +shard)): a shard's flat order depends on all of them, so these load
//            only into the same plan; under any other plan the checkpointer finds no such tensor
//            and refuses the load naming it.
// Placements (Placement::tp_dim, layer) are recorded for zero-0 tensors so `tessera ckpt reshard`
// knows how they are cut.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tessera/checkpoint/checkpointer.h"
#include "tessera/coll/bootstrap.h"
#include "trainer.h"

namespace tessera::gpt {

// Registers `trainer`'s master weights and AdamW moments with `registry` (cleared first). The
// trainer's buffers must outlive the registration.
Status register_gpt_state(GptTrainer& trainer, ckpt::StateRegistry& registry);

// The plan as the manifest records it ("tp=2,dp=2,pp=1,ep=1,zero=1"): a load under another plan
// with zero > 0 is refused by name.
std::string gpt_layout_text(const GptTrainer& trainer);

// After the registered memory was written (load, restore, reshard_from_memory) the trainer
// continues with GptTrainer::resume_at(stream, step) (the working copy rebuilt from master).

}  // namespace tessera::gpt

namespace tessera::gpt {

// How tessera-gpt-train snapshots (GptSnapshots).
struct SnapshotOptions {
  std::string dir;            // the checkpoint directory (shared by the ranks)
  int64_t every = 0;          // snapshot after every `every` steps, and after the last; 0: never
  int full_every = 4;         // a full save, then full_every - 1 deltas of it; 1: every save full
  bool synchronous = false;   // wait for each save to be durable before the next step
  bool peer_replica = false;  // also keep each snapshot in the buddy rank's memory
  bool resume = false;        // start from the directory's `latest` when it has one
  bool fsync = true;          // false: throwaway directories (tests)
};

// One save as the training thread saw it.
struct SnapshotStats {
  bool taken = false;
  double stall_s = 0;  // the training thread blocked: the snapshot copy, and the whole save when
                       // synchronous (or waiting for the previous save to finish)
  bool delta = false;  // of the last save whose outcome is known
  size_t bytes_written = 0, bytes_full = 0;
};

// The checkpointer of one rank of tessera-gpt-train: on its own communicator (its persist thread
// sends the buddy replicas), registered with the trainer's state.
//
//   auto snaps = GptSnapshots::create(options, trainer, bootstrap, device).value();
//   int64_t first = snaps->resume(stream).value();   // 0, or the step loaded
//   ... after each step s (1-based count of steps done): snaps->after_step(s, last)
//   snaps->finish();                                  // waits for the save in flight
class GptSnapshots {
 public:
  static Result<std::unique_ptr<GptSnapshots>> create(SnapshotOptions options, GptTrainer& trainer,
                                                      std::shared_ptr<coll::Bootstrap> bootstrap,
                                                      const hal::Device& device);
  ~GptSnapshots();

  // With options.resume and a committed checkpoint in the directory: loads it (every rank),
  // continues the trainer from its step and returns the step; else 0. A checkpoint saved under
  // another ZeRO plan is refused by the checkpointer, naming the tensor.
  Result<int64_t> resume(const hal::Stream& stream);
  // After `steps_done` steps: snapshots when it is a multiple of options.every or `last`.
  Result<SnapshotStats> after_step(int64_t steps_done, bool last);
  // Waits for the save in flight; its error when it failed.
  Status finish();
  ckpt::Checkpointer& checkpointer() { return *ckpt_; }

 private:
  GptSnapshots(SnapshotOptions options, GptTrainer& trainer);

  SnapshotOptions o_;
  GptTrainer& trainer_;
  std::shared_ptr<coll::Communicator> comm_;  // the checkpointer's (null: one rank)
  std::unique_ptr<ckpt::Checkpointer> ckpt_;
  bool pending_ = false;
  std::optional<ckpt::SaveResult> last_;
};

}  // namespace tessera::gpt
