// Resharding in memory onto a smaller world after ranks died (Checkpointer::rebind_shrunk, then
// reshard_from_memory): the survivors agree on the mapping to their old ranks; every survivor
// describes the snapshots it holds (its own, up to two steps) and the replica it keeps of its
// predecessor on the buddy ring; all choose the newest step from which every new slice can be
// assembled, naming the old ranks whose state is in no memory when there is none; the parts then
// move with the same plan and pairwise exchange as the same-size path (memory_reshard.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "memory_reshard.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::json;
using namespace memory_reshard;

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

std::string list_text(const std::vector<int>& ranks) {
  return "[" + join(std::vector<int64_t>(ranks.begin(), ranks.end())) + "]";
}

// Why `old_rank_of` cannot map a group of `size` ranks (this one `rank`) onto an old group of
// `old_size` ranks in which this rank was `old_rank`; "" when it can.
std::string mapping_problem(const std::vector<int>& old_rank_of, int size, int rank, int old_size,
                            int old_rank) {
  if (size >= old_size) {
    return "the new group has " + std::to_string(size) + " ranks, not fewer than the " +
           std::to_string(old_size) + " of the old one (rebind() serves a group of the same size)";
  }
  if (static_cast<int>(old_rank_of.size()) != size) {
    return "old_rank_of has " + std::to_string(old_rank_of.size()) + " entries for a group of " +
           std::to_string(size) + " ranks";
  }
  std::set<int> seen;
  for (int r = 0; r < size; ++r) {
    const int o = old_rank_of[size_t(r)];
    if (o < 0 || o >= old_size) {
      return "old_rank_of[" + std::to_string(r) + "] is " + std::to_string(o) +
             ", outside the old group of " + std::to_string(old_size) + " ranks";
    }
    if (!seen.insert(o).second) return "old_rank_of names old rank " + std::to_string(o) + " twice";
  }
  if (old_rank_of[size_t(rank)] != old_rank) {
    return "old_rank_of[" + std::to_string(rank) + "] is " +
           std::to_string(old_rank_of[size_t(rank)]) + ", but this rank was rank " +
           std::to_string(old_rank) + " of the old group";
  }
  return "";
}

// What one survivor holds and needs, as it told the others.
struct Holdings {
  std::vector<std::pair<int64_t, std::vector<Described>>> own;  // (step, tensors) per snapshot
  int replica_owner = -1;                                       // an old rank
  int64_t replica_step = -1;
  std::vector<Described> replica;
  std::vector<Described> wanted;  // the new registry
};

// The transfer plan for `step`, and what it lacks when there is none.
struct Attempt {
  std::vector<Source> sources;
  Result<std::vector<Part>> parts = internal_error("not planned");
  std::vector<int> lost;  // old ranks whose state of `step` no survivor holds
  std::string lost_detail;
};

Attempt plan_for_step(int64_t step, const std::vector<Holdings>& held,
                      const std::vector<int>& old_rank_of, int old_size) {
  Attempt a;
  const int size = static_cast<int>(held.size());
  std::vector<std::vector<Described>> wanted(size_t(size), std::vector<Described>{});
  for (int r = 0; r < size; ++r) {
    wanted[size_t(r)] = held[size_t(r)].wanted;
    for (const auto& [s, tensors] : held[size_t(r)].own) {
      if (s != step) continue;
      a.sources.push_back(Source{r, tensors,
                                 "the snapshot of rank " + std::to_string(r) + " (old rank " +
                                     std::to_string(old_rank_of[size_t(r)]) + ")"});
      break;
    }
  }
  const std::set<int> survivors(old_rank_of.begin(), old_rank_of.end());
  for (int o = 0; o < old_size; ++o) {
    if (survivors.count(o)) continue;
    std::string why = "no survivor holds its replica";
    bool found = false;
    for (int r = 0; r < size && !found; ++r) {
      const Holdings& h = held[size_t(r)];
      if (h.replica_owner != o) continue;
      if (h.replica_step != step) {
        why = "rank " + std::to_string(r) + " holds its replica of step " +
              std::to_string(h.replica_step);
        continue;
      }
      a.sources.push_back(Source{
          r, h.replica, "rank " + std::to_string(r) + "'s replica of old rank " + std::to_string(o),
          /*replica=*/true});
      found = true;
    }
    if (!found) {
      a.lost.push_back(o);
      a.lost_detail += (a.lost_detail.empty() ? "" : "; ") + std::string("old rank ") +
                       std::to_string(o) + ": " + why;
    }
  }
  a.parts = plan_parts(a.sources, wanted);
  return a;
}

}  // namespace

