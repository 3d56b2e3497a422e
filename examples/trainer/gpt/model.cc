// GptModel: allocation, the forward and backward drivers, and the dense layers (embedding,
// attention, MLP, head and loss). MoE layers are in moe.cc.
#include "model.h"

#include <cmath>

#include "ep.h"
#include "linear.h"

namespace tessera::gpt {

Result<void*> Arena::alloc(uint64_t count, DType dtype) {
  const size_t bytes = std::max<size_t>(count * hal::dtype_size(dtype), 1);
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buffer, device_->allocate(bytes));
  void* p = buffer.data();
  buffers_.push_back(std::move(buffer));
  bytes_ += bytes;
  return p;
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

GptModel::GptModel(const hal::Device& device, GptConfig config, GptKernels kernels,
                   ParallelGroups groups, Params params, StageRange stage, int64_t batch,
                   int64_t seq, Recompute recompute)
    : device_(&device),
      config_(std::move(config)),
      kernels_(std::move(kernels)),
      groups_(std::move(groups)),
      params_(std::move(params)),
      stage_(stage),
      batch_(batch),
      seq_(seq),
      recompute_(recompute),
      arena_(device) {
  const int64_t tp = groups_.tp_size();
  heads_l_ = config_.heads / tp;
  kv_heads_l_ = config_.kv_heads / tp;
  q_l_ = heads_l_ * config_.head_dim;
  kv_l_ = kv_heads_l_ * config_.head_dim;
  ffn_l_ = config_.ffn / tp;
  vocab_l_ = config_.vocab / tp;
  vocab_begin_ = vocab_l_ * groups_.tp_rank();
}

Result<std::unique_ptr<GptModel>> GptModel::create(const hal::Device& device,
                                                   const GptConfig& config, GptKernels kernels,
                                                   ParallelGroups groups, DType act, int64_t batch,
                                                   int64_t seq, Recompute recompute, int zero,
                                                   bool sp, int vp, bool tp_comm_overlap) {
  if (batch <= 0 || seq <= 0) {
    return invalid_argument(config.name + ": micro-batch " + std::to_string(batch) + " x seq " +
                            std::to_string(seq) + " must be positive");
  }
  if (!config.rope() && seq > config.positions) {
    return invalid_argument(config.name + ": seq " + std::to_string(seq) +
                            " exceeds the learned positions " + std::to_string(config.positions));
  }
  if (sp) {
    const int tp = groups.tp_size();
    if (tp == 1) {
      return invalid_argument(config.name +
                              ": sequence parallelism (sp) needs tensor parallelism (tp > 1)");
    }
    if (batch * seq % tp != 0) {
      return invalid_argument(config.name + ": sp: the " + std::to_string(batch * seq) +
                              " tokens of a micro-batch do not split over tp " +
                              std::to_string(tp));
    }
    if (config.moe()) {
      // The router and the expert dispatch (moe.cc) run on every token of the micro-batch.
      return invalid_argument(config.name + ": sp with MoE is not supported yet");
    }
  }
  if (tp_comm_overlap && !sp) {
    return invalid_argument(config.name +
                            ": tp_comm_overlap needs sequence parallelism (sp): the collective "
                            "matmuls gather and reduce-scatter token slices");
  }
  if (tp_comm_overlap && act != DType::kF32) {
    return invalid_argument(config.name + ": tp_comm_overlap needs f32 activations (act " +
                            std::string(hal::dtype_name(act)) +
                            "): the collective matmuls are f32");
  }
  TSR_ASSIGN_OR_RETURN(ParamLayout layout, make_layout(config, groups.tp_rank(), groups.tp_size()));
  if (vp < 1 || (vp > 1 && groups.pp_size() == 1)) {
    return invalid_argument(config.name + ": vp " + std::to_string(vp) +
                            " (virtual pipeline stages) must be 1, or above 1 only with pp > 1");
  }
  if (vp > 1 && groups.ep_size() > 1) {
    return invalid_argument(config.name + ": vp " + std::to_string(vp) +
                            " with expert parallelism ep " + std::to_string(groups.ep_size()) +
                            " is not supported yet");
  }
  // The stage's chunks (one without vp) and their span (stage()).
  std::vector<StageRange> chunks;
  if (vp == 1) {
    TSR_ASSIGN_OR_RETURN(StageRange range,
                         stage_range(config.layers, groups.pp_rank(), groups.pp_size()));
    chunks.push_back(range);
  } else {
    TSR_ASSIGN_OR_RETURN(chunks,
                         stage_chunks(config.layers, groups.pp_rank(), groups.pp_size(), vp));
  }
  StageRange stage{chunks.front().first_layer, chunks.back().end_layer, false, false};
  for (const StageRange& c : chunks) {
    stage.first = stage.first || c.first;
    stage.last = stage.last || c.last;
  }
  if (groups.pp_size() > 1) layout = stage_layout(layout, chunks);
  // Under pp, the stage's experts only (ep groups are per stage: make_groups).
  if (groups.ep_size() > 1) {
    TSR_ASSIGN_OR_RETURN(layout, expert_layout(config, layout, groups.ep_rank(), groups.ep_size()));
  }
  TSR_ASSIGN_OR_RETURN(ZeroPlan plan, make_zero_plan(zero, layout, config.layers, groups.dp_rank(),
                                                     groups.dp_size()));
  const Params::ShardOptions options = plan.options();
  TSR_ASSIGN_OR_RETURN(
      Params params,
      plan.level > 0 ? Params::create_sharded(device, std::move(layout), act, plan.shards, options)
                     : Params::create(device, std::move(layout), act));
  std::unique_ptr<GptModel> model(new GptModel(device, config, std::move(kernels),
                                               std::move(groups), std::move(params), stage, batch,
                                               seq, recompute));
  if (plan.level > 0) {
    model->zero_ = std::make_unique<ZeroEngine>(std::move(plan), model->groups_, model->params_,
                                                model->kernels_);
  }
  model->sp_ = sp;
  if (tp_comm_overlap) {
    auto cm = overlap::CollectiveMatmul::create(model->groups_.tp, device);
    if (!cm.ok()) return cm.status().with_context(config.name + ": tp_comm_overlap");
    model->tp_matmul_ = std::move(cm.value());
  }
  model->chunks_ = std::move(chunks);
  TSR_RETURN_IF_ERROR(model->allocate());
  return model;
}

Status GptModel::allocate() {
  const DType A = act(), F = DType::kF32, I = DType::kI32;
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden);
  // The residual stream and norms: this rank's token slice under sequence parallelism.
  const uint64_t Tl = uint64_t(local_tokens());
  const uint64_t k = uint64_t(std::max<int64_t>(config_.top_k, 1)), E = uint64_t(config_.experts);
  const uint64_t rows_att = uint64_t(batch_ * heads_l_ * seq_);
  // MoE expert rows: T*k, or under ep E experts x capacity T (moe.cc).
  const uint64_t moe_rows = groups_.ep_size() > 1 ? E * T : T * k;
  const uint64_t ffn_rows = config_.moe() ? moe_rows : T;
  auto alloc = [&](uint64_t n, DType d) { return arena_.alloc(n, d); };
#define TSR_GPT_ALLOC(lhs, n, d, type)               \
  do {                                               \
    TSR_ASSIGN_OR_RETURN(void* p_, alloc((n), (d))); \
    lhs = static_cast<type>(p_);                     \
  } while (0)
  TSR_GPT_ALLOC(a_.tokens, T, I, int32_t*);
  TSR_GPT_ALLOC(a_.targets, T, I, int32_t*);
  // The residual states and blocks of this stage's layers only (all of them without pp).
  a_.resid.assign(size_t(config_.layers + 1), nullptr);
  // (Under vp the inputs and outputs of each of its chunks.)
  for (int l = 0; l <= config_.layers; ++l) {
    if (holds_layer(l) || holds_layer(l - 1)) TSR_GPT_ALLOC(a_.resid[size_t(l)], Tl * h, A, void*);
  }
  a_.blocks.resize(full_recompute() ? 1 : size_t(config_.layers));
  for (size_t i = 0; i < a_.blocks.size(); ++i) {
    BlockActivations& b = a_.blocks[i];
    if (!full_recompute() && !holds_layer(int(i))) continue;
    TSR_GPT_ALLOC(b.y1, Tl * h, A, void*);
    TSR_GPT_ALLOC(b.mean1, Tl, F, float*);
    TSR_GPT_ALLOC(b.rstd1, Tl, F, float*);
    TSR_GPT_ALLOC(b.q, T * q_l_, A, void*);
    TSR_GPT_ALLOC(b.k, T * kv_l_, A, void*);
    TSR_GPT_ALLOC(b.v, T * kv_l_, A, void*);
    TSR_GPT_ALLOC(b.att, T * q_l_, A, void*);
    if (recompute_ != Recompute::kSelective) TSR_GPT_ALLOC(b.lse, rows_att, F, float*);
    TSR_GPT_ALLOC(b.mid, Tl * h, A, void*);
    TSR_GPT_ALLOC(b.y2, Tl * h, A, void*);
    TSR_GPT_ALLOC(b.mean2, Tl, F, float*);
    TSR_GPT_ALLOC(b.rstd2, Tl, F, float*);
    if (config_.moe()) {
      MoeActivations& m = b.moe;
      TSR_GPT_ALLOC(m.logits, T * E, F, float*);
      TSR_GPT_ALLOC(m.probs, T * E, F, float*);
      TSR_GPT_ALLOC(m.top_index, T * k, I, int32_t*);
      TSR_GPT_ALLOC(m.top_weight, T * k, F, float*);
      TSR_GPT_ALLOC(m.slot, T * k, I, int32_t*);
      TSR_GPT_ALLOC(m.gather, moe_rows, I, int32_t*);
      TSR_GPT_ALLOC(m.fraction, E, F, float*);
      TSR_GPT_ALLOC(m.xe, moe_rows * h, A, void*);
      if (config_.swiglu) TSR_GPT_ALLOC(m.gate, moe_rows * ffn_l_, A, void*);
      TSR_GPT_ALLOC(m.up, moe_rows * ffn_l_, A, void*);
      TSR_GPT_ALLOC(m.act, moe_rows * ffn_l_, A, void*);
      TSR_GPT_ALLOC(m.out, moe_rows * h, A, void*);
    } else {
      if (config_.swiglu) TSR_GPT_ALLOC(b.gate, T * ffn_l_, A, void*);
      TSR_GPT_ALLOC(b.up, T * ffn_l_, A, void*);
      TSR_GPT_ALLOC(b.act, T * ffn_l_, A, void*);
    }
  }
  TSR_GPT_ALLOC(a_.yf, Tl * h, A, void*);
  TSR_GPT_ALLOC(a_.meanf, Tl, F, float*);
  TSR_GPT_ALLOC(a_.rstdf, Tl, F, float*);
  TSR_GPT_ALLOC(a_.logits, T * vocab_l_, F, float*);
  TSR_GPT_ALLOC(a_.row_max, T, F, float*);
  TSR_GPT_ALLOC(a_.sum_exp, T, F, float*);
  TSR_GPT_ALLOC(a_.target_logit, T, F, float*);
  TSR_GPT_ALLOC(a_.loss, T, F, float*);

