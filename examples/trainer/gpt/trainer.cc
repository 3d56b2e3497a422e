#include "trainer.h"

namespace tessera::gpt {

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
  TSR_ASSIGN_OR_RETURN(
      std::unique_ptr<GptModel> model,
      GptModel::create(device, config, std::move(kernels), std::move(groups), options.act,
                       options.micro_batch, options.seq, options.recompute));
  TSR_ASSIGN_OR_RETURN(AdamW adamw, AdamW::create(device, model->params().layout(), options.adamw));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer scalars, device.allocate(2 * sizeof(double)));
  hal::DeviceBuffer wire;
  if (options.grad_comm == DType::kBF16 && model->groups().dp_size() > 1) {
    TSR_ASSIGN_OR_RETURN(wire, device.allocate(model->params().layout().total * 2));
  }
  return std::unique_ptr<GptTrainer>(new GptTrainer(std::move(model), std::move(adamw), options,
                                                    std::move(scalars), std::move(wire)));
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
  if (!wire_) {
    return allreduce_on(g.dp, s, params.grad_base(), n, DType::kF32, ReduceOp::kSum, "gradients");
  }
  TSR_RETURN_IF_ERROR(s.cast(wire_.data(), DType::kBF16, params.grad_base(), DType::kF32, n));
  TSR_RETURN_IF_ERROR(
      allreduce_on(g.dp, s, wire_.data(), n, DType::kBF16, ReduceOp::kSum, "bf16 gradients"));
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
  for (int64_t j = 0; j < options_.micro_batches; ++j) {
    const uint64_t first = uint64_t(step_) * global + uint64_t((j * dp + g.dp_rank()) * B);
    TSR_ASSIGN_OR_RETURN(StepLoss l, model_->forward(s, corpus_.batch(first, B, options_.seq)));
    TSR_RETURN_IF_ERROR(model_->backward(s, weight));
    loss += l.total();
    xent += l.xent;
  }
  TSR_RETURN_IF_ERROR(allreduce_grads(s));
  TSR_ASSIGN_OR_RETURN(double norm, adamw_.step(s, params, model_->kernels(), g));
  TSR_RETURN_IF_ERROR(s.synchronize());
  const double n = double(options_.micro_batches);
  TSR_ASSIGN_OR_RETURN(std::vector<double> mean, dp_mean(s, {loss / n, xent / n}));
  ++step_;
  return StepResult{step_, mean[0], mean[1], norm, scheduled_lr(options_.adamw, step_)};
}

}  // namespace tessera::gpt
