#include "gpt_session.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>

#include "backend_choice.h"
#include "checkpoint.h"
#include "dump.h"
#include "stage.h"
#include "tessera/hal/hal.h"

namespace tessera::trainer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class GptSessionTrainer final : public SessionTrainer {
 public:
  GptSessionTrainer(TrainOptions options, gpt::GptConfig config)
      : options_(std::move(options)), config_(std::move(config)) {}
  ~GptSessionTrainer() override {
    // Work queued before a failed collective may still read the trainer's buffers.
    if (stream_) stream_->synchronize().ignore();
    trainer_.reset();  // before the communicators and the device it uses
    groups_ = {};
    world_.reset();
  }

  Status open_device(const coll::LaunchInfo& info) {
    TSR_ASSIGN_OR_RETURN(platform_, hal::Platform::create());
    TSR_ASSIGN_OR_RETURN(const std::string backend, pick_backend(*platform_, options_.backend));
    const std::vector<hal::Device> devices = platform_->devices(backend);
    device_.emplace(devices[size_t(info.local_rank) % devices.size()]);
    TSR_ASSIGN_OR_RETURN(hal::Stream stream, device_->create_stream());
    stream_.emplace(std::move(stream));
    TSR_ASSIGN_OR_RETURN(gpt::GptKernels kernels, gpt::GptKernels::load(*device_));
    kernels_.emplace(std::move(kernels));
    return Status();
  }

  // Collective: the world communicator, the plan's groups and a trainer from the seed.
  Status build(std::shared_ptr<coll::Bootstrap> bootstrap) {
    bootstrap_ = std::move(bootstrap);
    if (trainer_) stream_->synchronize().ignore();  // queued work may still read its buffers
    trainer_.reset();
    groups_ = {};
    TSR_ASSIGN_OR_RETURN(world_, coll::Communicator::create(bootstrap_, *device_));
    const TrainPlan& p = options_.plan;
    TSR_ASSIGN_OR_RETURN(groups_, gpt::make_groups(world_, p.tp, p.dp, p.pp));
    TSR_ASSIGN_OR_RETURN(
        trainer_, gpt::GptTrainer::create(*device_, config_, *kernels_, groups_, gpt_options()));
    return trainer_->init(*stream_);
  }

  Result<StepReport> train_step(int64_t step) override {
    if (step != trainer_->steps_done()) {
      return failed_precondition("GPT trainer: step " + std::to_string(step) + " asked after " +
                                 std::to_string(trainer_->steps_done()) + " steps");
    }
    const auto start = std::chrono::steady_clock::now();
    TSR_ASSIGN_OR_RETURN(gpt::StepResult r, trainer_->step(*stream_));
    StepReport report;
    report.step = step;
    report.loss = r.loss;
    report.seconds = seconds_since(start);
    report.dp_comm_s = r.comm_seconds;
    report.dp_exposed_s = r.exposed_comm_seconds;
    // tp and pp communication run on the compute stream: all of it is exposed.
    report.tp_comm_s = r.tp_comm_seconds;
    report.pp_comm_s = r.pp_comm_seconds;
    report.compute_s = std::max(
        0.0, report.seconds - r.tp_comm_seconds - r.pp_comm_seconds - r.exposed_comm_seconds);
    report.overlap_ratio = r.comm_seconds > 0 ? 1.0 - r.exposed_comm_seconds / r.comm_seconds : 1.0;
    return report;
  }

  Result<uint64_t> gather_params(const std::string& path) override;

  const TrainPlan& plan() const override { return options_.plan; }
  int64_t global_batch() const override { return options_.global_batch; }
  coll::Communicator& world() override { return *world_; }
  const hal::Device& device() const override { return *device_; }

  Status register_state(ckpt::StateRegistry& registry) override {
    return gpt::register_gpt_state(*trainer_, registry);
  }
  Status state_loaded(int64_t step) override { return trainer_->resume_at(*stream_, step); }
  Status reset_state() override {
    TSR_RETURN_IF_ERROR(trainer_->init(*stream_));
    return trainer_->resume_at(*stream_, 0);
  }