  TSR_GPT_ALLOC(g_.dx, Tl * h, A, void*);
  TSR_GPT_ALLOC(g_.dy, Tl * h, A, void*);
  if (sp_) {
    TSR_GPT_ALLOC(g_.full_in, T * h, A, void*);
    TSR_GPT_ALLOC(g_.full_grad, T * h, A, void*);
    TSR_GPT_ALLOC(g_.sp_grad, 2 * h, F, float*);
  }
  TSR_GPT_ALLOC(g_.d_att, T * q_l_, A, void*);
  TSR_GPT_ALLOC(g_.dq, T * q_l_, A, void*);
  TSR_GPT_ALLOC(g_.dk, T * kv_l_, A, void*);
  TSR_GPT_ALLOC(g_.dv, T * kv_l_, A, void*);
  TSR_GPT_ALLOC(g_.delta, rows_att, F, float*);
  if (recompute_ == Recompute::kSelective) TSR_GPT_ALLOC(g_.lse, rows_att, F, float*);
  TSR_GPT_ALLOC(g_.dh, ffn_rows * ffn_l_, A, void*);
  TSR_GPT_ALLOC(g_.dgate, ffn_rows * ffn_l_, A, void*);
  TSR_GPT_ALLOC(g_.dup, ffn_rows * ffn_l_, A, void*);
  TSR_GPT_ALLOC(g_.dlogits, T * vocab_l_, A, void*);
  if (config_.moe()) {
    TSR_GPT_ALLOC(g_.de_out, moe_rows * h, A, void*);
    TSR_GPT_ALLOC(g_.dxe, moe_rows * h, A, void*);
    TSR_GPT_ALLOC(g_.dweight, T * k, F, float*);
    TSR_GPT_ALLOC(g_.drouter, T * E, F, float*);
    TSR_GPT_ALLOC(g_.drouter_act, T * E, A, void*);
    if (groups_.ep_size() > 1) TSR_GPT_ALLOC(g_.ep_counts, 2 * E, I, int32_t*);
  }
#undef TSR_GPT_ALLOC
  return Status();
}

