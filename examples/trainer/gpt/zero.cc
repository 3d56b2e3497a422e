#include "zero.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace tessera::gpt {
namespace {

// The unit of every tensor: 0 the embedding, 1 + l block l, then the head; -1 absent.
std::vector<int> unit_keys(const ParamLayout& layout) {
  std::vector<int> key(layout.specs.size(), -1);
  auto mark = [&](int index, int k) {
    if (index >= 0 && key[size_t(index)] < 0) key[size_t(index)] = k;
  };
  mark(layout.wte, 0);
  mark(layout.wpe, 0);
  for (size_t l = 0; l < layout.blocks.size(); ++l) {
    const BlockParams& b = layout.blocks[l];
    const int k = int(l) + 1;
    for (int index : {b.norm1_w, b.norm1_b, b.wq, b.wk, b.wv, b.bq, b.bk, b.bv, b.wo, b.bo,
                      b.norm2_w, b.norm2_b, b.gate, b.up, b.down, b.b_up, b.b_down, b.router})
      mark(index, k);
    for (const ExpertParams& e : b.experts) {
      mark(e.gate, k);
      mark(e.up, k);
      mark(e.down, k);
    }
  }
  const int head = int(layout.blocks.size()) + 1;
  mark(layout.final_w, head);
  mark(layout.final_b, head);
  mark(layout.head, head);  // the tied head is wte: already the embedding's
  return key;
}

}  // namespace

Params::ShardOptions ZeroPlan::options() const {
  Params::ShardOptions o;
  o.grad = level >= 2;
  o.grad_scratch = o.grad ? largest : 0;
  o.work = level >= 3;
  o.work_scratch = o.work ? uint64_t(slots) * largest : 0;
  return o;
}

Result<ZeroPlan> make_zero_plan(int level, const ParamLayout& layout, int64_t layers, int dp_rank,
                                int dp_size) {
  if (level < 0 || level > 3) {
    return invalid_argument("zero=" + std::to_string(level) + ": must be 0, 1, 2 or 3");
  }
  ZeroPlan plan;
  plan.level = level;
  if (level == 0) return plan;
  const std::vector<int> key = unit_keys(layout);
  const uint64_t dp = uint64_t(dp_size);
  ShardLayout& sl = plan.shards;
  sl.dp_rank = dp_rank;
  sl.dp_size = dp_size;
  sl.unit_of.assign(layout.specs.size(), -1);
  std::vector<int> unit_of_key(size_t(layers) + 2, -1);
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ParamSpec& spec = layout.specs[i];
    if (key[i] < 0) return internal_error("ZeRO: tensor " + spec.name + " belongs to no unit");
    int& u = unit_of_key[size_t(key[i])];
    if (u < 0 || sl.units[size_t(u)].begin + sl.units[size_t(u)].count != spec.offset) {
      if (u >= 0) {
        return internal_error("ZeRO: tensor " + spec.name +
                              " is not next to the rest of its unit in the flat layout");
      }
      u = int(sl.units.size());
      sl.units.push_back(ShardUnit{spec.offset, 0});
    }
    sl.units[size_t(u)].count += spec.local_count();
    sl.unit_of[i] = u;
  }
  for (ShardUnit& u : sl.units) {
    u.slice = std::max<uint64_t>((u.count + dp - 1) / dp, 1);
    u.padded = u.slice * dp;
    u.padded_begin = sl.padded;
    u.shard_at = sl.shard;
    sl.padded += u.padded;
    sl.shard += u.slice;
  }
  // This rank's piece of every tensor: the tensor within its unit, clipped to the rank's slice.
  for (size_t i = 0; i < layout.specs.size(); ++i) {
    const ShardUnit& u = sl.units[size_t(sl.unit_of[i])];
    const uint64_t first = layout.specs[i].offset - u.begin,
                   end = first + layout.specs[i].local_count();
    const uint64_t lo = std::max(first, uint64_t(dp_rank) * u.slice);
    const uint64_t hi = std::min(end, uint64_t(dp_rank + 1) * u.slice);
    if (hi > lo)
      sl.pieces.push_back(
          {int(i), lo - first, hi - lo, u.shard_at + lo - uint64_t(dp_rank) * u.slice});
  }
  plan.parts.resize(size_t(layers) + 2);
  for (size_t k = 0; k < unit_of_key.size(); ++k) {
    if (unit_of_key[k] >= 0) plan.parts[k].push_back(unit_of_key[k]);
  }
  // The tied head reads (and writes the gradient of) the embedding.
  const bool tied = layout.head >= 0 && layout.head == layout.wte;
  if (tied && !plan.parts.back().empty()) plan.parts.back().push_back(unit_of_key[0]);
  for (const std::vector<int>& part : plan.parts) {
    uint64_t size = 0;
    for (int u : part) size += sl.units[size_t(u)].padded;
    plan.largest = std::max(plan.largest, size);
  }
  // Two slots (prefetch) only where they still hold less than the whole working copy.
  if (level == 3) plan.slots = sl.shard + 2 * plan.largest < sl.padded ? 2 : 1;
  return plan;
}

