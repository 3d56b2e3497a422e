#include "pipeline.h"

#include <algorithm>
#include <string>

namespace tessera::gpt {

Result<StageRange> stage_range(int64_t layers, int stage, int stages) {
  if (stages < 1 || stage < 0 || stage >= stages || layers < stages) {
    return invalid_argument("GPT pipeline: " + std::to_string(layers) + " layers cannot make " +
                            std::to_string(stages) + " stages (each needs a block)");
  }
  TSR_ASSIGN_OR_RETURN(std::vector<StageRange> chunks, stage_chunks(layers, stage, stages, 1));
  return chunks.front();
}

Result<std::vector<StageRange>> stage_chunks(int64_t layers, int stage, int stages, int vp) {
  if (vp < 1) {
    return invalid_argument("GPT pipeline: vp " + std::to_string(vp) + " must be at least 1");
  }
  if (stages < 1 || stage < 0 || stage >= stages) {
    return invalid_argument("GPT pipeline: stage " + std::to_string(stage) + " of " +
                            std::to_string(stages));
  }
  const int64_t chunks = int64_t(stages) * vp;
  if (layers < chunks) {
    return invalid_argument("GPT pipeline: " + std::to_string(layers) + " layers cannot make pp " +
                            std::to_string(stages) + " x vp " + std::to_string(vp) + " = " +
                            std::to_string(chunks) + " chunks (each needs a block)");
  }
  // As even as possible, earlier chunks larger (examples/trainer/layout.h; the planner takes
  // only even splits under vp, where this is its split: chunk c * pp + stage on the stage).
  const int64_t base = layers / chunks, extra = layers % chunks;
  auto first_of = [&](int64_t g) { return g * base + std::min(g, extra); };
  std::vector<StageRange> out;
  for (int c = 0; c < vp; ++c) {
    const int64_t g = int64_t(c) * stages + stage;
    StageRange r;
    r.first_layer = int(first_of(g));
    r.end_layer = int(first_of(g + 1));
    r.first = g == 0;
    r.last = g == chunks - 1;
    out.push_back(r);
  }
  return out;
}

ParamLayout stage_layout(const ParamLayout& full, const StageRange& range) {
  return stage_layout(full, std::vector<StageRange>{range});
}

ParamLayout stage_layout(const ParamLayout& full, const std::vector<StageRange>& chunks) {
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
  bool first = false, last = false;
  for (const StageRange& range : chunks) {
    first = first || range.first;
    last = last || range.last;
  }
  const bool tied = full.head == full.wte;
  if (first || (tied && last)) out.wte = keep(full.wte);
  if (first) out.wpe = keep(full.wpe);
  for (const StageRange& range : chunks) {
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
  }
  if (last) {
    out.final_w = keep(full.final_w);
    out.final_b = keep(full.final_b);
    out.head = tied ? out.wte : keep(full.head);
  }
  return out;
}

namespace {

// One compute of a stage: Megatron-LM's order (the planner's timeline.cc device_order).
struct Compute {
  int chunk;
  int64_t micro_batch;
  bool backward;
};

std::vector<Compute> device_order(int stage, int pp, int vp, int64_t micro_batches) {
  const int64_t total = micro_batches * vp, group = int64_t(pp) * vp;
  const int64_t warmup =
      vp == 1 ? std::min<int64_t>(pp - stage - 1, micro_batches)
              : std::min<int64_t>(int64_t(pp - stage - 1) * 2 + int64_t(vp - 1) * pp, total);
  auto at = [&](int64_t k, bool backward) {
    const int c = int((k / pp) % vp);
    return Compute{backward ? vp - 1 - c : c, (k / group) * pp + k % pp, backward};
  };
  std::vector<Compute> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(at(k, false));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(at(warmup + k, false));
    order.push_back(at(k, true));
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(at(k, true));
  return order;
}

}  // namespace

Result<InterleavedSchedule> interleaved_schedule(int stage, int pp, int vp, int64_t micro_batches) {
  if (pp < 2 || stage < 0 || stage >= pp) {
    return invalid_argument("GPT pipeline: the interleaved schedule needs pp > 1 (pp " +
                            std::to_string(pp) + ", stage " + std::to_string(stage) + ")");
  }
  if (vp < 1) return invalid_argument("GPT pipeline: vp " + std::to_string(vp) + " below 1");
  if (micro_batches < 1 || micro_batches % pp != 0) {
    return invalid_argument("GPT pipeline: micro_batches " + std::to_string(micro_batches) +
                            " must be a positive multiple of pp " + std::to_string(pp) +
                            " under vp " + std::to_string(vp) +
                            " (the interleaved schedule runs them in groups of pp)");
  }
  const int last = pp * vp - 1;  // the model's last chunk
  std::vector<std::vector<Compute>> orders;
  size_t remaining = 0;
  for (int r = 0; r < pp; ++r) {
    orders.push_back(device_order(r, pp, vp, micro_batches));
    remaining += orders.back().size();
  }
  // Simulated end times (forward 1, backward 2) of every (stage, chunk, micro-batch, direction);
  // negative until placed.
  auto index = [&](int r, int c, int64_t j, bool backward) {
    return ((size_t(r) * size_t(vp) + size_t(c)) * size_t(micro_batches) + size_t(j)) * 2 +
           (backward ? 1 : 0);
  };
  std::vector<double> done(size_t(pp) * size_t(vp) * size_t(micro_batches) * 2, -1.0);
  std::vector<size_t> next(size_t(pp), 0);
  std::vector<double> busy(size_t(pp), 0.0);
  InterleavedSchedule out;
  // This stage's buffers: free lists, and the slots of each (chunk, micro-batch) in flight.
  std::vector<int> free_inputs, free_grads;
  std::vector<int> input_of(size_t(vp) * size_t(micro_batches), -1), grad_of(input_of);
  auto take = [](std::vector<int>& free, int& count) {
    if (free.empty()) return count++;
    const int slot = free.back();
    free.pop_back();
    return slot;
  };
  auto pair = [&](int c, int64_t j) { return size_t(c) * size_t(micro_batches) + size_t(j); };
  while (remaining > 0) {
    // The stage whose next compute can start earliest (its input placed), lowest stage on ties.
    int best = -1;
    double best_start = 0;
    for (int r = 0; r < pp; ++r) {
      if (next[size_t(r)] == orders[size_t(r)].size()) continue;
      const Compute& op = orders[size_t(r)][next[size_t(r)]];
      const int g = op.chunk * pp + r;
      double ready = 0;
      if (!op.backward && g > 0) {
        ready =
            done[index((r + pp - 1) % pp, r == 0 ? op.chunk - 1 : op.chunk, op.micro_batch, false)];
      } else if (op.backward && g < last) {
        ready =
            done[index((r + 1) % pp, r == pp - 1 ? op.chunk + 1 : op.chunk, op.micro_batch, true)];
      } else if (op.backward) {
        ready = done[index(r, op.chunk, op.micro_batch, false)];
      }
      if (ready < 0) continue;
      const double start = std::max(busy[size_t(r)], ready);
      if (best < 0 || start < best_start) best = r, best_start = start;
    }
    if (best < 0) {
      return internal_error("GPT pipeline: the interleaved schedule of pp " + std::to_string(pp) +
                            " vp " + std::to_string(vp) + " over " + std::to_string(micro_batches) +
                            " micro-batches stalls");
    }
    const int r = best;
    const Compute op = orders[size_t(r)][next[size_t(r)]++];
    --remaining;
    const int g = op.chunk * pp + r;
    const double end = best_start + (op.backward ? 2 : 1);
    done[index(r, op.chunk, op.micro_batch, op.backward)] = end;
    busy[size_t(r)] = end;
    const size_t k = pair(op.chunk, op.micro_batch);
    if (r == stage) {
      PipelineOp c;
      c.kind = op.backward ? PipelineOp::kBackward : PipelineOp::kForward;
      c.chunk = op.chunk;
      c.micro_batch = op.micro_batch;
      c.input = input_of[k];
      if (op.backward) {
        c.grad = grad_of[k];
        if (c.input >= 0) free_inputs.push_back(c.input);
        if (c.grad >= 0) free_grads.push_back(c.grad);
        input_of[k] = grad_of[k] = -1;
      }
      out.ops.push_back(c);
    }
    // The compute's result moves on at once, before anything on either side overwrites it.
    const bool sends = op.backward ? g > 0 : g < last;
    if (!sends) continue;
    const int to = op.backward ? (r + pp - 1) % pp : (r + 1) % pp;
    const int to_chunk =
        op.backward ? (r == 0 ? op.chunk - 1 : op.chunk) : (r == pp - 1 ? op.chunk + 1 : op.chunk);
    if (r == stage) {
      PipelineOp send;
      send.kind = op.backward ? PipelineOp::kSendGrad : PipelineOp::kSendOutput;
      send.chunk = op.chunk;
      send.micro_batch = op.micro_batch;
      send.peer = to;
      out.ops.push_back(send);
    }
    if (to == stage) {
      PipelineOp recv;
      recv.kind = op.backward ? PipelineOp::kRecvGrad : PipelineOp::kRecvInput;
      recv.chunk = to_chunk;
      recv.micro_batch = op.micro_batch;
      recv.peer = r;
      const size_t t = pair(to_chunk, op.micro_batch);
      if (op.backward) {
        recv.grad = grad_of[t] = take(free_grads, out.grad_slots);
      } else {
        recv.input = input_of[t] = take(free_inputs, out.input_slots);
      }
      out.ops.push_back(recv);
    }
  }
  return out;
}

Result<Pipeline> Pipeline::create(const hal::Device& device, const GptModel& model,
                                  int64_t micro_batches) {
  Pipeline p;
  p.device_ = &device;
  const ParallelGroups& g = model.groups();
  const int vp = int(model.chunks().size());
  if (vp > 1) {
    TSR_ASSIGN_OR_RETURN(p.scalars_, device.allocate(2 * sizeof(double)));
    if (micro_batches > 0) {
      TSR_ASSIGN_OR_RETURN(InterleavedSchedule plan,
                           interleaved_schedule(g.pp_rank(), g.pp_size(), vp, micro_batches));
      TSR_RETURN_IF_ERROR(p.reserve(model, plan.input_slots, plan.grad_slots));
    }
    return p;
  }
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
  for (const auto* pool : {&inputs_, &chunk_inputs_, &chunk_grads_}) {
    for (const hal::DeviceBuffer& b : *pool) n += b.size();
  }
  return n;
}

Status Pipeline::reserve(const GptModel& model, int inputs, int grads) {
  const uint64_t bytes = model.residual_count() * hal::dtype_size(model.params().act());
  while (int(chunk_inputs_.size()) < inputs) {
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device_->allocate(bytes));
    chunk_inputs_.push_back(std::move(b));
  }
  while (int(chunk_grads_.size()) < grads) {
    TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device_->allocate(bytes));
    chunk_grads_.push_back(std::move(b));
  }
  return Status();
}

