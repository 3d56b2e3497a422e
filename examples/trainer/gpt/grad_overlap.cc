#include "grad_overlap.h"

#include <string>

namespace tessera::gpt {

GradOverlap::GradOverlap(std::unique_ptr<overlap::GradSync> sync,
                         std::vector<std::vector<int>> marks)
    : sync_(std::move(sync)), marks_(std::move(marks)), layers_(int64_t(marks_.size()) - 2) {}

Result<std::unique_ptr<GradOverlap>> GradOverlap::create(const hal::Device& device,
                                                         const ParallelGroups& groups,
                                                         Params& params, int64_t layers,
                                                         uint64_t bucket_bytes) {
  if (groups.dp_size() < 2) return internal_error("GPT overlap: needs dp > 1");
  // The units and which parts write them: ZeRO's plan over one rank (no padding).
  TSR_ASSIGN_OR_RETURN(ZeroPlan plan, make_zero_plan(1, params.layout(), layers, 0, 1));
  const std::vector<ShardUnit>& units = plan.shards.units;
  // The backward walks the parts from the head (key layers + 1) down to the embedding (key 0): a
  // unit is complete after the lowest key among the parts holding it.
  std::vector<int> done_at(units.size(), -1);
  for (int k = int(plan.parts.size()) - 1; k >= 0; --k) {
    for (int u : plan.parts[size_t(k)]) done_at[size_t(u)] = k;
  }
  std::vector<std::vector<int>> marks(plan.parts.size());
  for (size_t u = 0; u < units.size(); ++u) {
    if (done_at[u] < 0) {
      return internal_error("GPT overlap: unit " + std::to_string(u) + " belongs to no part");
    }
    marks[size_t(done_at[u])].push_back(int(u));
  }
  TSR_ASSIGN_OR_RETURN(std::shared_ptr<coll::Communicator> comm,
                       groups.dp->split(0, groups.dp->rank()));
  overlap::GradSyncOptions options;
  options.reduction = overlap::Reduction::kSum;
  options.bucket_bytes = size_t(bucket_bytes);
  auto sync = overlap::GradSync::create(std::move(comm), device, options);
  if (!sync.ok()) return sync.status().with_context("GPT overlap: the gradient engine");
  // Layout order: the engine buckets in reverse, the order the backward completes the units.
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string name = "unit" + std::to_string(u);
    auto index = (*sync)->add_parameter(name, nullptr, params.grad_base() + units[u].begin,
                                        units[u].count, DType::kF32);
    if (!index.ok()) return index.status().with_context("GPT overlap: " + name);
  }
  std::unique_ptr<GradOverlap> out(new GradOverlap(std::move(*sync), std::move(marks)));
  out->buckets_ = out->sync_->buckets().size();
  return out;
}

Status GradOverlap::part_done(const hal::Stream& s, Part part, int layer) {
  if (!last_micro_batch_) return Status();
  for (int u : units_completed_by(part, layer)) {
    Status st = sync_->mark_ready(u, s);
    if (!st.ok()) return st.with_context("GPT overlap: marking unit " + std::to_string(u));
  }
  return Status();
}

Status GradOverlap::finish() {
  auto stats = sync_->finish();
  if (!stats.ok()) return stats.status().with_context("GPT overlap: finishing the step");
  last_ = *stats;
  return Status();
}

}  // namespace tessera::gpt
