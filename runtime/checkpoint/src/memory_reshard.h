// The pieces of in-memory resharding (Checkpointer::reshard_from_memory) shared by the same-size
// path (memory_reshard.cc) and the path after ranks were lost (shrink_reshard.cc): descriptions of
// the snapshots the ranks hold, the common transfer plan, and the pairwise exchange. Internal to
// runtime/checkpoint; every function here is called by every rank of the group alike.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "impl.h"

namespace tessera::ckpt::memory_reshard {

// What one tensor of a snapshot (or of the registry) is, as the ranks tell each other.
struct Described {
  std::string name, dtype;
  std::vector<int64_t> shape;
  Slice slice;
};

nlohmann::json describe(const std::vector<TensorEntry>& tensors);
// Throws nlohmann's exceptions on a malformed list (callers turn them into a Status).
std::vector<Described> described(const nlohmann::json& list);

// A snapshot one rank of the group holds in memory: its own, or (after a shrink) the replica it
// keeps of a rank that is gone. `holder` is a rank of the current group; `what` names the
// snapshot in errors ("the snapshot of rank 2", "rank 0's replica of old rank 3").
struct Source {
  int holder = -1;
  std::vector<Described> tensors;
  std::string what;
  bool replica = false;  // the holder's replica, not its own snapshot
};

// One part to move: tensor `src_tensor` of source `source` (held by rank `from`) into tensor
// `dst_tensor` of rank `to`'s new registry.
struct Part {
  int from, to;
  size_t source, src_tensor, dst_tensor;
  Slice region;
};

// The same on every rank: for each rank's new slice, the distinct source slices that overlap it,
// each taken from a source the receiving rank holds itself when there is one, else from the first
// source (in `sources` order) holding it. FAILED_PRECONDITION naming the tensor, slice and rank
// when no source holds some part; INVALID_ARGUMENT for a dtype or shape that differs.
Result<std::vector<Part>> plan_parts(const std::vector<Source>& sources,
                                     const std::vector<std::vector<Described>>& new_tensors);

// The bytes of a source this rank holds: its tensors at data + offsets[i], elements of esizes[i]
// bytes. `data` is null for the sources other ranks hold.
struct LocalSource {
  const std::byte* data = nullptr;
  std::vector<size_t> offsets, esizes;
};
LocalSource local_source(const std::byte* data, const std::vector<TensorEntry>& entries);

// Lays `staging` out like the registry, takes each registered blob from `own` (this rank's own
// snapshot) by name, and agrees with every rank that all could (`local`: whether reserving the
// staging buffer worked), so no rank waits for one that already gave up.
Status prepare_staging(RankGroup& group, const StateRegistry& reg, const Snapshot& own,
                       Snapshot& staging, Status local);

// Copies the parts this rank keeps and trades the others pair by pair, in one global order.
Status exchange_parts(RankGroup& group, const StateRegistry& reg,
                      const std::vector<Source>& sources, const std::vector<Part>& parts,
                      const std::vector<LocalSource>& local, Snapshot& staging);

}  // namespace tessera::ckpt::memory_reshard