namespace {

// Point-to-point on the pipeline group, queued on the stream (both schedules), timed by the
// groups' pp_timer where the trainer set one.
Status p2p(const ParallelGroups& g, const hal::Stream& s, bool send, void* data, uint64_t count,
           DType dtype, int peer, const char* what) {
  return timed_on(g.pp_timer.get(), s, [&]() -> Status {
    auto work =
        send ? g.pp->send(data, count, dtype, peer, s) : g.pp->recv(data, count, dtype, peer, s);
    if (!work.ok()) {
      return work.status().with_context(
          std::string(send ? "pipeline send of " : "pipeline recv of ") + what + " with stage " +
          std::to_string(peer));
    }
    return Status();
  });
}

}  // namespace

Status Pipeline::restore_input(const hal::Stream& s, GptModel& model, int64_t j) {
  if (model.stage().first) return Status();
  const uint64_t bytes = model.residual_count() * hal::dtype_size(model.params().act());
  return s.copy(model.stage_input(), inputs_[size_t(j) % inputs_.size()].data(), bytes);
}

Result<StepLoss> Pipeline::run(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                               const std::function<Batch(int64_t)>& batch_of, float weight) {
  if (model.chunks().size() > 1) {
    StepLoss sum;
    TSR_RETURN_IF_ERROR(run_interleaved(s, model, micro_batches, batch_of, weight, &sum));
    return finish(s, model, sum);
  }
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
  return finish(s, model, sum);
}

