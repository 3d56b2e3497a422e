// The training loop of tessera-train: bootstrap, trainer, steps with progress and metrics,
// snapshots, fault injection, recovery, the plan switch, and the final parameter gather.
#pragma once

#include <cstdint>
#include <string>

#include "trainer.h"

namespace tessera::trainer {

struct RunOptions {
  TrainOptions train;
  bool plan_given = false;   // false: pure DP over the world
  std::string params_out;    // gathered final parameters (dump.h format)
  std::string metrics_path;  // rank 0: one JSON object per line per step, then a summary line
  int64_t log_every = 1;
  // Checkpointing and recovery (recovery.cc).
  std::string ckpt_dir;
  int64_t snapshot_every = 0;  // 0: no snapshots, no recovery
  int64_t save_every = 0;      // every snapshot is also saved to storage: a full save every
                               // Nth, deltas between (0: 4)
  // Starting in a directory that holds checkpoints (ckpt_dir.h): resume from `latest` unless
  // `fresh`; `overwrite` lets `fresh` delete what is there; `allow_other_run` resumes from a
  // checkpoint of another run identity.
  bool fresh = false, overwrite = false, allow_other_run = false;
  // This many failed saves in a row stop the run (exit code kExitSavesFailing); 0: never.
  int64_t max_failed_saves = 3;
  int64_t fail_saves_from = -1;  // fault injection: every save of a step >= this one fails
  int kill_rank = -1;
  int64_t kill_step = -1;
  // With the kill: SIGKILL the rank's launcher first (`tessera launch`, its parent), which takes
  // the launcher's other ranks with it: a whole node lost (multi-node jobs, issue 18).
  bool kill_launcher = false;
  // Re-planning.
  int64_t switch_step = -1;
  std::string switch_plan_text;
  int64_t switch_batch = 0;  // the global batch after the switch (0: unchanged)
};

// The exit code of a run stopped because checkpoint saves kept failing (--max-failed-saves) or
// the final save failed: the training may be fine, its state is not on storage.
inline constexpr int kExitSavesFailing = 3;

// Flags that contradict each other or can never take effect (a kill after the last step, an
// --overwrite without --fresh, a --kill-rank outside the world). INVALID_ARGUMENT naming them.
Status check_run_options(const RunOptions& options, int world_size);

// Returns the process exit code (0 on success, kExitSavesFailing, else 1 or 2); errors are
// printed as one line naming the rank.
int run_training(RunOptions options);

}  // namespace tessera::trainer
