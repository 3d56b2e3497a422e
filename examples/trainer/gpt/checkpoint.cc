#include "checkpoint.h"

#include <chrono>
#include <filesystem>
#include <string_view>

#include "tessera/checkpoint/comm_rank_group.h"
#include "tessera/coll/communicator.h"

namespace tessera::gpt {
namespace {

// The block a tensor belongs to ("block12.attn.wq" -> 12), -1 for the embedding, norm and head.
int layer_of(std::string_view name) {
  constexpr std::string_view kBlock = "block";
  if (name.substr(0, kBlock.size()) != kBlock) return -1;
  int layer = 0;
  size_t i = kBlock.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    layer = layer * 10 + (name[i] - '0');
  return layer;
}

// This tp rank's part of `spec` in its full [rows, cols] shape.
ckpt::Slice tp_slice(const ParamSpec& spec, int tp_rank) {
  switch (spec.split) {
    case Split::kRows: return {{tp_rank * spec.local_rows, 0}, {spec.local_rows, spec.cols}};
    case Split::kCols: return {{0, tp_rank * spec.local_cols}, {spec.rows, spec.local_cols}};
    case Split::kReplicated: break;
  }
  return ckpt::full_slice({spec.rows, spec.cols});
}

int tp_dim(Split split) {
  return split == Split::kRows ? 0 : split == Split::kCols ? 1 : -1;
}

Status register_whole(const Params& params, int tp_rank, ckpt::StateRegistry& registry) {
  const ParamLayout& layout = params.layout();
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ParamSpec& spec = layout.specs[i];
    const std::vector<int64_t> shape{spec.rows, spec.cols};
    const ckpt::Slice slice = tp_slice(spec, tp_rank);
    const ckpt::Placement placement{.tp_dim = tp_dim(spec.split), .layer = layer_of(spec.name)};
    const struct {
      std::string name;
      float* data;
    } roles[] = {{spec.name, params.master(int(i))},
                 {spec.name + ".adam_m", params.m_base() + spec.offset},
                 {spec.name + ".adam_v", params.v_base() + spec.offset}};
    for (const auto& role : roles) {
      // Identical on every dp rank (and every tp rank for replicated tensors): the lowest writes.
      TSR_RETURN_IF_ERROR(registry.add_device_tensor(role.name, DType::kF32, shape, slice,
                                                     role.data, /*replicated=*/true));
      TSR_RETURN_IF_ERROR(registry.set_placement(role.name, placement));
    }
  }
  return Status();
}

Status register_shards(const Params& params, const ParallelGroups& groups,
                       ckpt::StateRegistry& registry) {
  const int64_t shard = int64_t(params.shards().shard);
  if (shard == 0) return Status();  // a stage without parameters (never: every stage has a block)
  // The flat order of a shard depends on every degree (units are cut per dp, laid out per stage
  // and tp rank): the names carry them all, so that no other plan finds these tensors.
  const std::string prefix =
      "zero.tp" + std::to_string(groups.tp_size()) + ".pp" + std::to_string(groups.pp_size()) +
      ".dp" + std::to_string(groups.dp_size()) + ".s" + std::to_string(groups.pp_rank()) + ".t" +
      std::to_string(groups.tp_rank()) + ".";
  const std::vector<int64_t> shape{shard * groups.dp_size()};
  const ckpt::Slice slice{{shard * groups.dp_rank()}, {shard}};
  const struct {
    const char* role;
    float* data;
  } roles[] = {
      {"master", params.master_base()}, {"adam_m", params.m_base()}, {"adam_v", params.v_base()}};
  for (const auto& role : roles) {
    TSR_RETURN_IF_ERROR(
        registry.add_device_tensor(prefix + role.role, DType::kF32, shape, slice, role.data));
  }
  return Status();
}

}  // namespace

Status register_gpt_state(GptTrainer& trainer, ckpt::StateRegistry& registry) {
  registry.clear();
  const GptModel& model = trainer.model();
  const Params& params = model.params();
  if (params.sharded()) {
    TSR_RETURN_IF_ERROR(register_shards(params, model.groups(), registry));
  } else {
    TSR_RETURN_IF_ERROR(register_whole(params, model.groups().tp_rank(), registry));
  }
  // The scaler's state beside the step, with or without scaling (a run may resume with another
  // mode: LossScaler::set_state): identical on every rank (the overflow check is global).
  LossScaler& scaler = trainer.loss_scaler();
  return registry.add_blob(
      ckpt::BlobEntry{.name = "loss_scaler",
                      .get = [&scaler] { return scaler.state(); },
                      .set = [&scaler](std::string_view text) { return scaler.set_state(text); },
                      .replicated = true});
}

