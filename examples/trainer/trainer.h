// The reference trainer: executes a TrainPlan (DP through the overlap engine, ZeRO-1, Megatron
// TP, 1F1B PP) for the MLP of model.h on one HAL device per rank, deterministically: the same
// plan and seed give the same bits.
//
//   auto t = Trainer::create(options, bootstrap).value();
//   for (int64_t s = 0; s < options.steps; ++s) t->train_step(s);
//   t->write_params("final.bin");  // collective: rank 0 writes the gathered global parameters
//
// One thread per rank (the communicators' rule). The trainer owns its communicators, the overlap
// engine and the parameter/optimizer memory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels.h"
#include "layout.h"
#include "model.h"
#include "session_trainer.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/platform.h"
#include "tessera/overlap/grad_sync.h"

namespace tessera::trainer {

struct TrainOptions {
  ModelSpec model;
  TrainPlan plan;
  int64_t global_batch = 32;  // samples per step
  int64_t steps = 20;
  uint64_t seed = 1;
  AdamConfig adam;
  size_t bucket_bytes = 64 << 10;  // the overlap engine's bucket size (small model: many buckets)
  std::string trace_path;          // overlap engine trace (TESSERA_TRACE when empty)
  // The GPT/MoE decoder of this Hugging Face config.json instead of the MLP (gpt_session.h):
  // global_batch counts sequences of `seq` tokens; `model` is not used.
  std::string gpt_config;
  int64_t seq = 32;
  bool gpt_f32 = false;  // f32 activations and working weights (tight comparisons); else bf16
  // The decoder's HAL backend: "auto" (the first accelerator backend with devices, else the host
  // backend: pick_backend) or a backend name. The MLP runs on the host backend only.
  std::string backend = "auto";
};

// What one step did, as seen by this rank (loss is global: the same on every rank).
struct StepReport {
  int64_t step = 0;
  double loss = 0;          // mean cross-entropy over the global batch
  double seconds = 0;       // wall time of the step
  double compute_s = 0;     // forward + backward + optimizer on this rank
  double tp_comm_s = 0;     // TP allreduces (blocking)
  double pp_comm_s = 0;     // pipeline sends/receives, waits included
  double dp_comm_s = 0;     // overlap engine: communication stream busy time
  double dp_exposed_s = 0;  // overlap engine: finish() waiting after compute
  double overlap_ratio = 1;
  size_t dp_bytes = 0;  // gradient bytes reduced
};

// One parameter of this rank: its slice, value, gradient and Adam moments.
struct Param {
  LocalParam local;
  hal::DeviceBuffer data, grad;
  std::vector<float> adam_m, adam_v;  // empty under ZeRO-1 (the shard state lives in Trainer)
  int sync_index = -1;                // index in the overlap engine
  float* value() const { return static_cast<float*>(data.data()); }
  float* gradient() const { return static_cast<float*>(grad.data()); }
  int64_t count() const { return local.elements(); }
};

class Trainer final : public SessionTrainer {
 public:
  static Result<std::unique_ptr<Trainer>> create(const TrainOptions& options,
                                                 std::shared_ptr<coll::Bootstrap> bootstrap);
  ~Trainer() override;

  // Runs step `step` (0-based; Adam's t = step + 1; data = f(seed, step)).
  Result<StepReport> train_step(int64_t step) override;

  // Collective over the world: rank 0 gathers the global parameters (global order, row-major)
  // and, when `path` is not empty, writes them (format in dump.h). Every rank gets the checksum.
  Result<uint64_t> gather_params(const std::string& path) override;

  const TrainPlan& plan() const override { return layout_.plan; }
  int64_t global_batch() const override { return options_.global_batch; }
  // Parameters and Adam moments by name and slice (ZeRO-1: the moments of this rank's shard).
  Status register_state(ckpt::StateRegistry& registry) override;
  Status state_loaded(int64_t) override { return Status(); }  // the snapshot holds it all

  const Layout& layout() const { return layout_; }
  const TrainOptions& options() const { return options_; }
  int rank() const { return world_->rank(); }
  coll::Communicator& world() override { return *world_; }
  std::vector<Param>& params() { return params_; }
  overlap::GradSync* grad_sync() { return sync_.get(); }
  std::vector<float>& zero_m() { return zero_m_; }
  std::vector<float>& zero_v() { return zero_v_; }
  const hal::Device& device() const override { return *device_; }

  // Back to the initial parameters (from the seed) and zero Adam moments: a restore with no
  // snapshot anywhere starts over from step 0 (still deterministic).
  Status reset_state() override;

  // Recovery: drops communicators and the overlap engine (after a peer failure), then builds
  // them again over `bootstrap` (a new generation). Parameters and optimizer state stay.
  void abort_communication(const std::string& reason) override;
  Status rebuild_communication(std::shared_ptr<coll::Bootstrap> bootstrap) override;

  struct Activations;  // schedule.cc

 private:
  Trainer() = default;
  Status build_communicators(std::shared_ptr<coll::Bootstrap> bootstrap);
  Status build_grad_sync();
  Status init_params();
  Status run_schedule(int64_t step, StepReport* report, double* loss_sum);
  Status forward(int64_t step, int64_t mb, Activations& act, StepReport* report, double* loss_sum);
  Status backward(int64_t mb, bool last_mb, Activations& act, StepReport* report);
  Status optimizer_step(int64_t step, StepReport* report);
  Status tp_allreduce(float* data, int64_t count, StepReport* report);
  Status pp_send(const float* data, int64_t count, int peer_stage, StepReport* report);
  Status pp_recv(float* data, int64_t count, int peer_stage, StepReport* report);
  Param& param(int block, ParamKind kind);

  TrainOptions options_;
  Layout layout_;
  std::shared_ptr<hal::Platform> platform_;
  std::optional<hal::Device> device_;
  hal::Stream compute_;
  std::unique_ptr<Gemm> gemm_;
  std::shared_ptr<coll::Communicator> world_, tp_, dp_, pp_;
  std::unique_ptr<overlap::GradSync> sync_;
  std::vector<Param> params_;
  std::vector<float> zero_m_, zero_v_;  // ZeRO-1: Adam moments of this rank's shard
};

}  // namespace tessera::trainer
