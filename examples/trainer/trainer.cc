#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "tessera/common/log.h"

namespace tessera::trainer {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Trainer::~Trainer() {
  sync_.reset();  // before the communicators and buffers it points into
}

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainOptions& options,
                                                 std::shared_ptr<coll::Bootstrap> bootstrap) {
  TSR_RETURN_IF_ERROR(validate_spec(options.model));
  const int world = bootstrap->info().size, rank = bootstrap->info().rank;
  TSR_RETURN_IF_ERROR(validate_plan(options.plan, options.model, options.global_batch, world));
  std::unique_ptr<Trainer> t(new Trainer());
  t->options_ = options;
  TSR_ASSIGN_OR_RETURN(t->layout_,
                       make_layout(options.plan, options.model, options.global_batch, rank));
  TSR_ASSIGN_OR_RETURN(t->platform_, hal::Platform::create());
  auto devices = t->platform_->devices("host");
  if (devices.empty()) {
    return not_found("rank " + std::to_string(rank) +
                     ": no host device (TESSERA_HOST_DEVICES=0 or the host backend is missing)");
  }
  t->device_ = devices[0];
  TSR_ASSIGN_OR_RETURN(t->compute_, t->device_->create_stream());
  t->gemm_ = std::make_unique<Gemm>(t->compute_);
  TSR_RETURN_IF_ERROR(t->init_params());
  TSR_RETURN_IF_ERROR(t->build_communicators(std::move(bootstrap)));
  TSR_RETURN_IF_ERROR(t->build_grad_sync());
  return t;
}

namespace {

void fill_initial(const LocalParam& lp, uint64_t seed, float* v) {
  if (lp.len.size() == 1) {
    for (int64_t i = 0; i < lp.len[0]; ++i) v[i] = initial_value(lp.info, seed, lp.offset[0] + i);
    return;
  }
  const int64_t cols = lp.info.shape[1];
  for (int64_t i = 0; i < lp.len[0]; ++i) {
    for (int64_t j = 0; j < lp.len[1]; ++j) {
      v[i * lp.len[1] + j] =
          initial_value(lp.info, seed, (lp.offset[0] + i) * cols + lp.offset[1] + j);
    }
  }
}

}  // namespace

Status Trainer::reset_state() {
  for (Param& p : params_) {
    fill_initial(p.local, options_.seed, p.value());
    std::fill(p.adam_m.begin(), p.adam_m.end(), 0.0f);
    std::fill(p.adam_v.begin(), p.adam_v.end(), 0.0f);
  }
  std::fill(zero_m_.begin(), zero_m_.end(), 0.0f);
  std::fill(zero_v_.begin(), zero_v_.end(), 0.0f);
  return Status();
}

Status Trainer::register_state(ckpt::StateRegistry& reg) {
  reg.clear();
  const bool replicated = layout_.plan.dp > 1;
  for (Param& p : params_) {
    const LocalParam& lp = p.local;
    ckpt::Slice slice{lp.offset, lp.len};
    TSR_RETURN_IF_ERROR(reg.add_host_tensor(lp.info.name, hal::DType::kF32, lp.info.shape, slice,
                                            p.value(), replicated));
    if (!p.adam_m.empty()) {
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(lp.info.name + ".adam_m", hal::DType::kF32,
                                              lp.info.shape, slice, p.adam_m.data(), replicated));
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(lp.info.name + ".adam_v", hal::DType::kF32,
                                              lp.info.shape, slice, p.adam_v.data(), replicated));
    }
  }
  if (sync_ != nullptr && layout_.plan.zero == 1) {
    // ZeRO-1: each DP rank holds its shard of the Adam moments: one contiguous range of the
    // flattened local (TP) slice of each parameter it owns part of.
    size_t k = 0;
    for (const overlap::ShardSegment& s : sync_->shard_segments()) {
      const Param& p = params_[size_t(s.param)];
      const std::string name = p.local.info.name + ".tp" + std::to_string(layout_.tp_index);
      ckpt::Slice slice{{int64_t(s.param_offset)}, {int64_t(s.count)}};
      const std::vector<int64_t> shape{p.count()};
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(name + ".zero_m", hal::DType::kF32, shape, slice,
                                              zero_m_.data() + k));
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(name + ".zero_v", hal::DType::kF32, shape, slice,
                                              zero_v_.data() + k));
      k += s.count;
    }
  }
  return Status();
}