Status Pipeline::run_interleaved(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                                 const std::function<Batch(int64_t)>& batch_of, float weight,
                                 StepLoss* sum) {
  const ParallelGroups& g = model.groups();
  const int vp = int(model.chunks().size());
  TSR_ASSIGN_OR_RETURN(InterleavedSchedule plan,
                       interleaved_schedule(g.pp_rank(), g.pp_size(), vp, micro_batches));
  TSR_RETURN_IF_ERROR(reserve(model, plan.input_slots, plan.grad_slots));
  const DType act = model.params().act();
  const uint64_t n = model.residual_count(), bytes = n * hal::dtype_size(act);
  // The micro-batch whose activations each chunk holds, and whose tokens and targets the model
  // holds (the embedding's and the head's backward read them).
  std::vector<int64_t> last_forward(size_t(vp), -1);
  int64_t loaded = -1;
  auto run_forward = [&](const PipelineOp& op, bool count) -> Status {
    if (op.input >= 0) {
      TSR_RETURN_IF_ERROR(
          s.copy(model.stage_input(op.chunk), chunk_inputs_[size_t(op.input)].data(), bytes));
    }
    TSR_ASSIGN_OR_RETURN(StepLoss l, model.forward(s, batch_of(op.micro_batch), op.chunk));
    last_forward[size_t(op.chunk)] = loaded = op.micro_batch;
    if (count) {
      sum->xent += l.xent;
      sum->aux += l.aux;
    }
    return Status();
  };
  for (const PipelineOp& op : plan.ops) {
    const StageRange& chunk = model.chunks()[size_t(op.chunk)];
    switch (op.kind) {
      case PipelineOp::kRecvInput:
        TSR_RETURN_IF_ERROR(p2p(g, s, false, chunk_inputs_[size_t(op.input)].data(), n, act,
                                op.peer, "activations"));
        break;
      case PipelineOp::kSendOutput:
        TSR_RETURN_IF_ERROR(p2p(g, s, true, const_cast<void*>(model.stage_output(op.chunk)), n, act,
                                op.peer, "activations"));
        break;
      case PipelineOp::kRecvGrad:
        TSR_RETURN_IF_ERROR(
            p2p(g, s, false, chunk_grads_[size_t(op.grad)].data(), n, act, op.peer, "gradients"));
        break;
      case PipelineOp::kSendGrad:
        TSR_RETURN_IF_ERROR(p2p(g, s, true, model.residual_grad(), n, act, op.peer, "gradients"));
        break;
      case PipelineOp::kForward: TSR_RETURN_IF_ERROR(run_forward(op, true)); break;
      case PipelineOp::kBackward:
        if (last_forward[size_t(op.chunk)] != op.micro_batch) {
          TSR_RETURN_IF_ERROR(run_forward(op, false));  // replay: bitwise the first forward
        } else if ((chunk.first || chunk.last) && loaded != op.micro_batch) {
          TSR_RETURN_IF_ERROR(model.load_batch(s, batch_of(op.micro_batch)));
          loaded = op.micro_batch;
        }
        if (op.grad >= 0) {
          TSR_RETURN_IF_ERROR(
              s.copy(model.residual_grad(), chunk_grads_[size_t(op.grad)].data(), bytes));
        }
        TSR_RETURN_IF_ERROR(model.backward(s, weight, op.chunk));
        break;
    }
  }
  return Status();
}

Result<StepLoss> Pipeline::finish(const hal::Stream& s, GptModel& model, StepLoss sum) {
  const ParallelGroups& g = model.groups();
  const int rank = g.pp_rank();

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
