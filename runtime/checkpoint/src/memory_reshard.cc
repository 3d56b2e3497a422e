// In-memory resharding (Checkpointer::reshard_from_memory): every rank describes the snapshot it
// holds and the slices it now needs; every rank computes the same transfer plan from that; the
// parts then travel between pairs of ranks in one global order, so blocking sends never wait on
// each other in a circle. No storage is read or written.
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "impl.h"
#include "overlap.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::json;

struct Described {
  std::string name, dtype;
  std::vector<int64_t> shape;
  Slice slice;
};

Json describe(const std::vector<TensorEntry>& tensors) {
  Json out = Json::array();
  for (const auto& t : tensors) {
    out.push_back(
        {t.name, std::string(hal::dtype_name(t.dtype)), t.shape, t.slice.offset, t.slice.len});
  }
  return out;
}

std::vector<Described> described(const Json& list) {
  std::vector<Described> out;
  for (const Json& t : list) {
    out.push_back(Described{
        t[0].get<std::string>(), t[1].get<std::string>(), t[2].get<std::vector<int64_t>>(),
        Slice{t[3].get<std::vector<int64_t>>(), t[4].get<std::vector<int64_t>>()}});
  }
  return out;
}

// One part to move: from tensor `src_tensor` of rank `from`'s snapshot to tensor `dst_tensor` of
// rank `to`'s new registry.
struct Part {
  int from, to;
  size_t src_tensor, dst_tensor;
  Slice region;
};

// The same on every rank: for each rank's new slice, the distinct old slices that overlap it, each
// taken from the receiving rank itself when it holds it, else from the lowest rank that does.
Result<std::vector<Part>> plan_parts(const std::vector<std::vector<Described>>& old_tensors,
                                     const std::vector<std::vector<Described>>& new_tensors) {
  const int size = static_cast<int>(old_tensors.size());
  std::vector<Part> parts;
  for (int q = 0; q < size; ++q) {
    for (size_t t = 0; t < new_tensors[q].size(); ++t) {
      const Described& want = new_tensors[q][t];
      // Distinct old slices of this tensor: slice text -> (holders, index in each holder).
      std::map<std::string, std::vector<std::pair<int, size_t>>> holders;
      std::map<std::string, Slice> slices;
      for (int p = 0; p < size; ++p) {
        for (size_t i = 0; i < old_tensors[p].size(); ++i) {
          const Described& had = old_tensors[p][i];
          if (had.name != want.name) continue;
          if (had.dtype != want.dtype || had.shape != want.shape) {
            return invalid_argument("reshard_from_memory: tensor '" + want.name + "' on rank " +
                                    std::to_string(q) + " is " + want.dtype +
                                    " of another shape than in the snapshot of rank " +
                                    std::to_string(p) + " (" + had.dtype + ")");
          }
          const std::string key = slice_text(had.slice);
          holders[key].push_back({p, i});
          slices[key] = had.slice;
        }
      }
      int64_t covered = 0;
      for (const auto& [key, list] : holders) {
        Slice region;
        if (want.slice.elements() == 0 || !intersect(want.slice, slices[key], &region)) continue;
        std::pair<int, size_t> from = list.front();
        for (const auto& h : list) {
          if (h.first == q) from = h;
        }
        covered += region.elements();
        parts.push_back(Part{from.first, q, from.second, t, region});
      }
      if (covered < want.slice.elements()) {
        return failed_precondition("reshard_from_memory: tensor '" + want.name + "' slice " +
                                   slice_text(want.slice) + " of rank " + std::to_string(q) +
                                   " is not held by the snapshot of any rank");
      }
    }
  }
  return parts;
}

}  // namespace