ZeroEngine::ZeroEngine(ZeroPlan plan, ParallelGroups groups, Params& params, GptKernels kernels)
    : plan_(std::move(plan)),
      groups_(std::move(groups)),
      params_(&params),
      kernels_(std::move(kernels)) {
  slot_part_.assign(size_t(plan_.slots), -1);
}

int ZeroEngine::part_of(Part part, int layer) const {
  switch (part) {
    case Part::kEmbed: return 0;
    case Part::kBlock: return 1 + layer;
    case Part::kHead: return int(plan_.parts.size()) - 1;
  }
  return -1;
}

// Forward: embedding, blocks up, head. Backward: head, blocks down; the embedding's backward
// reads no weights, so the walk ends at the first block.
int ZeroEngine::next_part(int part, Pass pass) const {
  const int end = int(plan_.parts.size());
  const int step = pass == Pass::kForward ? 1 : -1, stop = pass == Pass::kForward ? end : 0;
  for (int p = part + step; p != stop; p += step) {
    if (!plan_.parts[size_t(p)].empty()) return p;
  }
  return -1;
}

Status ZeroEngine::gather(const hal::Stream& s, int part, int keep) {
  if (part < 0 || plan_.parts[size_t(part)].empty()) return Status();
  const size_t esize = hal::dtype_size(params_->act());
  auto slot_base = [&](size_t slot) {
    return static_cast<char*>(params_->work_scratch()) + slot * plan_.largest * esize;
  };
  auto held = std::find(slot_part_.begin(), slot_part_.end(), part);
  const bool resident = held != slot_part_.end();
  const size_t slot = resident ? size_t(held - slot_part_.begin())
                      : slot_part_.size() > 1 && slot_part_[0] == keep ? 1
                                                                       : 0;
  // Under enable_overlap the gather runs on the communication stream, after the compute queued
  // so far (the last reads of what the slot held, and AdamW's writes of the slices); use() makes
  // the compute stream wait for it.
  const hal::Stream* on = &s;
  coll::Communicator* comm = groups_.dp.get();
  if (overlap_ && !resident) {
    Overlap& o = *overlap_;
    TSR_ASSIGN_OR_RETURN(hal::Event free, s.create_event(false));
    TSR_RETURN_IF_ERROR(free.record(s));
    TSR_RETURN_IF_ERROR(o.stream.wait(free));
    TSR_ASSIGN_OR_RETURN(hal::Event start, o.stream.create_event(true));
    TSR_RETURN_IF_ERROR(start.record(o.stream));
    o.spans.emplace_back(std::move(start), hal::Event());
    on = &o.stream;
    comm = o.comm.get();
  }
  // A unit of two parts (the tied embedding) is bound to the slot of the part in use.
  char* at = slot_base(slot);
  for (int u : plan_.parts[size_t(part)]) {
    const ShardUnit& unit = plan_.shards.units[size_t(u)];
    if (!resident) {
      const char* mine = static_cast<const char*>(params_->work_base()) + unit.shard_at * esize;
      if (groups_.dp_size() == 1) {
        TSR_RETURN_IF_ERROR(on->copy(at, mine, unit.slice * esize));
      } else {
        auto work = comm->allgather(mine, at, unit.slice, params_->act(), *on);
        if (!work.ok()) {
          return work.status().with_context("allgather of ZeRO-3 unit " + std::to_string(u) +
                                            " (working weights of part " + std::to_string(part) +
                                            ")");
        }
      }
    }
    params_->bind_work(u, at);
    at += unit.padded * esize;
  }
  if (overlap_ && !resident) {
    Overlap& o = *overlap_;
    TSR_ASSIGN_OR_RETURN(hal::Event end, o.stream.create_event(true));
    TSR_RETURN_IF_ERROR(end.record(o.stream));
    o.spans.back().second = std::move(end);
    o.filled[slot] = int(o.spans.size()) - 1;
  }
  slot_part_[slot] = part;
  return Status();
}