Status Checkpointer::rebind_shrunk(std::shared_ptr<RankGroup> group, std::vector<int> old_rank_of) {
  if (!group) return invalid_argument("rebind_shrunk: no rank group");
  const int size = group->size(), rank = group->rank();
  const int old_size = group_->size(), old_rank = group_->rank();
  std::string problem = mapping_problem(old_rank_of, size, rank, old_size, old_rank);
  const bool in_flight = problem.empty() && busy();
  if (in_flight) problem = "a save is in flight (wait() for it first)";
  // Every survivor learns every survivor's verdict and list, so all return the same status.
  const Json mine = {{"problem", problem}, {"busy", in_flight}, {"old_rank_of", old_rank_of}};
  TSR_ASSIGN_OR_RETURN(auto gathered, group->allgather(mine.dump()));
  std::string errors;
  bool any_busy = false;
  for (int r = 0; r < size; ++r) {
    const Json j = Json::parse(gathered[size_t(r)], nullptr, false);
    std::string why;
    if (j.is_discarded() || !j.is_object() || !j.contains("problem") || !j["problem"].is_string() ||
        !j.contains("old_rank_of")) {
      why = "malformed reply";
    } else if (!j["problem"].get<std::string>().empty()) {
      why = j["problem"].get<std::string>();
      any_busy = any_busy || j.value("busy", false);
    } else if (j["old_rank_of"] != Json(old_rank_of)) {
      why = "passed old_rank_of " + j["old_rank_of"].dump() + ", rank " + std::to_string(rank) +
            " passed " + list_text(old_rank_of);
    }
    if (!why.empty())
      errors += std::string(errors.empty() ? "" : "; ") + "rank " + std::to_string(r) + ": " + why;
  }
  if (!errors.empty()) {
    const std::string message = "rebind_shrunk (new group of " + std::to_string(size) +
                                " ranks, old of " + std::to_string(old_size) + "): " + errors;
    return any_busy ? failed_precondition(message) : invalid_argument(message);
  }
  std::lock_guard lock(impl_->mu);
  // The worker touches group_ only while busy; every survivor found it idle above and the caller
  // (one thread) has not started a save since.
  group_ = std::move(group);
  Impl::Shrink next{old_size, std::move(old_rank_of)};
  if (impl_->shrink) {  // lost ranks again before resharding: map straight to the first world
    for (int& o : next.old_rank_of) o = impl_->shrink->old_rank_of[size_t(o)];
    next.old_size = impl_->shrink->old_size;
  }
  TSR_LOG(kInfo, "ckpt") << "rank " << rank << " of " << size << " (was " << old_rank << " of "
                         << old_size << "): rebound after a shrink, old ranks "
                         << list_text(next.old_rank_of);
  impl_->shrink = std::move(next);
  impl_->replica_stride = 0;  // chosen again for the new ring at the next replica
  // The delta base is chunks the old world's ranks wrote: the next save starts afresh.
  impl_->base = DeltaBase{};
  impl_->saves_since_full = 0;
  return Status();
}

void Checkpointer::Impl::forget_old_world() {
  for (Snapshot& b : buffers) b.valid = false;
  committed_buffer = -1;
  last_snapshot = -1;
  replica = Replica{};
  shrink.reset();
}

