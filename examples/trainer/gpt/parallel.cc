#include "parallel.h"

#include <string>

namespace tessera::gpt {

Status CommTimer::start(const hal::Stream& stream) {
  if (open_) {
    return failed_precondition("communication timer: start of a span before the last stopped");
  }
  if (used_ == pool_.size()) {
    TSR_ASSIGN_OR_RETURN(hal::Event first, stream.create_event(true));
    TSR_ASSIGN_OR_RETURN(hal::Event second, stream.create_event(true));
    pool_.emplace_back(std::move(first), std::move(second));
  }
  TSR_RETURN_IF_ERROR(pool_[used_].first.record(stream));
  open_ = true;
  return Status();
}

Status CommTimer::stop(const hal::Stream& stream) {
  if (!open_) return failed_precondition("communication timer: stop without a start");
  TSR_RETURN_IF_ERROR(pool_[used_].second.record(stream));
  open_ = false;
  ++used_;
  return Status();
}

Result<double> CommTimer::seconds() const {
  double sum = 0;
  for (size_t i = 0; i < used_; ++i) {
    auto ms = hal::Event::elapsed_ms(pool_[i].first, pool_[i].second);
    if (!ms.ok()) {
      return ms.status().with_context("communication timer: span " + std::to_string(i) + " of " +
                                      std::to_string(used_));
    }
    sum += double(*ms) / 1e3;
  }
  return sum;
}

Result<ParallelGroups> make_groups(const std::shared_ptr<coll::Communicator>& world, int tp, int dp,
                                   int pp, int ep) {
  const int size = world ? world->size() : 1;
  if (tp < 1 || dp < 1 || pp < 1 || tp * dp * pp != size) {
    return invalid_argument("GPT groups: tp " + std::to_string(tp) + " x dp " + std::to_string(dp) +
                            " x pp " + std::to_string(pp) + " does not make the " +
                            std::to_string(size) + " ranks of the world communicator");
  }
  if (ep < 1 || dp % ep != 0) {
    return invalid_argument("GPT groups: expert parallelism ep " + std::to_string(ep) +
                            " does not divide dp " + std::to_string(dp));
  }
  ParallelGroups groups;
  if (size == 1) return groups;
  const int rank = world->rank();
  const int tp_index = rank % tp, pp_index = rank / (tp * dp);
  // Every split is collective over the world: every rank makes them, in this order.
  if (tp > 1) {
    auto group = world->split(rank / tp, rank);
    if (!group.ok()) return group.status().with_context("tensor-parallel group");
    groups.tp = *group;
  }
  if (dp > 1) {
    auto group = world->split(tp_index + tp * pp_index, rank);
    if (!group.ok()) return group.status().with_context("data-parallel group");
    groups.dp = *group;
  }
  if (pp > 1) {
    auto group = world->split(rank % (tp * dp), rank);
    if (!group.ok()) return group.status().with_context("pipeline group");
    groups.pp = *group;
    // The first and last stage of each pipeline; middle stages are in no embedding group.
    const bool end_stage = pp_index == 0 || pp_index == pp - 1;
    auto embed = world->split(end_stage ? rank % (tp * dp) : -1, rank);
    if (!embed.ok()) return embed.status().with_context("embedding group");
    groups.embed = *embed;
  }
  if (ep > 1) {
    // Ranks with the same tp index and stage whose dp indices share dp_index / ep.
    const int dp_index = rank / tp % dp;
    auto group = world->split(tp_index + tp * (dp_index / ep + dp / ep * pp_index), rank);
    if (!group.ok()) return group.status().with_context("expert-parallel group");
    groups.ep = *group;
    if (dp > ep) {
      auto same = world->split(tp_index + tp * (dp_index % ep + ep * pp_index), rank);
      if (!same.ok()) return same.status().with_context("expert-data-parallel group");
      groups.expert_dp = *same;
    }
  }
  return groups;
}

}  // namespace tessera::gpt
