#include "trainer.h"

#include "ep.h"

namespace tessera::gpt {
namespace {

// What --overlap does not cover yet, refused by name before anything is allocated.
Status check_overlap(const TrainOptions& options, const ParallelGroups& groups) {
  if (!options.overlap) return Status();
  auto refuse = [](const std::string& what, const char* why) {
    return invalid_argument("GPT trainer: overlap with " + what + " is not supported yet (" + why +
                            ")");
  };
  if (options.zero > 0) {
    return refuse("zero=" + std::to_string(options.zero), "ZeRO reduces through its own hooks");
  }
  if (options.grad_comm != DType::kF32) return refuse("grad_comm bf16", "f32 gradients only");
  if (groups.ep_size() > 1) {
    return refuse("expert parallelism ep " + std::to_string(groups.ep_size()),
                  "expert gradients sum over another group");
  }
  if (groups.pp_size() > 1) {
    return refuse("pipeline parallelism pp " + std::to_string(groups.pp_size()),
                  "1F1B interleaves the micro-batches' backwards");
  }
  return Status();
}

// What pp > 1 does not cover yet, refused by name before anything is allocated. Tied embeddings
// and MoE run under pp (tests/gpt/pipeline_test.cc); not yet verified with ZeRO (the tied
// embedding's gradient sum runs on the whole gradient, before any reduce-scatter); ep under pp
// is refused by the model (GptModel::create).
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
  TSR_RETURN_IF_ERROR(check_overlap(options, groups));
  TSR_RETURN_IF_ERROR(check_pipeline(config, options, groups));
  TSR_ASSIGN_OR_RETURN(
      std::unique_ptr<GptModel> model,
      GptModel::create(device, config, std::move(kernels), std::move(groups), options.act,
                       options.micro_batch, options.seq, options.recompute, options.zero));
  TSR_ASSIGN_OR_RETURN(AdamW adamw, AdamW::create(device, model->params().layout(), options.adamw));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer scalars, device.allocate(2 * sizeof(double)));
  hal::DeviceBuffer wire;
  if (options.grad_comm == DType::kBF16 && model->groups().dp_size() > 1) {
    TSR_ASSIGN_OR_RETURN(wire, device.allocate(model->params().layout().total * 2));
  }
  auto trainer = std::unique_ptr<GptTrainer>(new GptTrainer(
      std::move(model), std::move(adamw), options, std::move(scalars), std::move(wire)));
  if (trainer->model_->groups().pp_size() > 1) {
    TSR_ASSIGN_OR_RETURN(Pipeline pipeline, Pipeline::create(device, *trainer->model_));
    trainer->pipeline_ = std::make_unique<Pipeline>(std::move(pipeline));
  }
  trainer->device_ = &device;
  if (options.overlap && trainer->model_->groups().dp_size() > 1) {
    GptModel& m = *trainer->model_;
    TSR_ASSIGN_OR_RETURN(trainer->overlap_,
                         GradOverlap::create(device, m.groups(), m.params(), config.layers,
                                             options.overlap_bucket_bytes));
    m.set_grads_done([o = trainer->overlap_.get()](const hal::Stream& s, Part part, int layer) {
      return o->part_done(s, part, layer);
    });
  }
  return trainer;
}

Status GptTrainer::init(const hal::Stream& stream) {
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
  if (ZeroEngine* zero = model_->zero()) return zero->reduce(s);
  if (overlap_) return overlap_->finish();  // launched as the backward went
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
  const float weight = 1.0f / float(options_.micro_batches * dp);
  TSR_RETURN_IF_ERROR(params.zero_grads(s));
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
  }
  for (int64_t j = 0; j < (pipeline_ ? 0 : options_.micro_batches); ++j) {
    if (overlap_) overlap_->set_last_micro_batch(j + 1 == options_.micro_batches);
    const uint64_t first = uint64_t(step_) * global + uint64_t((j * dp + g.dp_rank()) * B);
    TSR_ASSIGN_OR_RETURN(StepLoss l, model_->forward(s, corpus_.batch(first, B, options_.seq)));
    TSR_RETURN_IF_ERROR(model_->backward(s, weight));
    loss += l.total();
    xent += l.xent;
  }
  TSR_RETURN_IF_ERROR(allreduce_grads(s));
  TSR_ASSIGN_OR_RETURN(double norm, adamw_.step(s, params, model_->kernels(), g));
  if (ZeroEngine* zero = model_->zero()) TSR_RETURN_IF_ERROR(zero->finish_step(s));
  TSR_RETURN_IF_ERROR(s.synchronize());
  const double n = double(options_.micro_batches);
  TSR_ASSIGN_OR_RETURN(std::vector<double> mean, dp_mean(s, {loss / n, xent / n}));
  ++step_;
  StepResult r{step_, mean[0], mean[1], norm, scheduled_lr(options_.adamw, step_)};
  if (overlap_) {
    r.comm_seconds = overlap_->last_step().comm_seconds;
    r.exposed_comm_seconds = overlap_->last_step().exposed_seconds;
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
  step_ = step;
  adamw_.set_steps(step);
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
  m.optimizer = adamw_.scratch_bytes();
  m.activations = model_->activation_bytes();
  m.trainer = scalars_.size() + wire_.size();
  m.pipeline = pipeline_ ? pipeline_->bytes() : 0;
  return m;
}

}  // namespace tessera::gpt