Status GptModel::tp_sum(const hal::Stream& s, void* data, uint64_t count, DType dtype,
                        const char* what) {
  return allreduce_on(groups_.tp, s, data, count, dtype, ReduceOp::kSum, what,
                      groups_.tp_timer.get());
}

Status GptModel::sp_gather(const hal::Stream& s, const void* local, void* full, const char* what) {
  return allgather_on(groups_.tp, s, local, full, uint64_t(local_tokens() * config_.hidden), act(),
                      what, groups_.tp_timer.get());
}

Status GptModel::sp_scatter(const hal::Stream& s, const void* full, void* local, const char* what) {
  return reduce_scatter_on(groups_.tp, s, full, local, uint64_t(local_tokens() * config_.hidden),
                           act(), ReduceOp::kSum, what, groups_.tp_timer.get());
}

Status GptModel::row_parallel_sum(const hal::Stream& s, void* partial, void* out,
                                  const char* what) {
  if (sp_) return sp_scatter(s, partial, out, what);
  return tp_sum(s, out, uint64_t(tokens() * config_.hidden), act(), what);
}

Status GptModel::replicated_bias_grad(const hal::Stream& s, const void* dy, int bias) {
  const uint64_t Tl = uint64_t(local_tokens()), h = uint64_t(config_.hidden);
  if (!sp_) return kernels_.bias_grad(s, dy, params_.grad(bias), Tl, h, act_abi());
  const uint32_t f32 = uint32_t(hal::to_abi(DType::kF32));
  TSR_RETURN_IF_ERROR(s.memset(g_.sp_grad, 0, h * sizeof(float)));
  TSR_RETURN_IF_ERROR(kernels_.bias_grad(s, dy, g_.sp_grad, Tl, h, act_abi()));
  TSR_RETURN_IF_ERROR(tp_sum(s, g_.sp_grad, h, DType::kF32, "row-parallel bias gradient (sp)"));
  return kernels_.add(s, params_.grad(bias), g_.sp_grad, params_.grad(bias), h, f32);
}

Status GptModel::norm_forward(const hal::Stream& s, const void* x, int w, int b, void* y,
                              float* mean, float* rstd) {
  return kernels_.norm_forward(s, x, params_.work(w), params_.work(b), y, mean, rstd,
                               uint64_t(local_tokens()), uint64_t(config_.hidden), config_.norm_eps,
                               uint32_t(config_.norm), act_abi());
}

