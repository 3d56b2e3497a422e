#include "trainer.h"

#include "ep.h"

namespace tessera::gpt {
namespace {

// What pp > 1 does not cover yet, refused by name before anything is allocated. Tied embeddings
// and MoE run under pp (tests/gpt/pipeline_test.cc); not yet verified with ZeRO (the tied
// embedding's gradient sum runs on the whole gradient, before any reduce-scatter). ep under pp
// runs (tests/gpt/ep_pipeline_test.cc); ZeRO with ep is refused in GptTrainer::create.
Status check_pipeline(const GptConfig& config, const TrainOptions& options,
                      const ParallelGroups& groups) {
  if (groups.pp_size() == 1 || options.zero == 0) return Status();
  if (!config.tied && !config.moe()) return Status();
  return invalid_argument("GPT trainer: " + config.name + ": pp " +
                          std::to_string(groups.pp_size()) + " with " +
                          (config.tied ? "tied embeddings" : "experts (MoE)") +
                          " and zero=" + std::to_string(options.zero) + " is not supported yet");
}

}  // namespace

GptTrainer::GptTrainer(std::unique_ptr<GptModel> model, AdamW adamw, TrainOptions options,
                       hal::DeviceBuffer scalars, hal::DeviceBuffer wire)
    : model_(std::move(model)),
      adamw_(std::move(adamw)),
      options_(options),
      corpus_(model_->config().vocab, options.data_seed),
      scalars_(std::move(scalars)),
      wire_(std::move(wire)) {}

Result<std::unique_ptr<GptTrainer>> GptTrainer::create(const hal::Device& device,
                                                       const GptConfig& config, GptKernels kernels,
                                                       ParallelGroups groups,
                                                       TrainOptions options) {
  if (options.micro_batches < 1) {
    return invalid_argument("GPT trainer: micro_batches must be at least 1");
  }
  if (options.grad_comm != DType::kF32 && options.grad_comm != DType::kBF16) {
    return invalid_argument("GPT trainer: grad_comm must be f32 or bf16");
  }
  // Before the model (which shards its buffers for options.zero): what ZeRO cannot shard yet.
  if (options.zero > 0 && groups.ep_size() > 1) {
    // Under ep the expert tensors leave their blocks' units (ep.h).
    return invalid_argument("GPT trainer: zero=" + std::to_string(options.zero) +
                            " with expert parallelism ep " + std::to_string(groups.ep_size()) +
                            " is not supported yet (the shards would cut across expert groups)");
  }
  if (options.zero > 0 && options.grad_comm != DType::kF32) {
    return invalid_argument("GPT trainer: zero=" + std::to_string(options.zero) +
                            " needs grad_comm f32 (bf16 on the wire is not sharded yet)");
  }
  TSR_RETURN_IF_ERROR(check_loss_scale(options.loss_scale));
  TSR_RETURN_IF_ERROR(check_pipeline(config, options, groups));
  if (options.vp > 1 && (options.zero > 0 || options.overlap)) {
    // The ZeRO snapshot (checkpoint.h) names a shard by tp, pp, dp and stage, not vp: a vp run's
    // shards would load into a plain pp run's of the same name.
    return invalid_argument(
        "GPT trainer: vp " + std::to_string(options.vp) + " with " +
        (options.zero > 0 ? "zero=" + std::to_string(options.zero) : "overlap") +
        " is not supported yet");
  }
  // This trainer's own timers (the caller's groups may serve another trainer).
  groups.tp_timer = groups.tp_size() > 1 ? std::make_shared<CommTimer>() : nullptr;
  groups.pp_timer = groups.pp_size() > 1 ? std::make_shared<CommTimer>() : nullptr;
  TSR_ASSIGN_OR_RETURN(
      std::unique_ptr<GptModel> model,
      GptModel::create(device, config, std::move(kernels), std::move(groups), options.act,
                       options.micro_batch, options.seq, options.recompute, options.zero,
                       options.sp, options.vp, options.tp_comm_overlap));
  TSR_ASSIGN_OR_RETURN(AdamW adamw, AdamW::create(device, model->params().layout(), options.adamw));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer scalars, device.allocate(2 * sizeof(double)));
  hal::DeviceBuffer wire;
  // With --overlap the engine's bf16 codec holds the wire copy (GradOverlap::bytes).
  if (options.grad_comm == DType::kBF16 && model->groups().dp_size() > 1 && !options.overlap) {
    TSR_ASSIGN_OR_RETURN(wire, device.allocate(model->params().layout().total * 2));
  }
  auto trainer = std::unique_ptr<GptTrainer>(new GptTrainer(
      std::move(model), std::move(adamw), options, std::move(scalars), std::move(wire)));
  if (trainer->model_->groups().pp_size() > 1) {
    TSR_ASSIGN_OR_RETURN(Pipeline pipeline,
                         Pipeline::create(device, *trainer->model_, options.micro_batches));
    trainer->pipeline_ = std::make_unique<Pipeline>(std::move(pipeline));
  }
  trainer->device_ = &device;
  trainer->scaler_ = LossScaler(options.loss_scale);
  if (options.overlap && trainer->model_->groups().dp_size() > 1 && options.zero >= 2) {
    // ZeRO-2/3's own reduce-scatters and gathers on a communication stream (zero.h, "Overlap").
    TSR_RETURN_IF_ERROR(trainer->model_->zero()->enable_overlap(device));
  } else if (options.overlap && trainer->model_->groups().dp_size() > 1) {
    GptModel& m = *trainer->model_;
    GradOverlapOptions o;
    o.bucket_bytes = options.overlap_bucket_bytes;
    o.wire = options.grad_comm;
    o.defer_embedding = m.groups().pp_size() > 1 && config.tied;  // Pipeline::run sums it first
    TSR_ASSIGN_OR_RETURN(trainer->overlap_,
                         GradOverlap::create(device, m.groups(), m.params(), config.layers, o));
    m.set_grads_done([o = trainer->overlap_.get()](const hal::Stream& s, Part part, int layer) {
      return o->part_done(s, part, layer);
    });
  }
  return trainer;
}