Status Checkpointer::Impl::reshard_exchange(const Snapshot& source, Snapshot& staging) {
  RankGroup& group = *self->group_;
  const int size = group.size(), rank = group.rank();
  const StateRegistry& reg = self->registry_;
  Json mine = {
      {"step", source.step}, {"old", describe(source.entries)}, {"new", describe(reg.tensors())}};
  TSR_ASSIGN_OR_RETURN(auto gathered, group.allgather(mine.dump()));
  std::vector<std::vector<Described>> old_tensors(size), new_tensors(size);
  for (int r = 0; r < size; ++r) {
    const Json j = Json::parse(gathered[r], nullptr, false);
    if (j.is_discarded() || !j.contains("step")) {
      return internal_error("reshard_from_memory: malformed description from rank " +
                            std::to_string(r));
    }
    if (j["step"].get<int64_t>() != source.step) {
      return failed_precondition("reshard_from_memory: rank " + std::to_string(r) +
                                 " holds a snapshot of step " +
                                 std::to_string(j["step"].get<int64_t>()) + ", rank " +
                                 std::to_string(rank) + " of step " + std::to_string(source.step));
    }
    try {
      old_tensors[r] = described(j["old"]);
      new_tensors[r] = described(j["new"]);
    } catch (const std::exception& e) {
      return internal_error("reshard_from_memory: malformed description from rank " +
                            std::to_string(r) + ": " + e.what());
    }
  }
  TSR_ASSIGN_OR_RETURN(std::vector<Part> parts, plan_parts(old_tensors, new_tensors));

  // Every rank prepares its staging buffer and its blobs before anything moves, and all agree that
  // they could, so no rank waits for one that already gave up.
  Status local = reserve(staging, reg.total_tensor_bytes());
  staging.offsets.clear();
  size_t offset = 0;
  for (const auto& t : reg.tensors()) {
    staging.offsets.push_back(offset);
    offset += t.bytes();
  }
  staging.blob_names.clear();
  staging.blobs.clear();
  for (const auto& b : reg.blobs()) {
    size_t i = 0;
    while (i < source.blob_names.size() && source.blob_names[i] != b.name) ++i;
    if (i == source.blob_names.size() && local.ok()) {
      local =
          not_found("reshard_from_memory: blob '" + b.name + "' of rank " + std::to_string(rank) +
                    " is not in its snapshot of step " + std::to_string(source.step));
    }
    staging.blob_names.push_back(b.name);
    staging.blobs.push_back(i < source.blobs.size() ? source.blobs[i] : std::string());
  }
  TSR_ASSIGN_OR_RETURN(auto ready, group.allgather(local.ok() ? "" : local.to_string()));
  for (int r = 0; r < size; ++r) {
    if (!ready[r].empty())
      return failed_precondition("rank " + std::to_string(r) + ": " + ready[r]);
  }

  auto esize = [&](size_t dst_tensor) { return hal::dtype_size(reg.tensors()[dst_tensor].dtype); };
  // Parts this rank keeps.
  for (const Part& p : parts) {
    if (p.from != rank || p.to != rank) continue;
    copy_region(source.data + source.offsets[p.src_tensor], source.entries[p.src_tensor].slice,
                staging.data + staging.offsets[p.dst_tensor], reg.tensors()[p.dst_tensor].slice,
                p.region, esize(p.dst_tensor));
  }
  // Pairs (i < j) in one global order; the lower rank sends first.
  auto pack = [&](int to) {
    std::string out;
    for (const Part& p : parts) {
      if (p.from != rank || p.to != to) continue;
      const size_t es = hal::dtype_size(source.entries[p.src_tensor].dtype);
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(p.region.elements()) * es);
      copy_region(source.data + source.offsets[p.src_tensor], source.entries[p.src_tensor].slice,
                  reinterpret_cast<std::byte*>(out.data() + at), p.region, p.region, es);
    }
    return out;
  };
  auto unpack = [&](int from, const std::string& in) -> Status {
    size_t at = 0;
    for (const Part& p : parts) {
      if (p.from != from || p.to != rank) continue;
      const size_t bytes = static_cast<size_t>(p.region.elements()) * esize(p.dst_tensor);
      if (at + bytes > in.size()) break;
      copy_region(reinterpret_cast<const std::byte*>(in.data() + at), p.region,
                  staging.data + staging.offsets[p.dst_tensor], reg.tensors()[p.dst_tensor].slice,
                  p.region, esize(p.dst_tensor));
      at += bytes;
    }
    if (at != in.size()) {
      return data_loss("reshard_from_memory: rank " + std::to_string(from) + " sent " +
                       std::to_string(in.size()) + " bytes, rank " + std::to_string(rank) +
                       " expected " + std::to_string(at) + " or more");
    }
    return Status();
  };
  auto moves = [&](int from, int to) {
    for (const Part& p : parts) {
      if (p.from == from && p.to == to) return true;
    }
    return false;
  };
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      if (i != rank && j != rank) continue;
      const int other = i == rank ? j : i;
      const bool out = moves(rank, other), in = moves(other, rank);
      auto do_send = [&]() -> Status { return out ? group.send(other, pack(other)) : Status(); };
      auto do_recv = [&]() -> Status {
        if (!in) return Status();
        TSR_ASSIGN_OR_RETURN(std::string bytes, group.recv(other));
        return unpack(other, bytes);
      };
      if (rank == i) {
        TSR_RETURN_IF_ERROR(do_send());
        TSR_RETURN_IF_ERROR(do_recv());
      } else {
        TSR_RETURN_IF_ERROR(do_recv());
        TSR_RETURN_IF_ERROR(do_send());
      }
    }
  }
  staging.entries.assign(reg.tensors().begin(), reg.tensors().end());
  staging.step = source.step;
  staging.valid = true;
  return Status();
}

Result<LoadResult> Checkpointer::reshard_from_memory() {
  impl_->wait_idle();
  const auto t0 = std::chrono::steady_clock::now();
  const int source_index = impl_->last_snapshot;
  // Every rank takes part in the collective calls even without a snapshot, so they all see why.
  static const Snapshot kNone;
  const bool have = source_index >= 0 && impl_->buffers[source_index].valid;
  const Snapshot& source = have ? impl_->buffers[source_index] : kNone;
  const int staging_index = source_index == 0 ? 1 : 0;
  Snapshot& staging = impl_->buffers[staging_index];
  Status s = impl_->reshard_exchange(source, staging);
  if (!have) {
    return failed_precondition("reshard_from_memory on rank " + std::to_string(group_->rank()) +
                               ": no snapshot (call save_async and wait first)");
  }
  if (!s.ok()) {
    // The staging buffer may be half written: it no longer stands for any step.
    staging.valid = false;
    if (impl_->committed_buffer == staging_index) impl_->committed_buffer = -1;
    return s;
  }
  TSR_RETURN_IF_ERROR(impl_->write_back(staging.data, staging.blobs));
  // The snapshot in the new layout stands for the same step; the old layout's are stale.
  impl_->committed_buffer = impl_->committed_buffer == source_index ? staging_index : -1;
  impl_->last_snapshot = staging_index;
  impl_->buffers[source_index].valid = false;
  impl_->replica = Impl::Replica{};
  LoadResult out;
  out.step = source.step;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TSR_LOG(kInfo, "ckpt") << "resharded step " << out.step << " in memory in " << out.seconds
                         << " s";
  return out;
}

}  // namespace tessera::ckpt