Result<LoadResult> Checkpointer::Impl::reshard_after_shrink() {
  const auto t0 = std::chrono::steady_clock::now();
  RankGroup& group = *self->group_;
  const StateRegistry& reg = self->registry_;
  const int size = group.size(), rank = group.rank();
  const Shrink sh = *shrink;
  const std::string what = "reshard_from_memory after rebind_shrunk";

  // 1. What every survivor holds.
  Json own = Json::array();
  for (const Snapshot& b : buffers) {
    if (b.valid) own.push_back({{"step", b.step}, {"tensors", describe(b.entries)}});
  }
  Json rep = nullptr;
  if (replica.owner >= 0 && !replica.entries.empty()) {
    rep = {
        {"owner", replica.owner}, {"step", replica.step}, {"tensors", describe(replica.entries)}};
  }
  const Json mine = {{"shrink", {{"old_size", sh.old_size}, {"old_rank_of", sh.old_rank_of}}},
                     {"own", own},
                     {"replica", rep},
                     {"new", describe(reg.tensors())}};
  TSR_ASSIGN_OR_RETURN(auto gathered, group.allgather(mine.dump()));
  std::vector<Holdings> held(size_t(size), Holdings{});
  for (int r = 0; r < size; ++r) {
    const std::string who = "rank " + std::to_string(r);
    const Json j = Json::parse(gathered[size_t(r)], nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return internal_error(what + ": malformed description from " + who);
    }
    if (!j.contains("shrink")) {
      return failed_precondition(what + ": " + who + " did not call rebind_shrunk, rank " +
                                 std::to_string(rank) + " did (every survivor must)");
    }
    try {
      if (j["shrink"] != mine["shrink"]) {
        return failed_precondition(what + ": " + who + " maps to the old world as " +
                                   j["shrink"].dump() + ", rank " + std::to_string(rank) + " as " +
                                   mine["shrink"].dump());
      }
      Holdings& h = held[size_t(r)];
      for (const Json& o : j.at("own")) {
        h.own.push_back({o.at("step").get<int64_t>(), described(o.at("tensors"))});
      }
      if (!j.at("replica").is_null()) {
        h.replica_owner = j["replica"].at("owner").get<int>();
        h.replica_step = j["replica"].at("step").get<int64_t>();
        h.replica = described(j["replica"].at("tensors"));
      }
      h.wanted = described(j.at("new"));
    } catch (const std::exception& e) {
      return internal_error(what + ": malformed description from " + who + ": " + e.what());
    }
  }

  // 2. The steps every survivor holds, newest first.
  std::vector<int64_t> common;
  for (const auto& [s, tensors] : held[0].own) common.push_back(s);
  for (int r = 1; r < size; ++r) {
    std::erase_if(common, [&](int64_t s) {
      const auto& o = held[size_t(r)].own;
      return std::none_of(o.begin(), o.end(), [&](const auto& p) { return p.first == s; });
    });
  }
  std::sort(common.rbegin(), common.rend());
  if (common.empty()) {
    std::string steps;
    for (int r = 0; r < size; ++r) {
      std::vector<int64_t> list;
      for (const auto& p : held[size_t(r)].own) list.push_back(p.first);
      steps += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + " (old rank " +
               std::to_string(sh.old_rank_of[size_t(r)]) + ") " +
               (list.empty() ? "holds no snapshot" : "holds step(s) " + join(list));
    }
    return failed_precondition(what +
                               ": the survivors hold no snapshot of a common step: " + steps);
  }

  // 3. The newest step the survivors can assemble every new slice of.
  std::optional<Attempt> chosen, newest;
  int64_t step = -1;
  for (int64_t s : common) {
    Attempt a = plan_for_step(s, held, sh.old_rank_of, sh.old_size);
    if (a.parts.ok()) {
      chosen = std::move(a);
      step = s;
      break;
    }
    if (!newest) newest = std::move(a);
  }
  if (!chosen) {
    const Status& why = newest->parts.status();
    // Only a part no source holds is the lost ranks' doing (not a dtype or shape that differs).
    if (newest->lost.empty() || why.code() != StatusCode::kFailedPrecondition) return why;
    std::vector<int64_t> lost(newest->lost.begin(), newest->lost.end());
    return data_loss(what + ": the state of old rank(s) " + join(lost) + " at step " +
                     std::to_string(common.front()) + " is in no survivor's memory (" +
                     newest->lost_detail + "), and the new layout needs it: " + why.message() +
                     "; load it from storage");
  }
  if (newest) {
    TSR_LOG(kWarn, "ckpt") << what << ": step " << common.front()
                           << " cannot be assembled in memory (" << newest->parts.status().message()
                           << "); resharding step " << step << " instead";
  }

  // 4. Staging, then the parts move.
  int source_index = -1;
  for (int b = 0; b < 2 && source_index < 0; ++b) {
    if (buffers[b].valid && buffers[b].step == step) source_index = b;
  }
  const int staging_index = source_index == 0 ? 1 : 0;
  const Snapshot& source = buffers[source_index];
  Snapshot& staging = buffers[staging_index];
  std::vector<LocalSource> local(chosen->sources.size());
  for (size_t i = 0; i < chosen->sources.size(); ++i) {
    if (chosen->sources[i].holder != rank) continue;
    local[i] = chosen->sources[i].replica
                   ? local_source(reinterpret_cast<const std::byte*>(replica.bytes.data()),
                                  replica.entries)
                   : local_source(source.data, source.entries);
  }
  Status s =
      prepare_staging(group, reg, source, staging, reserve(staging, reg.total_tensor_bytes()));
  if (s.ok()) s = exchange_parts(group, reg, chosen->sources, *chosen->parts, local, staging);
  if (!s.ok()) {
    // The staging buffer may be half written: it no longer stands for any step.
    staging.valid = false;
    if (committed_buffer == staging_index) committed_buffer = -1;
    if (last_snapshot == staging_index) last_snapshot = source_index;
    return s;
  }
  staging.entries.assign(reg.tensors().begin(), reg.tensors().end());
  staging.step = step;
  staging.valid = true;
  TSR_RETURN_IF_ERROR(write_back(staging.data, staging.blobs));
  // The snapshot in the new layout stands for the step in the new world; the old world's are gone.
  committed_buffer = committed_buffer == source_index ? staging_index : -1;
  last_snapshot = staging_index;
  buffers[source_index].valid = false;
  replica = Replica{};
  shrink.reset();
  LoadResult out;
  out.step = step;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TSR_LOG(kInfo, "ckpt") << "resharded step " << step << " in memory onto " << size
                         << " ranks (from " << sh.old_size << ") in " << out.seconds << " s";
  return out;
}

}  // namespace tessera::ckpt
