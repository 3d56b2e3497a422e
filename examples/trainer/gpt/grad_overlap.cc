#include "grad_overlap.h"

#include <algorithm>
#include <string>

#include "ep.h"

namespace tessera::gpt {

namespace {

// `layout` without its expert tensors (ep.h packs them after every other tensor, so the specs
// before them and their indices stay as they are).
ParamLayout dense_layout(const ParamLayout& layout, uint64_t begin) {
  ParamLayout dense = layout;
  size_t kept = 0;
  while (kept < dense.specs.size() && dense.specs[kept].offset < begin) ++kept;
  dense.specs.resize(kept);
  for (BlockParams& b : dense.blocks) b.experts.clear();
  dense.total = begin;
  return dense;
}

Result<std::unique_ptr<overlap::GradSync>> make_sync(const hal::Device& device,
                                                     coll::Communicator& group,
                                                     const GradOverlapOptions& options,
                                                     const char* what) {
  auto comm = group.split(0, group.rank());
  if (!comm.ok()) {
    return comm.status().with_context(std::string("GPT overlap: splitting the ") + what +
                                      " communicator");
  }
  overlap::GradSyncOptions sync_options;
  sync_options.reduction = overlap::Reduction::kSum;
  sync_options.bucket_bytes = size_t(options.bucket_bytes);
  if (options.wire == DType::kBF16) sync_options.codec.kind = overlap::CodecKind::kBf16;
  auto engine = overlap::GradSync::create(std::move(*comm), device, sync_options);
  if (!engine.ok()) {
    return engine.status().with_context(std::string("GPT overlap: the ") + what +
                                        " gradient engine");
  }
  return std::move(*engine);
}

}  // namespace

GradOverlap::GradOverlap(std::unique_ptr<overlap::GradSync> sync,
                         std::vector<std::vector<int>> marks, std::vector<int> deferred)
    : sync_(std::move(sync)),
      marks_(std::move(marks)),
      deferred_(std::move(deferred)),
      calls_(marks_.size(), 0),
      layers_(int64_t(marks_.size()) - 2) {}

Result<std::unique_ptr<GradOverlap>> GradOverlap::create(const hal::Device& device,
                                                         const ParallelGroups& groups,
                                                         Params& params, int64_t layers,
                                                         GradOverlapOptions options) {
  if (groups.dp_size() < 2) return internal_error("GPT overlap: needs dp > 1");
  if (options.wire != DType::kF32 && options.wire != DType::kBF16) {
    return invalid_argument("GPT overlap: grad_comm must be f32 or bf16");
  }
  if (params.sharded() && params.shard_options().grad) {
    return invalid_argument(
        "GPT overlap: the gradient is sharded (zero >= 2): the engine sums whole units only");
  }
  // The units and which parts write them: ZeRO's plan over one rank (the unit indices do not
  // depend on dp; a sharded gradient (zero 1) holds each unit in its padded region).
  // Under ep the expert tensors (after the rest, ep.h) sum over expert_dp in an engine of their
  // own, a unit per block; the rest makes the units below.
  const ParamLayout& layout = params.layout();
  const bool ep = groups.ep_size() > 1;
  if (ep && params.sharded()) return invalid_argument("GPT overlap: ZeRO with ep");
  const uint64_t begin = ep ? expert_begin(layout) : layout.total;
  TSR_ASSIGN_OR_RETURN(ZeroPlan plan,
                       make_zero_plan(1, ep ? dense_layout(layout, begin) : layout, layers, 0, 1));
  const std::vector<ShardUnit>& units = plan.shards.units;
  if (params.sharded() && params.shards().units.size() != units.size()) {
    return internal_error("GPT overlap: " + std::to_string(params.shards().units.size()) +
                          " ZeRO units, " + std::to_string(units.size()) + " expected");
  }
  std::vector<int> deferred;
  if (options.defer_embedding && layout.wte >= 0) {
    deferred.push_back(plan.shards.unit_of[size_t(layout.wte)]);
  }
  auto is_deferred = [&](int u) {
    return std::find(deferred.begin(), deferred.end(), u) != deferred.end();
  };
  // The backward walks the parts from the head (key layers + 1) down to the embedding (key 0): a
  // unit is complete after the lowest key among the parts holding it.
  std::vector<int> done_at(units.size(), -1);
  for (int k = int(plan.parts.size()) - 1; k >= 0; --k) {
    for (int u : plan.parts[size_t(k)]) done_at[size_t(u)] = k;
  }
  std::vector<std::vector<int>> marks(plan.parts.size());
  for (size_t u = 0; u < units.size(); ++u) {
    if (is_deferred(int(u))) continue;
    if (done_at[u] < 0) {
      return internal_error("GPT overlap: unit " + std::to_string(u) + " belongs to no part");
    }
    marks[size_t(done_at[u])].push_back(int(u));
  }
  TSR_ASSIGN_OR_RETURN(std::unique_ptr<overlap::GradSync> sync,
                       make_sync(device, *groups.dp, options, "dp"));
  // Layout order: the engine buckets in reverse, the order the backward completes the units.
  uint64_t elements = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string name = "unit" + std::to_string(u);
    float* grad = params.sharded() ? params.unit_grad(int(u)) : params.grad_base() + units[u].begin;
    const uint64_t count = params.sharded() ? params.shards().units[u].padded : units[u].count;
    if (grad == nullptr) return internal_error("GPT overlap: " + name + " has no gradient buffer");
    auto index = sync->add_parameter(name, nullptr, grad, count, DType::kF32);
    if (!index.ok()) return index.status().with_context("GPT overlap: " + name);
    elements += count;
  }
  // The experts of each block (ep.h: packed block after block, after the rest): one unit per
  // block, complete after the block's backward, summed over expert_dp (nowhere where dp = ep:
  // every rank then holds other experts).
  std::vector<std::vector<int>> expert_marks(marks.size());
  std::unique_ptr<overlap::GradSync> experts;
  if (ep && groups.expert_dp) {
    TSR_ASSIGN_OR_RETURN(experts, make_sync(device, *groups.expert_dp, options, "expert_dp"));
    for (size_t l = 0; l < layout.blocks.size(); ++l) {
      uint64_t lo = layout.total, hi = 0;
      for (const ExpertParams& e : layout.blocks[l].experts) {
        for (int index : {e.gate, e.up, e.down}) {
          if (index < 0) continue;
          lo = std::min(lo, layout.at(index).offset);
          hi = std::max(hi, layout.at(index).offset + layout.at(index).local_count());
        }
      }
      if (hi <= lo) continue;
      const std::string name = "block" + std::to_string(l) + ".experts";
      auto index =
          experts->add_parameter(name, nullptr, params.grad_base() + lo, hi - lo, DType::kF32);
      if (!index.ok()) return index.status().with_context("GPT overlap: " + name);
      expert_marks[size_t(1 + l)].push_back(*index);
      elements += hi - lo;
    }
  }
  std::unique_ptr<GradOverlap> out(
      new GradOverlap(std::move(sync), std::move(marks), std::move(deferred)));
  out->buckets_ = out->sync_->buckets().size();
  if (experts) {
    out->experts_ = std::move(experts);
    out->expert_marks_ = std::move(expert_marks);
    out->buckets_ += out->experts_->buckets().size();
  }
  out->bytes_ = options.wire == DType::kBF16 ? elements * 2 : 0;
  return out;
}