Status Trainer::init_params() {
  const uint64_t seed = options_.seed;
  for (const LocalParam& lp : local_params(layout_, options_.model)) {
    Param p;
    p.local = lp;
    const size_t bytes = size_t(lp.elements()) * sizeof(float);
    TSR_ASSIGN_OR_RETURN(p.data, device_->allocate(bytes));
    TSR_ASSIGN_OR_RETURN(p.grad, device_->allocate(bytes));
    fill_initial(lp, seed, p.value());
    std::memset(p.gradient(), 0, bytes);
    params_.push_back(std::move(p));
  }
  return Status();
}

Status Trainer::build_communicators(std::shared_ptr<coll::Bootstrap> bootstrap) {
  TSR_ASSIGN_OR_RETURN(world_, coll::Communicator::create(std::move(bootstrap), *device_));
  const TrainPlan& p = layout_.plan;
  const Layout& l = layout_;
  // The same splits in the same order on every rank (collective over the world).
  if (p.tp > 1) {
    TSR_ASSIGN_OR_RETURN(tp_, world_->split(l.dp_index + p.dp * l.pp_index, l.tp_index));
  }
  if (p.dp > 1) {
    TSR_ASSIGN_OR_RETURN(dp_, world_->split(l.tp_index + p.tp * l.pp_index, l.dp_index));
  }
  if (p.pp > 1) {
    TSR_ASSIGN_OR_RETURN(pp_, world_->split(l.tp_index + p.tp * l.dp_index, l.pp_index));
  }
  return Status();
}

Status Trainer::build_grad_sync() {
  zero_m_.clear();
  zero_v_.clear();
  const bool sharded = layout_.plan.zero == 1 && layout_.plan.dp > 1;
  for (Param& p : params_) {
    if (!sharded) {
      p.adam_m.resize(size_t(p.count()), 0.0f);  // kept when rebuilt after a failure
      p.adam_v.resize(size_t(p.count()), 0.0f);
    } else {
      p.adam_m.clear();
      p.adam_v.clear();
    }
  }
  if (layout_.plan.dp == 1) return Status();
  overlap::GradSyncOptions o;
  o.mode = sharded ? overlap::SyncMode::kShardedOptimizer : overlap::SyncMode::kAllReduce;
  o.reduction = overlap::Reduction::kAverage;
  o.bucket_bytes = options_.bucket_bytes;
  // One trace per DP group member: the engine names files by its (DP) rank, so the group goes
  // into the stem: trace.json -> trace.g<group>.rank<r>.json.
  std::string trace = options_.trace_path;
  if (trace.empty()) {
    const char* env = std::getenv("TESSERA_TRACE");
    trace = env != nullptr ? env : "";
  }
  if (!trace.empty()) {
    const size_t dot = trace.rfind('.'), slash = trace.rfind('/');
    const size_t at = dot != std::string::npos && (slash == std::string::npos || dot > slash)
                          ? dot
                          : trace.size();
    trace.insert(at, ".g" + std::to_string(layout_.tp_index + layout_.plan.tp * layout_.pp_index));
  }
  o.trace_path = trace;
  TSR_ASSIGN_OR_RETURN(sync_, overlap::GradSync::create(dp_, *device_, o));
  for (Param& p : params_) {
    TSR_ASSIGN_OR_RETURN(p.sync_index,
                         sync_->add_parameter(p.local.info.name, p.value(), p.gradient(),
                                              size_t(p.count()), hal::DType::kF32));
  }
  sync_->buckets();  // collective over the DP group: forms the buckets and the shard map
  if (sharded) {
    zero_m_.assign(sync_->shard_elements(), 0.0f);
    zero_v_.assign(sync_->shard_elements(), 0.0f);
  }
  return Status();
}

void Trainer::abort_communication(const std::string& reason) {
  for (auto* c : {&tp_, &dp_, &pp_, &world_}) {
    if (*c) (*c)->abort(reason);
  }
  sync_.reset();
  tp_.reset();
  dp_.reset();
  pp_.reset();
  world_.reset();
}

Status Trainer::rebuild_communication(std::shared_ptr<coll::Bootstrap> bootstrap) {
  // ZeRO-1 moments survive a rebuild: same DP size and buckets give the same shard map.
  std::vector<float> m = std::move(zero_m_), v = std::move(zero_v_);
  TSR_RETURN_IF_ERROR(build_communicators(std::move(bootstrap)));
  TSR_RETURN_IF_ERROR(build_grad_sync());
  if (!m.empty()) {
    if (m.size() != zero_m_.size()) {
      return internal_error("rank " + std::to_string(rank()) +
                            ": ZeRO-1 shard changed size across a rebuild");
    }
    zero_m_ = std::move(m);
    zero_v_ = std::move(v);
  }
  return Status();
}