Status GptModel::norm_backward(const hal::Stream& s, const void* dy, const void* x, int w, int b,
                               const float* mean, const float* rstd, void* dx) {
  const uint64_t T = uint64_t(local_tokens()), h = uint64_t(config_.hidden);
  if (!sp_) {
    TSR_RETURN_IF_ERROR(kernels_.norm_backward_params(s, dy, x, mean, rstd, params_.grad(w),
                                                      params_.grad(b), T, h, uint32_t(config_.norm),
                                                      act_abi()));
  } else {
    // This rank's tokens only: the weight (and bias) gradient of its slice into the scratch,
    // summed over tp, then added to the accumulated gradient (which must not be summed again).
    const bool bias = b >= 0 && params_.grad(b) != nullptr;
    const uint64_t n = bias ? 2 * h : h;
    const uint32_t f32 = uint32_t(hal::to_abi(DType::kF32));
    TSR_RETURN_IF_ERROR(s.memset(g_.sp_grad, 0, n * sizeof(float)));
    TSR_RETURN_IF_ERROR(kernels_.norm_backward_params(s, dy, x, mean, rstd, g_.sp_grad,
                                                      bias ? g_.sp_grad + h : nullptr, T, h,
                                                      uint32_t(config_.norm), act_abi()));
    TSR_RETURN_IF_ERROR(tp_sum(s, g_.sp_grad, n, DType::kF32, "norm parameter gradient (sp)"));
    TSR_RETURN_IF_ERROR(kernels_.add(s, params_.grad(w), g_.sp_grad, params_.grad(w), h, f32));
    if (bias) {
      TSR_RETURN_IF_ERROR(
          kernels_.add(s, params_.grad(b), g_.sp_grad + h, params_.grad(b), h, f32));
    }
  }
  return kernels_.norm_backward_input(s, dy, x, params_.work(w), mean, rstd, dx, T, h,
                                      uint32_t(config_.norm), /*accumulate=*/1, act_abi());
}

// ---- forward ------------------------------------------------------------------------------

bool GptModel::holds_layer(int layer) const {
  for (const StageRange& c : chunks_) {
    if (layer >= c.first_layer && layer < c.end_layer) return true;
  }
  return false;
}

Result<const StageRange*> GptModel::chunk_range(int chunk, const char* what) const {
  if (chunk < 0 || chunk >= int(chunks_.size())) {
    return invalid_argument(std::string("GptModel::") + what + ": chunk " + std::to_string(chunk) +
                            " of a stage holding " + std::to_string(chunks_.size()));
  }
  return &chunks_[size_t(chunk)];
}

Status GptModel::load_batch(const hal::Stream& s, const Batch& batch) {
  if (int64_t(batch.tokens.size()) != tokens() || batch.targets.size() != batch.tokens.size()) {
    return invalid_argument("GptModel::load_batch: batch of " +
                            std::to_string(batch.tokens.size()) +
                            " tokens, the model was built for " + std::to_string(tokens()));
  }
  TSR_RETURN_IF_ERROR(s.copy(a_.tokens, batch.tokens.data(), batch.tokens.size() * 4));
  return s.copy(a_.targets, batch.targets.data(), batch.targets.size() * 4);
}

Result<StepLoss> GptModel::forward(const hal::Stream& s, const Batch& batch, int chunk) {
  TSR_ASSIGN_OR_RETURN(const StageRange* range, chunk_range(chunk, "forward"));
  const StageRange& stage = *range;
  TSR_RETURN_IF_ERROR(load_batch(s, batch));
  if (stage.first) {
    TSR_RETURN_IF_ERROR(zero_use(s, Part::kEmbed, 0, Pass::kForward));
    TSR_RETURN_IF_ERROR(embed_forward(s));
  }
  StepLoss loss;
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    TSR_RETURN_IF_ERROR(zero_use(s, Part::kBlock, l, Pass::kForward));
    TSR_RETURN_IF_ERROR(attention_forward(s, l));
    if (config_.moe()) {
      TSR_RETURN_IF_ERROR(moe_forward(s, l));
      loss.aux += config_.router_aux_coef * block(l).moe.aux;
    } else {
      TSR_RETURN_IF_ERROR(mlp_forward(s, l));
    }
  }
  if (!stage.last) {
    TSR_RETURN_IF_ERROR(s.synchronize());
    return loss;
  }
  TSR_RETURN_IF_ERROR(zero_use(s, Part::kHead, 0, Pass::kForward));
  TSR_RETURN_IF_ERROR(head_forward(s));
  TSR_ASSIGN_OR_RETURN(std::vector<float> rows, download<float>(s, a_.loss, size_t(tokens())));
  double sum = 0;
  for (float r : rows) sum += r;
  loss.xent = sum / double(rows.size());
  return loss;
}

