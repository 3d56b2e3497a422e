// The trainer's claim on its checkpoint directory, made by rank 0 (the rank that commits) before
// anything is written there, so that a rerun cannot silently overwrite newer checkpoints and two
// jobs cannot commit into the same directory:
// - DirLock: an exclusive flock on <dir>/tessera-train.lock for the life of the job;
// - the run identity: what makes two runs the same training, written into every manifest's
//   metadata (key kRunIdentityKey) and compared with the directory's before resuming;
// - decide_start(): resume from `latest` (the default), or start fresh (--fresh), refusing what
//   would lose data unless the flag that allows it is given.
// Thread-safe (no shared state); the lock belongs to the process that holds the object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainer.h"

namespace tessera::trainer {

inline constexpr const char* kLockFileName = "tessera-train.lock";
inline constexpr const char* kRunIdentityKey = "tessera-train.run";

// An exclusive flock on <dir>/tessera-train.lock for this object's lifetime. The file holds "pid P
// on host H since <UTC time>" so that a refused job names the holder. The kernel drops the lock
// when the process dies, so a SIGKILLed rank 0 that the launcher restarts takes it again. The file
// stays afterwards: removing it would race with a job opening it.
class DirLock {
 public:
  // Creates `dir` if needed. FAILED_PRECONDITION naming the directory and the holder when another
  // process holds the lock; UNAVAILABLE naming the file on I/O errors.
  static Result<std::unique_ptr<DirLock>> acquire(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// What makes two runs the same training (JSON): the model's sizes and the seed, of which data and
// initial values are functions. Plan, batch and learning rate may change between runs.
std::string run_identity(const TrainOptions& train);

struct StartPolicy {
  bool fresh = false;            // --fresh: start from step 0
  bool overwrite = false;        // --overwrite: with fresh, delete the checkpoints found
  bool allow_other_run = false;  // --allow-other-run: resume despite another run identity
  int64_t steps = 0;             // --steps: a checkpoint beyond it is refused
  std::string identity;          // run_identity() of this run
};

struct StartDecision {
  int64_t resume_step = -1;  // -1: start from step 0
  std::string note;          // what was found and done, for rank 0's log line
};

// Rank 0, holding the DirLock. Default: resume from the step `latest` names (none: start fresh),
// refusing a checkpoint of another run identity (unless allow_other_run), beyond `steps`, or a
// malformed `latest`. fresh: refuses a directory holding anything but the lock file unless
// overwrite, which deletes the checkpoint entries (step-N, step-N.tmp, latest) and leaves other
// files. Errors name the directory and the flag that would proceed.
Result<StartDecision> decide_start(const std::string& dir, const StartPolicy& policy);

}  // namespace tessera::trainer
