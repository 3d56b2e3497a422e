#include "pipeline.h"

#include <algorithm>
#include <string>

namespace tessera::gpt {

Result<StageRange> stage_range(int64_t layers, int stage, int stages) {
  if (stages < 1 || stage < 0 || stage >= stages || layers < stages) {
    return invalid_argument("GPT pipeline: " + std::to_string(layers) + " layers cannot make " +
                            std::to_string(stages) + " stages (each needs a block)");
  }
  // As even as possible, earlier stages larger (examples/trainer/layout.h).
  const int64_t base = layers / stages, extra = layers % stages;
  auto first_of = [&](int64_t s) { return s * base + std::min(s, extra); };
  StageRange r;
  r.first_layer = int(first_of(stage));
  r.end_layer = int(first_of(stage + 1));
  r.first = stage == 0;
  r.last = stage == stages - 1;
  return r;
}

ParamLayout stage_layout(const ParamLayout& full, const StageRange& range) {
  ParamLayout out;
  out.tp_rank = full.tp_rank;
  out.tp_size = full.tp_size;
  out.blocks.resize(full.blocks.size());
  auto keep = [&](int index) {
    if (index < 0) return -1;
    ParamSpec spec = full.at(index);
    spec.offset = out.total;
    out.total += spec.local_count();
    out.specs.push_back(std::move(spec));
    return int(out.specs.size()) - 1;
  };
  const bool tied = full.head == full.wte;
  if (range.first || (tied && range.last)) out.wte = keep(full.wte);
  if (range.first) out.wpe = keep(full.wpe);
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    const BlockParams& b = full.blocks[size_t(l)];
    BlockParams& o = out.blocks[size_t(l)];
    for (auto [from, to] : {std::pair{b.norm1_w, &o.norm1_w},
                            {b.norm1_b, &o.norm1_b},
                            {b.wq, &o.wq},
                            {b.wk, &o.wk},
                            {b.wv, &o.wv},
                            {b.bq, &o.bq},
                            {b.bk, &o.bk},
                            {b.bv, &o.bv},
                            {b.wo, &o.wo},
                            {b.bo, &o.bo},
                            {b.norm2_w, &o.norm2_w},
                            {b.norm2_b, &o.norm2_b},
                            {b.gate, &o.gate},
                            {b.up, &o.up},
                            {b.down, &o.down},
                            {b.b_up, &o.b_up},
                            {b.b_down, &o.b_down},
                            {b.router, &o.router}}) {
      *to = keep(from);
    }
    for (const ExpertParams& e : b.experts) {
      ExpertParams x;
      x.gate = keep(e.gate);
      x.up = keep(e.up);
      x.down = keep(e.down);
      o.experts.push_back(x);
    }
  }
  if (range.last) {
    out.final_w = keep(full.final_w);
    out.final_b = keep(full.final_b);
    out.head = tied ? out.wte : keep(full.head);
  }
  return out;
}

Result<Pipeline> Pipeline::create(const hal::Device& device, const GptModel& model) {
  Pipeline p;
  const ParallelGroups& g = model.groups();
  const uint64_t bytes = model.residual_count() * hal::dtype_size(model.params().act());
  const StageRange& stage = model.stage();
  // A stage keeps the inputs of up to pp - stage micro-batches in flight (warm-up + 1); the first
  // stage recomputes its input (the embedding) from the tokens, and the last receives no gradient.
  const int in_flight = stage.first ? 0 : g.pp_size() - g.pp_rank();
  for (int i = 0; i < in_flight; ++i) {
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device.allocate(bytes));
    p.inputs_.push_back(std::move(b));
  }
  if (!stage.last) {
    TSR_ASSIGN_OR_RETURN(p.grad_, device.allocate(bytes));
  }
  TSR_ASSIGN_OR_RETURN(p.scalars_, device.allocate(2 * sizeof(double)));
  return p;
}

uint64_t Pipeline::bytes() const {
  uint64_t n = grad_.size() + scalars_.size();
  for (const hal::DeviceBuffer& b : inputs_) n += b.size();
  return n;
}

namespace {

// Point-to-point on the pipeline group, queued on the stream.
Status p2p(const ParallelGroups& g, const hal::Stream& s, bool send, void* data, uint64_t count,
           DType dtype, int peer, const char* what) {
  auto work =
      send ? g.pp->send(data, count, dtype, peer, s) : g.pp->recv(data, count, dtype, peer, s);
  if (!work.ok()) {
    return work.status().with_context(
        std::string(send ? "pipeline send of " : "pipeline recv of ") + what + " with stage " +
        std::to_string(peer));
  }
  return Status();
}

}  // namespace

Status Pipeline::restore_input(const hal::Stream& s, GptModel& model, int64_t j) {
  if (model.stage().first) return Status();
  const uint64_t bytes = model.residual_count() * hal::dtype_size(model.params().act());
  return s.copy(model.stage_input(), inputs_[size_t(j) % inputs_.size()].data(), bytes);
}