Status GptModel::embed_forward(const hal::Stream& s) {
  const ParamLayout& L = params_.layout();
  // Learned positions are replicated: only tp rank 0 adds them, since the partial embeddings
  // are summed over the group.
  // Under sp every token's partial embedding is reduce-scattered to the rank holding its row.
  const void* wpe = groups_.tp_rank() == 0 ? params_.work(L.wpe) : nullptr;
  void* partial = sp_ ? g_.full_in : a_.resid[0];
  TSR_RETURN_IF_ERROR(kernels_.embed_forward(s, a_.tokens, params_.work(L.wte), wpe, partial,
                                             uint64_t(tokens()), uint64_t(config_.hidden),
                                             uint64_t(seq_), vocab_begin_, vocab_l_, act_abi()));
  return row_parallel_sum(s, partial, a_.resid[0], "embedding");
}

Status GptModel::attention_forward(const hal::Stream& s, int layer) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  BlockActivations& b = block(layer);
  const void* x = a_.resid[size_t(layer)];
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden);
  const uint64_t Tl = uint64_t(local_tokens());
  TSR_RETURN_IF_ERROR(norm_forward(s, x, p.norm1_w, p.norm1_b, b.y1, b.mean1, b.rstd1));
  // Under sp the column-parallel GEMMs read every token: the normed slices gathered.
  // Under tp_comm_overlap the gather rides on the Q projection's ring (collective matmul).
  const bool ring = tp_matmul_ != nullptr;
  const void* y1 = sp_ ? g_.full_in : b.y1;
  if (sp_ && !ring) TSR_RETURN_IF_ERROR(sp_gather(s, b.y1, g_.full_in, "attention input (sp)"));
  const struct {
    int w, bias;
    void* out;
    int64_t width;
    int64_t heads;
  } proj[] = {{p.wq, p.bq, b.q, q_l_, heads_l_},
              {p.wk, p.bk, b.k, kv_l_, kv_heads_l_},
              {p.wv, p.bv, b.v, kv_l_, -1}};
  for (const auto& pr : proj) {
    const LinearShape shape{tokens(), config_.hidden, pr.width};
    if (ring && &pr == proj) {
      TSR_RETURN_IF_ERROR(linear_forward_gathered(*tp_matmul_, s, shape, b.y1, params_.work(pr.w),
                                                  g_.full_in, pr.out, act()));
    } else {
      TSR_RETURN_IF_ERROR(linear_forward(s, shape, y1, params_.work(pr.w), pr.out, act(), act()));
    }
    if (pr.bias >= 0) {
      TSR_RETURN_IF_ERROR(
          kernels_.bias_add(s, pr.out, params_.work(pr.bias), T, uint64_t(pr.width), act_abi()));
    }
    if (config_.rope() && pr.heads > 0) {
      TSR_RETURN_IF_ERROR(kernels_.rope(s, pr.out, T, uint64_t(pr.heads),
                                        uint64_t(config_.head_dim), uint64_t(seq_),
                                        config_.rope_theta, 1, act_abi()));
    }
  }
  // Under selective recomputation the log-sum-exp is not kept: written to the shared scratch and
  // overwritten by the next block, then recomputed before this block's backward.
  TSR_RETURN_IF_ERROR(
      attention_core(s, layer, recompute_ == Recompute::kSelective ? g_.lse : b.lse));
  // Row-parallel output projection: partial sums, allreduced (reduce-scattered to this rank's
  // slice under sp, after the gathered input above is consumed), then bias and residual once.
  // Under tp_comm_overlap the GEMM and the reduce-scatter are one ring.
  const LinearShape out_shape{tokens(), q_l_, config_.hidden};
  if (ring) {
    TSR_RETURN_IF_ERROR(linear_forward_scattered(*tp_matmul_, s, out_shape, b.att,
                                                 params_.work(p.wo), b.mid, act()));
  } else {
    void* partial = sp_ ? g_.full_in : b.mid;
    TSR_RETURN_IF_ERROR(
        linear_forward(s, out_shape, b.att, params_.work(p.wo), partial, act(), act()));
    TSR_RETURN_IF_ERROR(row_parallel_sum(s, partial, b.mid, "attention output"));
  }
  if (p.bo >= 0)
    TSR_RETURN_IF_ERROR(kernels_.bias_add(s, b.mid, params_.work(p.bo), Tl, h, act_abi()));
  return kernels_.add(s, b.mid, x, b.mid, Tl * h, act_abi());
}

Status GptModel::attention_core(const hal::Stream& s, int layer, float* lse) {
  BlockActivations& b = block(layer);
  const float scale = 1.0f / std::sqrt(float(config_.head_dim));
  return kernels_.attention_forward(s, b.q, b.k, b.v, b.att, lse, uint64_t(batch_), uint64_t(seq_),
                                    uint64_t(heads_l_), uint64_t(kv_heads_l_),
                                    uint64_t(config_.head_dim), scale, act_abi());
}