void GradOverlap::begin_step(int64_t micro_batches) {
  micro_batches_ = micro_batches;
  std::fill(calls_.begin(), calls_.end(), 0);
}

Status GradOverlap::part_done(const hal::Stream& s, Part part, int layer) {
  const int64_t k = key(part, layer);
  if (++calls_[size_t(k)] != micro_batches_) return Status();
  for (int u : marks_[size_t(k)]) {
    Status st = sync_->mark_ready(u, s);
    if (!st.ok()) return st.with_context("GPT overlap: marking unit " + std::to_string(u));
  }
  if (experts_) {
    for (int u : expert_marks_[size_t(k)]) {
      Status st = experts_->mark_ready(u, s);
      if (!st.ok())
        return st.with_context("GPT overlap: marking block " + std::to_string(k - 1) +
                               "'s experts");
    }
  }
  return Status();
}

Status GradOverlap::mark_deferred(const hal::Stream& s) {
  for (int u : deferred_) {
    Status st = sync_->mark_ready(u, s);
    if (!st.ok()) return st.with_context("GPT overlap: marking the tied embedding's unit");
  }
  return Status();
}

Status GradOverlap::finish() {
  auto stats = sync_->finish();
  if (!stats.ok()) return stats.status().with_context("GPT overlap: finishing the step");
  last_ = *stats;
  if (experts_) {
    auto more = experts_->finish();
    if (!more.ok()) return more.status().with_context("GPT overlap: finishing the experts' sums");
    // The two engines' busy and exposed times (the second's exposed: its wait after the first).
    last_.buckets += more->buckets;
    last_.payload_bytes += more->payload_bytes;
    last_.wire_bytes += more->wire_bytes;
    last_.comm_seconds += more->comm_seconds;
    last_.exposed_seconds += more->exposed_seconds;
  }
  return Status();
}

}  // namespace tessera::gpt