Status GptTrainer::init(const hal::Stream& stream) {
  scaler_ = LossScaler(options_.loss_scale);  // a fresh start: no skips, the initial scale
  return model_->params().init(stream, options_.seed);
}

Result<std::vector<double>> GptTrainer::dp_mean(const hal::Stream& s, std::vector<double> values) {
  const ParallelGroups& g = model_->groups();
  if (g.dp_size() == 1) return values;
  TSR_RETURN_IF_ERROR(upload(s, scalars_.data(), values));
  TSR_RETURN_IF_ERROR(allreduce_on(g.dp, s, scalars_.data(), values.size(), DType::kF64,
                                   ReduceOp::kSum, "step losses"));
  TSR_ASSIGN_OR_RETURN(values, download<double>(s, scalars_.data(), values.size()));
  for (double& v : values) v /= double(g.dp_size());
  return values;
}

// Every rank's gradient already carries its 1/(micro_batches * dp) share: a sum is the mean.
Status GptTrainer::allreduce_grads(const hal::Stream& s) {
  const ParallelGroups& g = model_->groups();
  const Params& params = model_->params();
  const uint64_t n = params.layout().total;
  if (overlap_) return overlap_->finish();  // launched as the backward went (zero 0 or 1)
  if (ZeroEngine* zero = model_->zero()) return zero->reduce(s);
  if (!wire_) {
    return allreduce_gradients(g, s, params.layout(), params.grad_base(), DType::kF32, "gradients");
  }
  TSR_RETURN_IF_ERROR(s.cast(wire_.data(), DType::kBF16, params.grad_base(), DType::kF32, n));
  TSR_RETURN_IF_ERROR(
      allreduce_gradients(g, s, params.layout(), wire_.data(), DType::kBF16, "bf16 gradients"));
  return s.cast(params.grad_base(), DType::kF32, wire_.data(), DType::kBF16, n);
}