Status ZeroEngine::use(const hal::Stream& s, Part part, int layer, Pass pass) {
  if (plan_.level < 3) return Status();
  const int p = part_of(part, layer);
  TSR_RETURN_IF_ERROR(gather(s, p, -1));
  if (plan_.slots >= 2) {
    TSR_RETURN_IF_ERROR(gather(s, next_part(p, pass), p));
    // The prefetch may have rebound a shared unit (the tied embedding): bind the current part's
    // units to its own slot again.
    TSR_RETURN_IF_ERROR(gather(s, p, -1));
  }
  if (overlap_) {
    // The part's compute waits for its slot's gather (on the communication stream).
    Overlap& o = *overlap_;
    const size_t slot =
        size_t(std::find(slot_part_.begin(), slot_part_.end(), p) - slot_part_.begin());
    if (slot < slot_part_.size() && o.filled[slot] >= 0) {
      TSR_RETURN_IF_ERROR(s.wait(o.spans[size_t(o.filled[slot])].second));
    }
  }
  return Status();
}

Status ZeroEngine::grads_begin(Part part, int layer) {
  if (plan_.level < 2) return Status();
  if (overlap_ && overlap_->next_part >= 0 && overlap_->next_part != part_of(part, layer)) {
    // grads_end chose this part's scratch, and queued its wait, for another part.
    return internal_error("ZeRO overlap: the backward reached part " +
                          std::to_string(part_of(part, layer)) + " after part " +
                          std::to_string(overlap_->next_part) + " was expected");
  }
  float* at = overlap_ && overlap_->next == 1 ? static_cast<float*>(overlap_->scratch.data())
                                              : params_->grad_scratch();
  for (int u : plan_.parts[size_t(part_of(part, layer))]) {
    params_->bind_grad(u, at);
    at += plan_.shards.units[size_t(u)].padded;
  }
  return Status();
}