Status GptModel::mlp_forward(const hal::Stream& s, int layer) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  BlockActivations& b = block(layer);
  void* out = a_.resid[size_t(layer) + 1];
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden), f = uint64_t(ffn_l_);
  const uint64_t Tl = uint64_t(local_tokens());
  TSR_RETURN_IF_ERROR(norm_forward(s, b.mid, p.norm2_w, p.norm2_b, b.y2, b.mean2, b.rstd2));
  // Under tp_comm_overlap the gather rides on the up projection's ring (collective matmul).
  const bool ring = tp_matmul_ != nullptr;
  const void* y2 = sp_ ? g_.full_in : b.y2;
  if (sp_ && !ring) TSR_RETURN_IF_ERROR(sp_gather(s, b.y2, g_.full_in, "MLP input (sp)"));
  const LinearShape in_shape{tokens(), config_.hidden, ffn_l_};
  if (ring) {
    TSR_RETURN_IF_ERROR(linear_forward_gathered(*tp_matmul_, s, in_shape, b.y2, params_.work(p.up),
                                                g_.full_in, b.up, act()));
  } else {
    TSR_RETURN_IF_ERROR(linear_forward(s, in_shape, y2, params_.work(p.up), b.up, act(), act()));
  }
  if (p.b_up >= 0)
    TSR_RETURN_IF_ERROR(kernels_.bias_add(s, b.up, params_.work(p.b_up), T, f, act_abi()));
  if (config_.swiglu) {
    TSR_RETURN_IF_ERROR(
        linear_forward(s, in_shape, y2, params_.work(p.gate), b.gate, act(), act()));
    TSR_RETURN_IF_ERROR(kernels_.swiglu_forward(s, b.gate, b.up, b.act, T * f, act_abi()));
  } else {
    TSR_RETURN_IF_ERROR(kernels_.gelu_forward(s, b.up, b.act, T * f, act_abi()));
  }
  const LinearShape down_shape{tokens(), ffn_l_, config_.hidden};
  if (ring) {
    TSR_RETURN_IF_ERROR(linear_forward_scattered(*tp_matmul_, s, down_shape, b.act,
                                                 params_.work(p.down), out, act()));
  } else {
    void* partial = sp_ ? g_.full_in : out;
    TSR_RETURN_IF_ERROR(
        linear_forward(s, down_shape, b.act, params_.work(p.down), partial, act(), act()));
    TSR_RETURN_IF_ERROR(row_parallel_sum(s, partial, out, "MLP output"));
  }
  if (p.b_down >= 0)
    TSR_RETURN_IF_ERROR(kernels_.bias_add(s, out, params_.work(p.b_down), Tl, h, act_abi()));
  return kernels_.add(s, out, b.mid, out, Tl * h, act_abi());
}

Status GptModel::head_forward(const hal::Stream& s) {
  const ParamLayout& L = params_.layout();
  const uint64_t T = uint64_t(tokens()), V = uint64_t(vocab_l_);
  TSR_RETURN_IF_ERROR(
      norm_forward(s, a_.resid.back(), L.final_w, L.final_b, a_.yf, a_.meanf, a_.rstdf));
  const LinearShape head_shape{tokens(), config_.hidden, vocab_l_};
  if (tp_matmul_) {  // tp_comm_overlap: the gather rides on the head GEMM's ring
    TSR_RETURN_IF_ERROR(linear_forward_gathered(
        *tp_matmul_, s, head_shape, a_.yf, params_.work(L.head), g_.full_in, a_.logits, act()));
  } else {
    const void* yf = a_.yf;
    if (sp_) {
      TSR_RETURN_IF_ERROR(sp_gather(s, a_.yf, g_.full_in, "head input (sp)"));
      yf = g_.full_in;
    }
    TSR_RETURN_IF_ERROR(
        linear_forward(s, head_shape, yf, params_.work(L.head), a_.logits, act(), DType::kF32));
  }
  // Vocabulary-parallel cross-entropy: each rank's statistics over its columns, combined.
  TSR_RETURN_IF_ERROR(kernels_.xent_max(s, a_.logits, a_.row_max, T, V));
  TSR_RETURN_IF_ERROR(allreduce_on(groups_.tp, s, a_.row_max, T, DType::kF32, ReduceOp::kMax,
                                   "xent row max", groups_.tp_timer.get()));
  TSR_RETURN_IF_ERROR(kernels_.xent_sum_exp(s, a_.logits, a_.row_max, a_.sum_exp, T, V));
  TSR_RETURN_IF_ERROR(tp_sum(s, a_.sum_exp, T, DType::kF32, "xent sum exp"));
  TSR_RETURN_IF_ERROR(
      kernels_.xent_target(s, a_.logits, a_.targets, a_.target_logit, T, vocab_begin_, V));
  TSR_RETURN_IF_ERROR(tp_sum(s, a_.target_logit, T, DType::kF32, "xent target logit"));
  return kernels_.xent_loss(s, a_.row_max, a_.sum_exp, a_.target_logit, a_.loss, T);
}

// ---- backward -----------------------------------------------------------------------------