Result<StepResult> GptTrainer::step(const hal::Stream& s) {
  const ParallelGroups& g = model_->groups();
  Params& params = model_->params();
  const int64_t B = options_.micro_batch, dp = g.dp_size();
  const uint64_t global = uint64_t(B * dp * options_.micro_batches);
  // The loss's weight in the step, times the loss scale (1 when off: loss_scale.h).
  const float weight = 1.0f / float(options_.micro_batches * dp) * float(scaler_.scale());
  TSR_RETURN_IF_ERROR(params.zero_grads(s));
  if (overlap_) overlap_->begin_step(options_.micro_batches);
  for (CommTimer* timer : {g.tp_timer.get(), g.pp_timer.get()}) {
    if (timer) timer->begin_step();
  }
  double loss = 0, xent = 0;
  if (pipeline_) {
    auto batch_of = [&](int64_t j) {
      const uint64_t first = uint64_t(step_) * global + uint64_t((j * dp + g.dp_rank()) * B);
      return corpus_.batch(first, B, options_.seq);
    };
    TSR_ASSIGN_OR_RETURN(StepLoss l,
                         pipeline_->run(s, *model_, options_.micro_batches, batch_of, weight));
    loss = l.total();
    xent = l.xent;
    if (overlap_) TSR_RETURN_IF_ERROR(overlap_->mark_deferred(s));  // after the tied sum
  }
  for (int64_t j = 0; j < (pipeline_ ? 0 : options_.micro_batches); ++j) {
    const uint64_t first = uint64_t(step_) * global + uint64_t((j * dp + g.dp_rank()) * B);
    TSR_ASSIGN_OR_RETURN(StepLoss l, model_->forward(s, corpus_.batch(first, B, options_.seq)));
    TSR_RETURN_IF_ERROR(model_->backward(s, weight));
    loss += l.total();
    xent += l.xent;
  }
  TSR_RETURN_IF_ERROR(allreduce_grads(s));
  const double loss_scale = scaler_.scale();
  TSR_ASSIGN_OR_RETURN(AdamW::Outcome update,
                       adamw_.scaled_step(s, params, model_->kernels(), g, loss_scale,
                                          options_.loss_scale.enabled()));
  scaler_.update(!update.skipped);
  if (ZeroEngine* zero = model_->zero()) TSR_RETURN_IF_ERROR(zero->finish_step(s));
  TSR_RETURN_IF_ERROR(s.synchronize());
  const double n = double(options_.micro_batches);
  TSR_ASSIGN_OR_RETURN(std::vector<double> mean, dp_mean(s, {loss / n, xent / n}));
  ++step_;
  // The schedule follows the applied updates; a skipped step reports the rate it did not apply.
  StepResult r{step_, mean[0], mean[1], update.norm,
               scheduled_lr(options_.adamw, adamw_.steps() + (update.skipped ? 1 : 0))};
  r.loss_scale = loss_scale;
  r.skipped = update.skipped;
  if (g.tp_timer) {
    TSR_ASSIGN_OR_RETURN(r.tp_comm_seconds, g.tp_timer->seconds());
  }
  if (g.pp_timer) {
    TSR_ASSIGN_OR_RETURN(r.pp_comm_seconds, g.pp_timer->seconds());
  }
  if (overlap_) {
    r.comm_seconds = overlap_->last_step().comm_seconds;
    r.exposed_comm_seconds = overlap_->last_step().exposed_seconds;
  } else if (ZeroEngine* zero = model_->zero(); zero && zero->overlapped()) {
    r.comm_seconds = zero->comm_seconds();
    r.exposed_comm_seconds = zero->exposed_seconds();
  }
  return r;
}

Status GptTrainer::resume_at(const hal::Stream& s, int64_t step) {
  if (step < 0) return invalid_argument("GPT trainer: resume at step " + std::to_string(step));
  Params& params = model_->params();
  if (ZeroEngine* zero = model_->zero()) {
    // AdamW writes the working copy of the rank's slices; finish_step spreads them (zero 1/2)
    // or forgets what zero 3 had gathered.
    for (const ShardPiece& piece : params.shards().pieces) {
      TSR_RETURN_IF_ERROR(s.cast(params.shard_work(piece), params.act(),
                                 params.master_base() + piece.at, DType::kF32, piece.count));
    }
    TSR_RETURN_IF_ERROR(zero->finish_step(s));
  } else {
    TSR_RETURN_IF_ERROR(params.refresh_work(s));
  }
  TSR_RETURN_IF_ERROR(params.zero_grads(s));
  TSR_RETURN_IF_ERROR(s.synchronize());
  if (scaler_.skipped_steps() > step) {
    return invalid_argument("GPT trainer: resume at step " + std::to_string(step) + " with " +
                            std::to_string(scaler_.skipped_steps()) + " skipped steps");
  }
  step_ = step;
  adamw_.set_steps(step - scaler_.skipped_steps());
  return Status();
}

Result<std::vector<float>> GptTrainer::download_master(const hal::Stream& stream) const {
  const Params& params = model_->params();
  if (!model_->zero()) return params.download_master(stream);
  return model_->zero()->gather_master(*device_, stream);
}

GptTrainer::Memory GptTrainer::memory() const {
  Memory m;
  m.params = model_->params().bytes();
  if (model_->zero()) m.params.grad += model_->zero()->overlap_bytes();  // zero 2 --overlap
  m.optimizer = adamw_.scratch_bytes();
  m.activations = model_->activation_bytes();
  m.trainer = scalars_.size() + wire_.size() + (overlap_ ? overlap_->bytes() : 0);
  m.pipeline = pipeline_ ? pipeline_->bytes() : 0;
  return m;
}

}  // namespace tessera::gpt
