// Forward, backward and the 1F1B pipeline schedule of one step.
//
// 1F1B (Megatron-LM, PipeDream-Flush): stage s of S runs min(S - s - 1, M) warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards. Transfers are
// blocking point-to-point calls on the PP group; in every exchange between two neighbouring
// stages the lower stage sends first and the higher one receives first, so no pair waits on each
// other whatever the transport buffers. With one stage this is plain gradient accumulation.
#include <algorithm>
#include <vector>

#include "trainer.h"

namespace tessera::trainer {

// One micro-batch's tensors, kept from its forward to its backward.
struct Trainer::Activations {
  struct Block {
    std::vector<float> x, h1, a;  // input (h x n), pre-activation and GeLU output (f/tp x n)
  };
  std::vector<Block> blocks;
  std::vector<float> out;     // stage output (h x n)
  std::vector<float> dy;      // gradient w.r.t. the stage output, then w.r.t. its input
  std::vector<float> logits;  // last stage: (classes x n), then dlogits
  std::vector<int32_t> labels;
};

Status Trainer::forward(int64_t step, int64_t mb, Activations& act, StepReport* report,
                        double* loss_sum) {
  const ModelSpec& spec = options_.model;
  const int64_t n = layout_.mbs, h = spec.hidden, f = spec.ffn_size() / layout_.plan.tp;
  const int64_t first = layout_.dp_index * layout_.local_batch + mb * n;
  if (layout_.first_stage())
    make_inputs(spec, options_.seed, step, first, n, act.blocks[0].x.data());
  const int b0 = layout_.first_block();
  for (size_t k = 0; k < act.blocks.size(); ++k) {
    Activations::Block& blk = act.blocks[k];
    const Param& w1 = param(b0 + int(k), ParamKind::kW1);
    const Param& b1 = param(b0 + int(k), ParamKind::kB1);
    const Param& w2 = param(b0 + int(k), ParamKind::kW2);
    const Param& b2 = param(b0 + int(k), ParamKind::kB2);
    TSR_RETURN_IF_ERROR(
        gemm_->run(false, false, f, n, h, w1.value(), f, blk.x.data(), h, 0, blk.h1.data(), f));
    add_bias(blk.h1.data(), b1.value(), f, n);
    gelu_forward(blk.h1.data(), blk.a.data(), f * n);
    float* y = k + 1 < act.blocks.size() ? act.blocks[k + 1].x.data() : act.out.data();
    TSR_RETURN_IF_ERROR(gemm_->run(false, false, h, n, f, w2.value(), h, blk.a.data(), f, 0, y, h));
    TSR_RETURN_IF_ERROR(tp_allreduce(y, h * n, report));  // row-parallel W2: sum the partials
    add_bias(y, b2.value(), h, n);
    add_inplace(y, blk.x.data(), h * n);
  }
  if (!layout_.last_stage()) return Status();
  const int64_t c = spec.classes;
  const Param& wo = param(-1, ParamKind::kHeadW);
  const Param& bo = param(-1, ParamKind::kHeadB);
  TSR_RETURN_IF_ERROR(
      gemm_->run(false, false, c, n, h, wo.value(), c, act.out.data(), h, 0, act.logits.data(), c));
  add_bias(act.logits.data(), bo.value(), c, n);
  make_labels(spec, options_.seed, step, first, n, act.labels.data());
  // Mean over this DP rank's samples; the overlap engine averages over DP ranks.
  const float scale = 1.0f / float(layout_.local_batch);
  const double loss =
      softmax_cross_entropy(act.logits.data(), act.labels.data(), c, n, scale, act.logits.data());
  if (layout_.tp_index == 0) *loss_sum += loss;
  return Status();
}

Status Trainer::backward(int64_t mb, bool last_mb, Activations& act, StepReport* report) {
  (void)mb;
  const ModelSpec& spec = options_.model;
  const int64_t n = layout_.mbs, h = spec.hidden, f = spec.ffn_size() / layout_.plan.tp;
  auto mark = [&](const Param& p) -> Status {
    if (!sync_ || !last_mb) return Status();
    return sync_->mark_ready(p.sync_index, compute_);
  };
  if (layout_.last_stage()) {
    const int64_t c = spec.classes;
    Param& wo = param(-1, ParamKind::kHeadW);
    Param& bo = param(-1, ParamKind::kHeadB);
    const float* dlogits = act.logits.data();
    TSR_RETURN_IF_ERROR(
        gemm_->run(false, true, c, h, n, dlogits, c, act.out.data(), h, 1, wo.gradient(), c));
    accumulate_bias_grad(bo.gradient(), dlogits, c, n);
    TSR_RETURN_IF_ERROR(
        gemm_->run(true, false, h, n, c, wo.value(), c, dlogits, c, 0, act.dy.data(), h));
    TSR_RETURN_IF_ERROR(mark(bo));
    TSR_RETURN_IF_ERROR(mark(wo));
  }
  std::vector<float> da(size_t(f * n)), dx(size_t(h * n));
  const int b0 = layout_.first_block();
  for (size_t k = act.blocks.size(); k-- > 0;) {
    Activations::Block& blk = act.blocks[k];
    Param& w1 = param(b0 + int(k), ParamKind::kW1);
    Param& b1 = param(b0 + int(k), ParamKind::kB1);
    Param& w2 = param(b0 + int(k), ParamKind::kW2);
    Param& b2 = param(b0 + int(k), ParamKind::kB2);
    float* dy = act.dy.data();
    accumulate_bias_grad(b2.gradient(), dy, h, n);
    TSR_RETURN_IF_ERROR(
        gemm_->run(false, true, h, f, n, dy, h, blk.a.data(), f, 1, w2.gradient(), h));
    TSR_RETURN_IF_ERROR(mark(b2));
    TSR_RETURN_IF_ERROR(mark(w2));
    TSR_RETURN_IF_ERROR(gemm_->run(true, false, f, n, h, w2.value(), h, dy, h, 0, da.data(), f));
    gelu_backward(blk.h1.data(), da.data(), da.data(), f * n);
    accumulate_bias_grad(b1.gradient(), da.data(), f, n);
    TSR_RETURN_IF_ERROR(
        gemm_->run(false, true, f, h, n, da.data(), f, blk.x.data(), h, 1, w1.gradient(), f));
    TSR_RETURN_IF_ERROR(mark(b1));
    TSR_RETURN_IF_ERROR(mark(w1));
    TSR_RETURN_IF_ERROR(
        gemm_->run(true, false, h, n, f, w1.value(), f, da.data(), f, 0, dx.data(), h));
    // Column-parallel W1: the input gradient is a sum over the TP ranks' feature shards.
    TSR_RETURN_IF_ERROR(tp_allreduce(dx.data(), h * n, report));
    add_inplace(dy, dx.data(), h * n);  // the residual path
  }
  return Status();
}

Status Trainer::run_schedule(int64_t step, StepReport* report, double* loss_sum) {
  const ModelSpec& spec = options_.model;
  const int64_t M = layout_.microbatches, n = layout_.mbs, h = spec.hidden;
  const int64_t f = spec.ffn_size() / layout_.plan.tp;
  const int S = layout_.plan.pp, s = layout_.pp_index;
  std::vector<Activations> acts(static_cast<size_t>(M));
  for (Activations& a : acts) {
    a.blocks.resize(size_t(layout_.end_block() - layout_.first_block()));
    for (auto& b : a.blocks) {
      b.x.resize(size_t(h * n));
      b.h1.resize(size_t(f * n));
      b.a.resize(size_t(f * n));
    }
    a.out.resize(size_t(h * n));
    a.dy.resize(size_t(h * n));
    if (layout_.last_stage()) {
      a.logits.resize(size_t(spec.classes * n));
      a.labels.resize(size_t(n));
    }
  }
  auto recv_forward = [&](int64_t i) -> Status {
    if (layout_.first_stage()) return Status();
    return pp_recv(acts[size_t(i)].blocks[0].x.data(), h * n, s - 1, report);
  };
  auto send_forward = [&](int64_t i) -> Status {
    if (layout_.last_stage()) return Status();
    return pp_send(acts[size_t(i)].out.data(), h * n, s + 1, report);
  };
  auto recv_backward = [&](int64_t i) -> Status {
    if (layout_.last_stage()) return Status();
    return pp_recv(acts[size_t(i)].dy.data(), h * n, s + 1, report);
  };
  auto send_backward = [&](int64_t i) -> Status {
    if (layout_.first_stage()) return Status();
    return pp_send(acts[size_t(i)].dy.data(), h * n, s - 1, report);
  };
  auto fwd = [&](int64_t i) { return forward(step, i, acts[size_t(i)], report, loss_sum); };
  auto bwd = [&](int64_t i) {
    Status st = backward(i, i == M - 1, acts[size_t(i)], report);
    return st;
  };
  const int64_t warmup = std::min<int64_t>(S - s - 1, M), steady = M - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    TSR_RETURN_IF_ERROR(recv_forward(i));
    TSR_RETURN_IF_ERROR(fwd(i));
    TSR_RETURN_IF_ERROR(send_forward(i));
  }
  if (steady > 0) TSR_RETURN_IF_ERROR(recv_forward(warmup));
  for (int64_t i = 0; i < steady; ++i) {
    TSR_RETURN_IF_ERROR(fwd(warmup + i));
    TSR_RETURN_IF_ERROR(send_forward(warmup + i));  // lower stage: send first
    TSR_RETURN_IF_ERROR(recv_backward(i));
    TSR_RETURN_IF_ERROR(bwd(i));
    if (i + 1 < steady) TSR_RETURN_IF_ERROR(recv_forward(warmup + i + 1));  // higher: recv first
    TSR_RETURN_IF_ERROR(send_backward(i));
  }
  for (int64_t i = steady; i < M; ++i) {
    TSR_RETURN_IF_ERROR(recv_backward(i));
    TSR_RETURN_IF_ERROR(bwd(i));
    TSR_RETURN_IF_ERROR(send_backward(i));
  }
  return Status();
}

}  // namespace tessera::trainer
