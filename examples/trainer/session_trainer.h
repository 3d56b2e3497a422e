// What the training Session (recovery.h) and the loop (run.h) drive: one rank's trainer, whatever
// the model. Two implement it: the residual MLP (Trainer, trainer.h) and the GPT/MoE decoder
// (GptSessionTrainer, gpt_session.h, when TrainOptions::gpt_config names a config.json). The
// Session owns snapshots, elastic recovery and the plan switch; the trainer says what its state
// is, runs steps, and rebuilds its communicators after a peer's death.
//
// One thread per rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "layout.h"
#include "tessera/checkpoint/state.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/platform.h"

namespace tessera::trainer {

struct StepReport;
struct TrainOptions;

class SessionTrainer {
 public:
  virtual ~SessionTrainer() = default;

  // Runs step `step` (0-based; the data and the optimizer's count are functions of it).
  virtual Result<StepReport> train_step(int64_t step) = 0;
  // Collective over the world: rank 0 gathers the global parameters and, when `path` is not
  // empty, writes them (dump.h); every rank gets the checksum.
  virtual Result<uint64_t> gather_params(const std::string& path) = 0;

  virtual const TrainPlan& plan() const = 0;
  virtual int64_t global_batch() const = 0;
  virtual coll::Communicator& world() = 0;
  virtual const hal::Device& device() const = 0;

  // Registers the state a snapshot holds (parameters, optimizer state) with `registry`, cleared
  // first. Called again after rebuild_communication (the trainer may hold new buffers).
  virtual Status register_state(ckpt::StateRegistry& registry) = 0;
  // The registered memory now holds the state after `step` steps (a load, restore or in-memory
  // reshard wrote it): derive what the snapshot does not hold.
  virtual Status state_loaded(int64_t step) = 0;
  // Back to the initial state (from the seed): a restore with no snapshot anywhere.
  virtual Status reset_state() = 0;

  // Recovery: drops the communicators (after a peer failure), then builds them again over
  // `bootstrap` (a new generation). The state survives or is restored afterwards.
  virtual void abort_communication(const std::string& reason) = 0;
  virtual Status rebuild_communication(std::shared_ptr<coll::Bootstrap> bootstrap) = 0;
};

// The trainer `options` describe (the decoder when options.gpt_config is set, else the MLP).
// Collective over the bootstrap's world.
Result<std::unique_ptr<SessionTrainer>> create_session_trainer(
    const TrainOptions& options, std::shared_ptr<coll::Bootstrap> bootstrap);

// Whether `plan` can run `options`' model with `global_batch` on `world` ranks: INVALID_ARGUMENT
// naming the field otherwise (before anything collective starts).
Status check_trainer_plan(const TrainOptions& options, const TrainPlan& plan, int64_t global_batch,
                          int world);

}  // namespace tessera::trainer