  void abort_communication(const std::string& reason) override {
    for (auto* comm : {&groups_.tp, &groups_.dp, &groups_.pp, &groups_.embed, &groups_.ep,
                       &groups_.expert_dp, &world_}) {
      if (*comm) (*comm)->abort(reason);
    }
  }
  // A new trainer on the new communicators; the Session registers it again and restores.
  Status rebuild_communication(std::shared_ptr<coll::Bootstrap> bootstrap) override {
    return build(std::move(bootstrap));
  }

 private:
  gpt::TrainOptions gpt_options() const {
    const TrainPlan& p = options_.plan;
    gpt::TrainOptions o;
    o.seq = options_.seq;
    o.act = options_.gpt_f32 ? hal::DType::kF32 : hal::DType::kBF16;
    o.micro_batch = p.mbs > 0 ? p.mbs : options_.global_batch / p.dp;
    o.micro_batches = options_.global_batch / (p.dp * o.micro_batch);
    o.seed = options_.seed;
    o.zero = p.zero;
    o.vp = p.vp;
    o.sp = p.sp;
    o.overlap = p.zero == 0 && p.dp > 1 && p.pp == 1;
    o.adamw.lr = options_.adam.lr;
    o.adamw.decay_steps = options_.steps;
    return o;
  }

  TrainOptions options_;
  gpt::GptConfig config_;
  std::shared_ptr<hal::Platform> platform_;
  std::optional<hal::Device> device_;
  std::optional<hal::Stream> stream_;
  std::optional<gpt::GptKernels> kernels_;
  std::shared_ptr<coll::Bootstrap> bootstrap_;
  std::shared_ptr<coll::Communicator> world_;
  gpt::ParallelGroups groups_;
  std::unique_ptr<gpt::GptTrainer> trainer_;
};

// The layout of the (tp, pp) shard that world rank `rank` holds.
Result<gpt::ParamLayout> shard_layout(const gpt::GptConfig& config, const TrainPlan& p, int rank) {
  const int tp_rank = rank % p.tp, pp_rank = rank / (p.tp * p.dp);
  TSR_ASSIGN_OR_RETURN(gpt::ParamLayout layout, gpt::make_layout(config, tp_rank, p.tp));
  if (p.pp == 1) return layout;
  if (p.vp > 1) {  // the stage's chunks under the interleaved schedule (stage.h)
    TSR_ASSIGN_OR_RETURN(std::vector<gpt::StageRange> chunks,
                         gpt::stage_chunks(config.layers, pp_rank, p.pp, p.vp));
    return gpt::stage_layout(layout, chunks);
  }
  TSR_ASSIGN_OR_RETURN(gpt::StageRange range, gpt::stage_range(config.layers, pp_rank, p.pp));
  return gpt::stage_layout(layout, range);
}