Status ZeroEngine::grads_end(const hal::Stream& s, Part part, int layer) {
  if (plan_.level < 2) return Status();
  const std::vector<int>& units = plan_.parts[size_t(part_of(part, layer))];
  if (!overlap_) {
    for (int u : units) TSR_RETURN_IF_ERROR(reduce_unit(s, groups_.dp.get(), u));
    return Status();
  }
  Overlap& o = *overlap_;
  if (units.empty()) return Status();
  // The part's backward is queued on `s`: its reduce follows it on the communication stream.
  TSR_ASSIGN_OR_RETURN(hal::Event ready, s.create_event(false));
  TSR_RETURN_IF_ERROR(ready.record(s));
  TSR_RETURN_IF_ERROR(o.stream.wait(ready));
  TSR_ASSIGN_OR_RETURN(hal::Event start, o.stream.create_event(true));
  TSR_ASSIGN_OR_RETURN(hal::Event end, o.stream.create_event(true));
  TSR_RETURN_IF_ERROR(start.record(o.stream));
  for (int u : units) TSR_RETURN_IF_ERROR(reduce_unit(o.stream, o.comm.get(), u));
  TSR_RETURN_IF_ERROR(end.record(o.stream));
  o.spans.emplace_back(std::move(start), std::move(end));
  const int used = o.next;
  o.cleared[used] = int(o.spans.size()) - 1;
  // The next part (the next lower one holding units; after the lowest, the highest: the next
  // micro-batch's backward) binds the other scratch if it fits, else the first one; its backward
  // waits until that scratch's last reduce cleared it.
  const int p = part_of(part, layer), parts = int(plan_.parts.size());
  int next = -1;
  for (int k = 1; k <= parts && next < 0; ++k) {
    const int q = ((p - k) % parts + parts) % parts;
    if (!plan_.parts[size_t(q)].empty()) next = q;
  }
  o.next_part = next;
  o.next = used == 0 && part_elements(next) <= o.second ? 1 : 0;
  if (o.cleared[o.next] >= 0) {
    TSR_RETURN_IF_ERROR(s.wait(o.spans[size_t(o.cleared[o.next])].second));
  }
  return Status();
}

Status ZeroEngine::enable_overlap(const hal::Device& device) {
  if (plan_.level < 2) {
    return invalid_argument("ZeRO: a communication stream for zero=" + std::to_string(plan_.level) +
                            " (zero=2 and 3 only)");
  }
  if (groups_.dp_size() < 2 || overlap_) return Status();
  auto o = std::make_unique<Overlap>();
  auto comm = groups_.dp->split(0, groups_.dp->rank());
  if (!comm.ok()) return comm.status().with_context("ZeRO overlap: the communicator split from dp");
  o->comm = std::move(*comm);
  TSR_ASSIGN_OR_RETURN(o->stream, device.create_stream());
  // The second scratch holds the largest block (the embedding and the head, vocabulary-sized,
  // take the first one).
  for (size_t k = 1; k + 1 < plan_.parts.size(); ++k) {
    o->second = std::max(o->second, part_elements(int(k)));
  }
  if (o->second > 0) {
    TSR_ASSIGN_OR_RETURN(o->scratch, device.allocate(o->second * sizeof(float)));
    TSR_RETURN_IF_ERROR(o->stream.memset(o->scratch.data(), 0, o->second * sizeof(float)));
    TSR_RETURN_IF_ERROR(o->stream.synchronize());
  }
  overlap_ = std::move(o);
  return Status();
}

uint64_t ZeroEngine::part_elements(int part) const {
  uint64_t n = 0;
  if (part >= 0) {
    for (int u : plan_.parts[size_t(part)]) n += plan_.shards.units[size_t(u)].padded;
  }
  return n;
}

uint64_t ZeroEngine::overlap_bytes() const {
  return overlap_ ? overlap_->scratch.size() : 0;
}
double ZeroEngine::comm_seconds() const {
  return overlap_ ? overlap_->comm_seconds : 0;
}
double ZeroEngine::exposed_seconds() const {
  return overlap_ ? overlap_->exposed_seconds : 0;
}

Status ZeroEngine::reduce_unit(const hal::Stream& s, coll::Communicator* comm, int u) {
  const ShardUnit& unit = plan_.shards.units[size_t(u)];
  float* full = params_->unit_grad(u);
  float* mine = full + uint64_t(plan_.shards.dp_rank) * unit.slice;
  if (groups_.dp_size() > 1) {
    auto work = comm->reduce_scatter(full, mine, unit.slice, DType::kF32, ReduceOp::kSum, s);
    if (!work.ok()) {
      return work.status().with_context("reduce-scatter of ZeRO-2 unit " + std::to_string(u) +
                                        " (gradients)");
    }
  }
  float* shard = params_->grad_base() + unit.shard_at;
  TSR_RETURN_IF_ERROR(
      kernels_.add(s, shard, mine, shard, unit.slice, uint32_t(hal::to_abi(DType::kF32))));
  TSR_RETURN_IF_ERROR(s.memset(full, 0, unit.padded * sizeof(float)));
  params_->bind_grad(u, nullptr);
  return Status();
}

