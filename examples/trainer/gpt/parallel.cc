#include "parallel.h"

#include <string>

namespace tessera::gpt {

Result<ParallelGroups> make_groups(const std::shared_ptr<coll::Communicator>& world, int tp,
                                   int dp) {
  const int size = world ? world->size() : 1;
  if (tp < 1 || dp < 1 || tp * dp != size) {
    return invalid_argument("GPT groups: tp " + std::to_string(tp) + " x dp " + std::to_string(dp) +
                            " does not make the " + std::to_string(size) +
                            " ranks of the world communicator");
  }
  ParallelGroups groups;
  if (size == 1) return groups;
  const int rank = world->rank();
  // Both splits are collective over the world: every rank makes them, in this order.
  if (tp > 1) {
    auto group = world->split(rank / tp, rank);
    if (!group.ok()) return group.status().with_context("tensor-parallel group");
    groups.tp = *group;
  }
  if (dp > 1) {
    auto group = world->split(rank % tp, rank);
    if (!group.ok()) return group.status().with_context("data-parallel group");
    groups.dp = *group;
  }
  return groups;
}

}  // namespace tessera::gpt