Status GptModel::backward(const hal::Stream& s, float weight, int chunk) {
  TSR_ASSIGN_OR_RETURN(const StageRange* range, chunk_range(chunk, "backward"));
  const StageRange& stage = *range;
  // Under ZeRO-2/3 each unit's gradient is reduced as soon as its backward is done (zero.h).
  if (stage.last) {
    TSR_RETURN_IF_ERROR(zero_use(s, Part::kHead, 0, Pass::kBackward));
    TSR_RETURN_IF_ERROR(zero_grads_begin(Part::kHead, 0));
    TSR_RETURN_IF_ERROR(head_backward(s, weight));
    TSR_RETURN_IF_ERROR(zero_grads_end(s, Part::kHead, 0));
  }
  for (int l = stage.end_layer - 1; l >= stage.first_layer; --l) {
    TSR_RETURN_IF_ERROR(zero_use(s, Part::kBlock, l, Pass::kBackward));
    TSR_RETURN_IF_ERROR(zero_grads_begin(Part::kBlock, l));
    if (full_recompute()) {
      // The block's forward again from its kept input (resid[l]), into the shared activations;
      // it rewrites resid[l + 1] with the same values. The loss was taken in the forward.
      TSR_RETURN_IF_ERROR(attention_forward(s, l));
      TSR_RETURN_IF_ERROR(config_.moe() ? moe_forward(s, l) : mlp_forward(s, l));
    }
    if (config_.moe()) {
      TSR_RETURN_IF_ERROR(moe_backward(s, l, weight));
    } else {
      TSR_RETURN_IF_ERROR(mlp_backward(s, l));
    }
    TSR_RETURN_IF_ERROR(attention_backward(s, l));
    TSR_RETURN_IF_ERROR(zero_grads_end(s, Part::kBlock, l));
  }
  if (!stage.first) return Status();
  // The embedding's backward reads no weights: nothing to gather.
  TSR_RETURN_IF_ERROR(zero_grads_begin(Part::kEmbed, 0));
  TSR_RETURN_IF_ERROR(embed_backward(s));
  return zero_grads_end(s, Part::kEmbed, 0);
}

Status GptModel::head_backward(const hal::Stream& s, float weight) {
  const ParamLayout& L = params_.layout();
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden);
  const uint64_t Tl = uint64_t(local_tokens());
  const LinearShape shape{tokens(), config_.hidden, vocab_l_};
  TSR_RETURN_IF_ERROR(kernels_.xent_backward(s, a_.logits, a_.targets, a_.row_max, a_.sum_exp,
                                             g_.dlogits, T, vocab_begin_, uint64_t(vocab_l_),
                                             weight / float(tokens()), act_abi()));
  // Under sp: the gradient of the gathered input, reduce-scattered to this rank's slice; the
  // weight gradient reads the normed slices gathered again (Megatron keeps only the slice).
  void* dy = sp_ ? g_.full_grad : g_.dy;
  TSR_RETURN_IF_ERROR(
      linear_backward_input(s, shape, g_.dlogits, params_.work(L.head), dy, act(), false));
  const void* yf = a_.yf;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, a_.yf, g_.full_in, "head input (sp)"));
    yf = g_.full_in;
  }
  TSR_RETURN_IF_ERROR(
      linear_backward_weight(s, shape, g_.dlogits, yf, params_.grad(L.head), act()));
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_scatter(s, dy, g_.dy, "head input gradient (sp)"));
  } else {
    TSR_RETURN_IF_ERROR(tp_sum(s, g_.dy, T * h, act(), "head input gradient"));
  }
  // The residual gradient starts here: zero it, then the final norm adds into it.
  TSR_RETURN_IF_ERROR(s.memset(g_.dx, 0, Tl * h * hal::dtype_size(act())));
  return norm_backward(s, g_.dy, a_.resid.back(), L.final_w, L.final_b, a_.meanf, a_.rstdf, g_.dx);
}

Status GptModel::mlp_backward(const hal::Stream& s, int layer) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  const BlockActivations& b = block(layer);
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden), f = uint64_t(ffn_l_);
  // g_.dx holds d(block output); the residual passes it through unchanged to `mid`.
  if (p.b_down >= 0) TSR_RETURN_IF_ERROR(replicated_bias_grad(s, g_.dx, p.b_down));
  // Under sp the row-parallel backward reads every token's gradient: the slices gathered.
  const void* dout = g_.dx;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, g_.dx, g_.full_grad, "MLP output gradient (sp)"));
    dout = g_.full_grad;
  }
  const LinearShape down{tokens(), ffn_l_, config_.hidden};
  TSR_RETURN_IF_ERROR(
      linear_backward_input(s, down, dout, params_.work(p.down), g_.dh, act(), false));
  TSR_RETURN_IF_ERROR(linear_backward_weight(s, down, dout, b.act, params_.grad(p.down), act()));
  if (config_.swiglu) {
    TSR_RETURN_IF_ERROR(
        kernels_.swiglu_backward(s, b.gate, b.up, g_.dh, g_.dgate, g_.dup, T * f, act_abi()));
  } else {
    TSR_RETURN_IF_ERROR(kernels_.gelu_backward(s, b.up, g_.dh, g_.dup, T * f, act_abi()));
  }
  if (p.b_up >= 0)
    TSR_RETURN_IF_ERROR(kernels_.bias_grad(s, g_.dup, params_.grad(p.b_up), T, f, act_abi()));
  const LinearShape in_shape{tokens(), config_.hidden, ffn_l_};
  // Under sp: the gathered input's gradient into full_grad (its gathered output gradient is
  // consumed above), reduce-scattered below; the normed input gathered again.
  void* dy = sp_ ? g_.full_grad : g_.dy;
  const void* y2 = b.y2;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, b.y2, g_.full_in, "MLP input (sp)"));
    y2 = g_.full_in;
  }
  TSR_RETURN_IF_ERROR(
      linear_backward_input(s, in_shape, g_.dup, params_.work(p.up), dy, act(), false));
  TSR_RETURN_IF_ERROR(linear_backward_weight(s, in_shape, g_.dup, y2, params_.grad(p.up), act()));
  if (config_.swiglu) {
    TSR_RETURN_IF_ERROR(
        linear_backward_input(s, in_shape, g_.dgate, params_.work(p.gate), dy, act(), true));
    TSR_RETURN_IF_ERROR(
        linear_backward_weight(s, in_shape, g_.dgate, y2, params_.grad(p.gate), act()));
  }
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_scatter(s, dy, g_.dy, "MLP input gradient (sp)"));
  } else {
    TSR_RETURN_IF_ERROR(tp_sum(s, g_.dy, T * h, act(), "MLP input gradient"));
  }
  return norm_backward(s, g_.dy, b.mid, p.norm2_w, p.norm2_b, b.mean2, b.rstd2, g_.dx);
}