Status ZeroEngine::reduce(const hal::Stream& s) {
  if (overlap_) {
    Overlap& o = *overlap_;
    using Clock = std::chrono::steady_clock;
    TSR_RETURN_IF_ERROR(s.synchronize());
    const Clock::time_point computed = Clock::now();
    TSR_RETURN_IF_ERROR(o.stream.synchronize());  // AdamW reads the shard the reduces wrote
    o.exposed_seconds = std::chrono::duration<double>(Clock::now() - computed).count();
    o.comm_seconds = 0;
    for (const auto& [start, end] : o.spans) {
      TSR_ASSIGN_OR_RETURN(float ms, hal::Event::elapsed_ms(start, end));
      o.comm_seconds += double(ms) / 1e3;
    }
    o.spans.clear();
    o.cleared[0] = o.cleared[1] = -1;
    o.filled[0] = o.filled[1] = -1;
    o.next = 0;
    o.next_part = -1;
    return Status();
  }
  if (plan_.level != 1) return Status();
  return allreduce_on(groups_.dp, s, params_->grad_base(), plan_.shards.padded, DType::kF32,
                      ReduceOp::kSum, "gradients (zero=1)");
}

Status ZeroEngine::finish_step(const hal::Stream& s) {
  if (plan_.level == 3) {
    for (int& part : slot_part_) part = -1;
    for (size_t u = 0; u < plan_.shards.units.size(); ++u) params_->bind_work(int(u), nullptr);
    return Status();
  }
  if (plan_.level == 0 || groups_.dp_size() == 1) return Status();
  char* base = static_cast<char*>(params_->work_base());
  const size_t esize = hal::dtype_size(params_->act());
  for (size_t u = 0; u < plan_.shards.units.size(); ++u) {
    const ShardUnit& unit = plan_.shards.units[u];
    char* full = base + unit.padded_begin * esize;
    char* mine = full + uint64_t(plan_.shards.dp_rank) * unit.slice * esize;
    auto work = groups_.dp->allgather(mine, full, unit.slice, params_->act(), s);
    if (!work.ok()) {
      return work.status().with_context("allgather of ZeRO unit " + std::to_string(u) +
                                        " (working weights)");
    }
  }
  return Status();
}

Result<std::vector<float>> ZeroEngine::gather_master(const hal::Device& device,
                                                     const hal::Stream& s) const {
  const ShardLayout& sl = plan_.shards;
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer whole, device.allocate(sl.padded * sizeof(float)));
  float* base = static_cast<float*>(whole.data());
  for (size_t u = 0; u < sl.units.size(); ++u) {
    const ShardUnit& unit = sl.units[u];
    float* mine = base + unit.padded_begin + uint64_t(sl.dp_rank) * unit.slice;
    TSR_RETURN_IF_ERROR(
        s.copy(mine, params_->master_base() + unit.shard_at, unit.slice * sizeof(float)));
    if (groups_.dp_size() > 1) {
      auto work = groups_.dp->allgather(mine, base + unit.padded_begin, unit.slice, DType::kF32, s);
      if (!work.ok()) return work.status().with_context("allgather of the master weights (ZeRO)");
    }
  }
  TSR_ASSIGN_OR_RETURN(std::vector<float> padded, download<float>(s, base, sl.padded));
  std::vector<float> out(params_->layout().total);
  for (const ShardUnit& unit : sl.units) {
    std::copy_n(padded.begin() + std::ptrdiff_t(unit.padded_begin), unit.count,
                out.begin() + std::ptrdiff_t(unit.begin));
  }
  return out;
}

}  // namespace tessera::gpt