// Rank 0 assembles every tensor whole from the dp-rank-0 shards (through the bootstrap's store:
// a reference-sized model, at most the store's value limit per rank) in the 1-rank layout's order.
Result<uint64_t> GptSessionTrainer::gather_params(const std::string& path) {
  const std::string where = "rank " + std::to_string(world_->rank()) + ": gathering parameters";
  TSR_ASSIGN_OR_RETURN(std::vector<float> master, trainer_->download_master(*stream_));
  std::string mine;
  if (groups_.dp_rank() == 0) {
    mine.assign(reinterpret_cast<const char*>(master.data()), master.size() * sizeof(float));
  }
  const std::string key =
      "tessera-train/gpt-params/g" + std::to_string(bootstrap_->info().generation);
  auto all = bootstrap_->allgather(key, mine);
  if (!all.ok()) return all.status().with_context(where);
  TSR_ASSIGN_OR_RETURN(gpt::ParamLayout whole, gpt::make_layout(config_, 0, 1));
  std::vector<NamedTensor> tensors;
  std::map<std::string, size_t> index;
  for (const gpt::ParamSpec& spec : whole.specs) {
    index[spec.name] = tensors.size();
    tensors.push_back(
        {spec.name, {spec.rows, spec.cols}, std::vector<float>(size_t(spec.rows * spec.cols))});
  }
  const TrainPlan& p = options_.plan;
  for (int r = 0; r < int(all->size()); ++r) {
    if ((r / p.tp) % p.dp != 0) continue;  // dp rank 0 of each (tp, pp) shard
    TSR_ASSIGN_OR_RETURN(gpt::ParamLayout layout, shard_layout(config_, p, r));
    const std::string& bytes = (*all)[size_t(r)];
    if (bytes.size() != layout.total * sizeof(float)) {
      return internal_error(where + ": rank " + std::to_string(r) + " sent " +
                            std::to_string(bytes.size()) + " bytes, its layout holds " +
                            std::to_string(layout.total * sizeof(float)));
    }
    const float* values = reinterpret_cast<const float*>(bytes.data());
    const int tp_rank = r % p.tp;
    for (const gpt::ParamSpec& spec : layout.specs) {
      NamedTensor& t = tensors[index.at(spec.name)];
      const int64_t row0 = spec.split == gpt::Split::kRows ? tp_rank * spec.local_rows : 0;
      const int64_t col0 = spec.split == gpt::Split::kCols ? tp_rank * spec.local_cols : 0;
      for (int64_t i = 0; i < spec.local_rows; ++i) {
        std::memcpy(t.values.data() + (row0 + i) * spec.cols + col0,
                    values + spec.offset + uint64_t(i * spec.local_cols),
                    size_t(spec.local_cols) * sizeof(float));
      }
    }
  }
  if (world_->rank() == 0 && !path.empty()) {
    TSR_RETURN_IF_ERROR(write_params_file(path, tensors).with_context(where));
  }
  return params_checksum(tensors);
}

}  // namespace

Status check_gpt_plan(const TrainPlan& p, int64_t global_batch, int world) {
  const std::string plan = "plan " + plan_text(p);
  if (p.world() != world) {
    return invalid_argument(plan + ": tp * pp * dp = " + std::to_string(p.world()) +
                            ", the job has " + std::to_string(world) + " ranks");
  }
  if (!p.stage_blocks.empty()) {
    return invalid_argument(plan + ": stages= is not supported by the GPT trainer (even stages)");
  }
  if (p.zero < 0 || p.zero > 3) return invalid_argument(plan + ": zero must be 0..3");
  if (global_batch < 1 || global_batch % p.dp != 0) {
    return invalid_argument(plan + ": global batch " + std::to_string(global_batch) +
                            " is not a multiple of dp " + std::to_string(p.dp));
  }
  const int64_t share = global_batch / p.dp;
  if (p.mbs > 0 && share % p.mbs != 0) {
    return invalid_argument(plan + ": mbs " + std::to_string(p.mbs) + " does not divide the " +
                            std::to_string(share) + " sequences of each dp rank");
  }
  return Status();
}

Result<std::unique_ptr<SessionTrainer>> create_gpt_session_trainer(
    const TrainOptions& options, std::shared_ptr<coll::Bootstrap> bootstrap) {
  TSR_RETURN_IF_ERROR(check_gpt_plan(options.plan, options.global_batch, bootstrap->info().size));
  TSR_ASSIGN_OR_RETURN(gpt::GptConfig config, gpt::load_config(options.gpt_config));
  auto t = std::make_unique<GptSessionTrainer>(options, std::move(config));
  TSR_RETURN_IF_ERROR(t->open_device(bootstrap->info()));
  TSR_RETURN_IF_ERROR(t->build(std::move(bootstrap)));
  return std::unique_ptr<SessionTrainer>(std::move(t));
}

}  // namespace tessera::trainer