Status GptModel::attention_backward(const hal::Stream& s, int layer) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  const BlockActivations& b = block(layer);
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden);
  const float* lse = b.lse;
  if (recompute_ == Recompute::kSelective) {
    // The core again from the kept q, k, v: the log-sum-exp into the scratch, and att rewritten
    // with the values it already holds (the same kernel on the same inputs).
    TSR_RETURN_IF_ERROR(attention_core(s, layer, g_.lse));
    lse = g_.lse;
  }
  // g_.dx holds d(mid).
  if (p.bo >= 0) TSR_RETURN_IF_ERROR(replicated_bias_grad(s, g_.dx, p.bo));
  const void* dmid = g_.dx;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, g_.dx, g_.full_grad, "attention output gradient (sp)"));
    dmid = g_.full_grad;
  }
  const LinearShape out{tokens(), q_l_, config_.hidden};
  TSR_RETURN_IF_ERROR(
      linear_backward_input(s, out, dmid, params_.work(p.wo), g_.d_att, act(), false));
  TSR_RETURN_IF_ERROR(linear_backward_weight(s, out, dmid, b.att, params_.grad(p.wo), act()));
  const float scale = 1.0f / std::sqrt(float(config_.head_dim));
  TSR_RETURN_IF_ERROR(kernels_.attention_backward(
      s, b.q, b.k, b.v, b.att, g_.d_att, lse, g_.delta, g_.dq, g_.dk, g_.dv, uint64_t(batch_),
      uint64_t(seq_), uint64_t(heads_l_), uint64_t(kv_heads_l_), uint64_t(config_.head_dim), scale,
      act_abi()));
  const struct {
    int w, bias;
    void* grad;
    int64_t width;
    int64_t heads;
  } proj[] = {{p.wq, p.bq, g_.dq, q_l_, heads_l_},
              {p.wk, p.bk, g_.dk, kv_l_, kv_heads_l_},
              {p.wv, p.bv, g_.dv, kv_l_, -1}};
  // As in mlp_backward: under sp the input gradient goes to full_grad, the input is regathered.
  void* dy = sp_ ? g_.full_grad : g_.dy;
  const void* y1 = b.y1;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, b.y1, g_.full_in, "attention input (sp)"));
    y1 = g_.full_in;
  }
  bool first = true;
  for (const auto& pr : proj) {
    if (config_.rope() && pr.heads > 0) {
      TSR_RETURN_IF_ERROR(kernels_.rope(s, pr.grad, T, uint64_t(pr.heads),
                                        uint64_t(config_.head_dim), uint64_t(seq_),
                                        config_.rope_theta, -1, act_abi()));
    }
    if (pr.bias >= 0) {
      TSR_RETURN_IF_ERROR(
          kernels_.bias_grad(s, pr.grad, params_.grad(pr.bias), T, uint64_t(pr.width), act_abi()));
    }
    const LinearShape shape{tokens(), config_.hidden, pr.width};
    TSR_RETURN_IF_ERROR(
        linear_backward_input(s, shape, pr.grad, params_.work(pr.w), dy, act(), !first));
    TSR_RETURN_IF_ERROR(linear_backward_weight(s, shape, pr.grad, y1, params_.grad(pr.w), act()));
    first = false;
  }
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_scatter(s, dy, g_.dy, "attention input gradient (sp)"));
  } else {
    TSR_RETURN_IF_ERROR(tp_sum(s, g_.dy, T * h, act(), "attention input gradient"));
  }
  return norm_backward(s, g_.dy, a_.resid[size_t(layer)], p.norm1_w, p.norm1_b, b.mean1, b.rstd1,
                       g_.dx);
}

Status GptModel::embed_backward(const hal::Stream& s) {
  const ParamLayout& L = params_.layout();
  // The residual gradient is replicated over tp (under sp: its slices gathered), so every rank
  // adds the (replicated) position gradient itself and its own vocabulary rows.
  const void* dout = g_.dx;
  if (sp_) {
    TSR_RETURN_IF_ERROR(sp_gather(s, g_.dx, g_.full_grad, "embedding gradient (sp)"));
    dout = g_.full_grad;
  }
  return kernels_.embed_backward(s, a_.tokens, dout, params_.grad(L.wte), params_.grad(L.wpe),
                                 uint64_t(tokens()), uint64_t(config_.hidden), uint64_t(seq_),
                                 vocab_begin_, vocab_l_, act_abi());
}

}  // namespace tessera::gpt