Result<StepLoss> Pipeline::run(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                               const std::function<Batch(int64_t)>& batch_of, float weight) {
  const ParallelGroups& g = model.groups();
  const StageRange& stage = model.stage();
  const int pp = g.pp_size(), rank = g.pp_rank();
  const DType act = model.params().act();
  const uint64_t n = model.residual_count(), bytes = n * hal::dtype_size(act);
  const int64_t warmup = std::min<int64_t>(pp - rank - 1, micro_batches);
  StepLoss sum;
  int64_t last_forward = -1;

  auto recv_input = [&](int64_t j) -> Status {
    if (stage.first) return Status();
    return p2p(g, s, false, inputs_[size_t(j) % inputs_.size()].data(), n, act, rank - 1,
               "activations");
  };
  auto send_output = [&]() -> Status {
    if (stage.last) return Status();
    return p2p(g, s, true, const_cast<void*>(model.stage_output()), n, act, rank + 1,
               "activations");
  };
  auto recv_grad = [&]() -> Status {
    if (stage.last) return Status();
    return p2p(g, s, false, grad_.data(), n, act, rank + 1, "gradients");
  };
  auto send_grad = [&]() -> Status {
    if (stage.first) return Status();
    return p2p(g, s, true, model.residual_grad(), n, act, rank - 1, "gradients");
  };
  // Runs micro-batch j's forward from its kept input (replay: its loss was counted already).
  auto run_forward = [&](int64_t j, bool count) -> Status {
    TSR_RETURN_IF_ERROR(restore_input(s, model, j));
    TSR_ASSIGN_OR_RETURN(StepLoss l, model.forward(s, batch_of(j)));
    last_forward = j;
    if (count) {
      sum.xent += l.xent;
      sum.aux += l.aux;
    }
    return Status();
  };
  auto run_backward = [&](int64_t j) -> Status {
    if (last_forward != j) TSR_RETURN_IF_ERROR(run_forward(j, false));
    if (!stage.last) TSR_RETURN_IF_ERROR(s.copy(model.residual_grad(), grad_.data(), bytes));
    return model.backward(s, weight);
  };
  // With blocking point-to-point, the two stages of a link must not both send first: on link
  // (i, i + 1) stage i sends first when i is even, stage i + 1 when i is odd.
  auto send_output_recv_grad = [&]() -> Status {
    if (rank % 2 == 0) {
      TSR_RETURN_IF_ERROR(send_output());
      return recv_grad();
    }
    TSR_RETURN_IF_ERROR(recv_grad());
    return send_output();
  };
  auto send_grad_recv_input = [&](int64_t j) -> Status {
    if ((rank - 1) % 2 == 1) {
      TSR_RETURN_IF_ERROR(send_grad());
      return recv_input(j);
    }
    TSR_RETURN_IF_ERROR(recv_input(j));
    return send_grad();
  };

  int64_t next_forward = 0, next_backward = 0;
  for (int64_t i = 0; i < warmup; ++i, ++next_forward) {
    TSR_RETURN_IF_ERROR(recv_input(next_forward));
    TSR_RETURN_IF_ERROR(run_forward(next_forward, true));
    TSR_RETURN_IF_ERROR(send_output());
  }
  const int64_t steady = micro_batches - warmup;
  if (steady > 0) TSR_RETURN_IF_ERROR(recv_input(next_forward));
  for (int64_t i = 0; i < steady; ++i, ++next_forward, ++next_backward) {
    TSR_RETURN_IF_ERROR(run_forward(next_forward, true));
    TSR_RETURN_IF_ERROR(send_output_recv_grad());
    TSR_RETURN_IF_ERROR(run_backward(next_backward));
    if (i + 1 < steady) {
      TSR_RETURN_IF_ERROR(send_grad_recv_input(next_forward + 1));
    } else {
      TSR_RETURN_IF_ERROR(send_grad());
    }
  }
  for (; next_backward < micro_batches; ++next_backward) {
    TSR_RETURN_IF_ERROR(recv_grad());
    TSR_RETURN_IF_ERROR(run_backward(next_backward));
    TSR_RETURN_IF_ERROR(send_grad());
  }

  // A tied embedding's two copies (first and last stage) get the sum of their gradients, after
  // every send and receive of the schedule. Every rank of the embedding group must enter it: the
  // first stage holds no head (its layout's head is -1, not wte), so the test is the config's
  // tied flag, not head == wte (that test kept the first stage out and hung the last one here).
  // (Refused with ZeRO for now: this sum would have to run before the units' reduce-scatter.)
  const ParamLayout& L = model.params().layout();
  if (g.embed && model.config().tied) {
    if (L.wte < 0) {
      return internal_error("GPT pipeline: stage " + std::to_string(rank) +
                            " is in the embedding group but holds no tied embedding");
    }
    TSR_RETURN_IF_ERROR(allreduce_on(g.embed, s, model.params().grad(L.wte),
                                     L.at(L.wte).local_count(), DType::kF32, ReduceOp::kSum,
                                     "tied embedding gradient"));
  }
  std::vector<double> values{sum.xent, sum.aux};
  TSR_RETURN_IF_ERROR(upload(s, scalars_.data(), values));
  TSR_RETURN_IF_ERROR(
      allreduce_on(g.pp, s, scalars_.data(), 2, DType::kF64, ReduceOp::kSum, "pipeline losses"));
  TSR_ASSIGN_OR_RETURN(values, download<double>(s, scalars_.data(), 2));
  return StepLoss{values[0], values[1]};
}

}  // namespace tessera::gpt