std::string gpt_layout_text(const GptTrainer& trainer) {
  const ParallelGroups& g = trainer.model().groups();
  return "tp=" + std::to_string(g.tp_size()) + ",dp=" + std::to_string(g.dp_size()) +
         ",pp=" + std::to_string(g.pp_size()) + ",ep=" + std::to_string(g.ep_size()) +
         ",zero=" + std::to_string(trainer.options().zero);
}

}  // namespace tessera::gpt

namespace tessera::gpt {

GptSnapshots::GptSnapshots(SnapshotOptions options, GptTrainer& trainer)
    : o_(std::move(options)), trainer_(trainer) {}

GptSnapshots::~GptSnapshots() = default;  // the Checkpointer waits for its save in flight

Result<std::unique_ptr<GptSnapshots>> GptSnapshots::create(
    SnapshotOptions options, GptTrainer& trainer, std::shared_ptr<coll::Bootstrap> bootstrap,
    const hal::Device& device) {
  if (options.dir.empty()) return invalid_argument("GPT snapshots: no checkpoint directory");
  if (options.every < 0 || options.full_every < 1) {
    return invalid_argument("GPT snapshots: every must be >= 0 and full_every >= 1");
  }
  auto snaps = std::unique_ptr<GptSnapshots>(new GptSnapshots(options, trainer));
  std::shared_ptr<ckpt::RankGroup> group;
  const bool alone = bootstrap->info().size <= 1;
  if (alone) {
    group = std::make_shared<ckpt::SingleRankGroup>();
  } else {
    // Its own communicator: the persist thread's replica traffic never shares the training's.
    TSR_ASSIGN_OR_RETURN(snaps->comm_, coll::Communicator::create(bootstrap, device));
    group = std::make_shared<ckpt::CommRankGroup>(snaps->comm_);
  }
  ckpt::CheckpointOptions c;
  c.dir = options.dir;
  c.full_every = options.full_every;
  c.peer_replica = options.peer_replica && !alone;
  c.chunk_bytes = 256 << 10;  // small models: fine chunks keep the deltas small
  c.fsync = options.fsync;
  c.keep_last = 2;
  c.device = device;
  c.layout = gpt_layout_text(trainer);
  TSR_ASSIGN_OR_RETURN(snaps->ckpt_, ckpt::Checkpointer::create(c, std::move(group)));
  TSR_RETURN_IF_ERROR(register_gpt_state(trainer, snaps->ckpt_->registry()));
  return snaps;
}

Result<int64_t> GptSnapshots::resume(const hal::Stream& stream) {
  if (!o_.resume) return 0;
  // Rank 0 decides for everyone (the ranks may see the storage differently; the load is
  // collective).
  const bool here = std::filesystem::exists(std::filesystem::path(o_.dir) / "latest");
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       ckpt_->group().allgather(here ? "resume" : "fresh"));
  if (all.at(0) != "resume") return 0;
  TSR_ASSIGN_OR_RETURN(ckpt::LoadResult loaded, ckpt_->load());
  TSR_RETURN_IF_ERROR(trainer_.resume_at(stream, loaded.step));
  return loaded.step;
}

Result<SnapshotStats> GptSnapshots::after_step(int64_t steps_done, bool last) {
  SnapshotStats stats;
  if (o_.every == 0 || (steps_done % o_.every != 0 && !last)) return stats;
  const auto start = std::chrono::steady_clock::now();
  if (pending_) {  // the previous save still persisting: this step waits for it
    pending_ = false;
    TSR_ASSIGN_OR_RETURN(last_, ckpt_->wait());
    TSR_RETURN_IF_ERROR(last_->status.with_context("save of step " + std::to_string(last_->step)));
  }
  TSR_ASSIGN_OR_RETURN(ckpt::SaveStart started, ckpt_->save_async(steps_done));
  (void)started;
  pending_ = true;
  if (o_.synchronous) {
    pending_ = false;
    TSR_ASSIGN_OR_RETURN(last_, ckpt_->wait());
    TSR_RETURN_IF_ERROR(last_->status.with_context("save of step " + std::to_string(steps_done)));
  }
  stats.taken = true;
  stats.stall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (last_) {
    stats.delta = last_->delta;
    stats.bytes_written = last_->bytes_written;
    stats.bytes_full = last_->bytes_full;
  }
  return stats;
}

Status GptSnapshots::finish() {
  if (!pending_) return Status();
  pending_ = false;
  TSR_ASSIGN_OR_RETURN(last_, ckpt_->wait());
  return last_->status.with_context("save of step " + std::to_string(last_->step));
}

}  // namespace tessera::gpt
