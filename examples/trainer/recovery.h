// A training session: the Trainer plus what keeps it alive across faults and plan switches.
//
// - Snapshots: every `snapshot_every` steps the Checkpointer snapshots parameters and Adam state
//   (async, incremental saves to storage; the snapshot also kept in the buddy rank's memory,
//   peer_replica). The checkpointer talks over its own world communicator, so its background
//   thread never shares one with the training thread.
// - Elastic recovery: a step that fails (a collective names a dead rank) makes the survivors
//   abort their communicators, wait for the launcher's restart (Bootstrap::next_generation),
//   re-form the communicators and the overlap engine, rebind the checkpointer and restore; the
//   restarted rank starts in the new generation and restores from its buddy's memory. Everyone
//   resumes from the restored step; data is a function of (seed, step), so the replay is bitwise.
// - The checkpoint directory (ckpt_dir.h): rank 0 locks it for the job; a new job resumes from
//   its `latest` (or starts fresh with --fresh) and saves its final step at the end. A save that
//   fails is a warning; --max-failed-saves in a row, or a failed final save, end the run with
//   kExitSavesFailing (saves_failing()).
// - Plan switch: before `switch_step` the state moves in memory to the new layout
//   (Checkpointer::reshard_from_memory) and a new Trainer runs the rest.
// One thread per rank.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "ckpt_dir.h"
#include "run.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::trainer {

// Store key where a rank that kills itself (fault injection) leaves "<wall-clock us>:<step>".
extern const char* const kKillTimeKey;

struct SnapshotReport {
  bool taken = false;
  double stall_s = 0;                        // the training thread blocked by save_async
  size_t bytes_full = 0, bytes_written = 0;  // of the last completed save (this rank)
  bool delta = false;
  size_t chunks = 0, chunks_changed = 0;  // of that save (chunks_changed: deltas)
  int64_t saved_step = -1;                // the step of that save
};

struct SessionStep {
  StepReport report;
  SnapshotReport snapshot;
  bool recovered = false;  // this step is the first completed one after a recovery
  std::string recovery_text, recovery_json;
  bool switched = false;
  std::string switch_text, switch_json;
};

class Session {
 public:
  Session(RunOptions options, std::shared_ptr<coll::Bootstrap> bootstrap);
  ~Session();
  // Builds the trainer and the checkpointer; a restarted rank (generation > 0) restores.
  Status start();
  int64_t next_step() const { return next_step_; }
  // Runs next_step() (recovering from a peer's death on the way when snapshots are on).
  Result<SessionStep> step();
  SessionTrainer& trainer() { return *trainer_; }
  // Saves the final step (when snapshots are on and it is not saved yet) and waits for it: an
  // error when it failed.
  Status finish();
  // The run failed because checkpoint saves kept failing (or the final one did).
  bool saves_failing() const { return saves_failing_; }

 private:
  std::string ckpt_dir() const;
  Result<int64_t> claim_ckpt_dir();  // the step to resume from, -1: from the start
  Status resume(int64_t step);
  Status make_checkpointer();
  Status collect_save();  // waits for the save in flight and applies the failed-save policy
  Status register_state();
  Status snapshot(int64_t step, SnapshotReport* out);
  Status recover(const Status& failure);
  Status reform_on_fewer_ranks(const Status& failure, double detected, double detected_wall);
  Result<ckpt::RestoreResult> restore();  // restore(), or step 0 when no snapshot exists
  Status switch_plan(SessionStep* out);
  std::string rank_text() const;

  RunOptions o_;
  std::shared_ptr<coll::Bootstrap> bootstrap_;
  bool restarted_ = false;  // started by the launcher as a replacement (generation > 0)
  std::unique_ptr<SessionTrainer> trainer_;
  std::shared_ptr<coll::Communicator> ckpt_comm_;
  std::unique_ptr<ckpt::Checkpointer> ckpt_;
  int64_t next_step_ = 0;
  bool switched_ = false;
  int64_t last_snapshot_step_ = -1;
  std::unique_ptr<DirLock> lock_;  // rank 0: the checkpoint directory is this job's
  bool save_pending_ = false;      // a save_async whose outcome collect_save() has not seen
  std::optional<ckpt::SaveResult> last_save_;
  int64_t failed_saves_ = 0;  // in a row
  bool saves_failing_ = false;
  std::atomic<int64_t> saving_step_{-1};  // read by the fault hook on the persist thread
  // Recovery timing (seconds on the steady clock, wall-clock for the kill time).
  struct Recovery {
    bool pending = false;
    int64_t failed_step = -1, restored_step = -1;
    double detect_s = 0, reform_s = 0, transfer_s = 0;
    double restore_end = 0;  // steady clock at the end of restore
    bool from_peer = false;
    std::string cause;
  } recovery_;
};

}  // namespace tessera::trainer