Param& Trainer::param(int block, ParamKind kind) {
  for (Param& p : params_) {
    if (p.local.info.block == block && p.local.info.kind == kind) return p;
  }
  // Unreachable: the schedule only asks for blocks of this rank's stage.
  TSR_LOG(kError, "trainer") << "rank " << layout_.rank << ": no parameter for block " << block
                             << " kind " << int(kind);
  std::abort();
}

Status Trainer::tp_allreduce(float* data, int64_t count, StepReport* report) {
  if (!tp_) return Status();
  const double t0 = now_s();
  Status s = tp_->allreduce(data, data, size_t(count), hal::DType::kF32, hal::ReduceOp::kSum);
  report->tp_comm_s += now_s() - t0;
  return s.with_context("rank " + std::to_string(layout_.rank) + ": TP allreduce");
}

Status Trainer::pp_send(const float* data, int64_t count, int peer_stage, StepReport* report) {
  const double t0 = now_s();
  Status s = pp_->send(data, size_t(count), hal::DType::kF32, peer_stage);
  report->pp_comm_s += now_s() - t0;
  return s.with_context("rank " + std::to_string(layout_.rank) + ": pipeline send to stage " +
                        std::to_string(peer_stage));
}

Status Trainer::pp_recv(float* data, int64_t count, int peer_stage, StepReport* report) {
  const double t0 = now_s();
  Status s = pp_->recv(data, size_t(count), hal::DType::kF32, peer_stage);
  report->pp_comm_s += now_s() - t0;
  return s.with_context("rank " + std::to_string(layout_.rank) + ": pipeline receive from stage " +
                        std::to_string(peer_stage));
}

Result<StepReport> Trainer::train_step(int64_t step) {
  StepReport report;
  report.step = step;
  const double t0 = now_s();
  for (Param& p : params_) std::memset(p.gradient(), 0, size_t(p.count()) * sizeof(float));
  double loss_sum = 0;
  TSR_RETURN_IF_ERROR(run_schedule(step, &report, &loss_sum));
  if (sync_) {
    auto stats = sync_->finish();
    if (!stats.ok()) {
      return stats.status().with_context("rank " + std::to_string(layout_.rank) +
                                         ": gradient sync of step " + std::to_string(step));
    }
    report.dp_comm_s = stats->comm_seconds;
    report.dp_exposed_s = stats->exposed_seconds;
    report.overlap_ratio = stats->overlap_ratio;
    report.dp_bytes = stats->payload_bytes;
  }
  TSR_RETURN_IF_ERROR(optimizer_step(step, &report));
  // The loss over the global batch: the last stage's TP rank 0 of each DP rank contributes.
  Status s = world_->allreduce(&loss_sum, &loss_sum, 1, hal::DType::kF64, hal::ReduceOp::kSum);
  if (!s.ok()) return s.with_context("rank " + std::to_string(layout_.rank) + ": loss allreduce");
  report.loss = loss_sum / double(options_.global_batch);
  report.seconds = now_s() - t0;
  report.compute_s =
      std::max(0.0, report.seconds - report.tp_comm_s - report.pp_comm_s - report.dp_exposed_s);
  return report;
}

Status Trainer::optimizer_step(int64_t step, StepReport* report) {
  const int64_t t = step + 1;
  const bool sharded = sync_ && layout_.plan.zero == 1;
  if (!sharded) {
    for (Param& p : params_) {
      adam_update(p.value(), p.gradient(), p.adam_m.data(), p.adam_v.data(), p.count(),
                  options_.adam, t);
    }
    return Status();
  }
  size_t k = 0;
  for (const overlap::ShardSegment& seg : sync_->shard_segments()) {
    adam_update(static_cast<float*>(seg.data), static_cast<const float*>(seg.grad),
                zero_m_.data() + k, zero_v_.data() + k, int64_t(seg.count), options_.adam, t);
    k += seg.count;
  }
  const double t0 = now_s();
  TSR_RETURN_IF_ERROR(sync_->gather_parameters(nullptr).with_context("ZeRO-1 parameter gather"));
  TSR_RETURN_IF_ERROR(sync_->wait_parameters().with_context("ZeRO-1 parameter gather"));
  report->dp_exposed_s += now_s() - t0;
  return Status();
}

}  // namespace tessera::trainer
