// In-memory resharding (Checkpointer::reshard_from_memory): every rank describes the snapshot it
// holds and the slices it now needs; every rank computes the same transfer plan from that; the
// parts then travel between pairs of ranks in one global order, so blocking sends never wait on
// each other in a circle. No storage is read or written. This file holds the shared pieces
// (memory_reshard.h) and the path within a group of the same size; after ranks were lost
// (rebind_shrunk) shrink_reshard.cc finds the sources among the survivors' snapshots and replicas.
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "memory_reshard.h"
#include "overlap.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace memory_reshard {

using Json = nlohmann::json;

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

Result<std::vector<Part>> plan_parts(const std::vector<Source>& sources,
                                     const std::vector<std::vector<Described>>& new_tensors) {
  const int size = static_cast<int>(new_tensors.size());
  std::vector<Part> parts;
  for (int q = 0; q < size; ++q) {
    for (size_t t = 0; t < new_tensors[q].size(); ++t) {
      const Described& want = new_tensors[q][t];
      // Distinct source slices of this tensor: slice text -> (source, index in it) for each.
      std::map<std::string, std::vector<std::pair<size_t, size_t>>> holders;
      std::map<std::string, Slice> slices;
      for (size_t p = 0; p < sources.size(); ++p) {
        for (size_t i = 0; i < sources[p].tensors.size(); ++i) {
          const Described& had = sources[p].tensors[i];
          if (had.name != want.name) continue;
          if (had.dtype != want.dtype || had.shape != want.shape) {
            return invalid_argument("reshard_from_memory: tensor '" + want.name + "' on rank " +
                                    std::to_string(q) + " is " + want.dtype +
                                    " of another shape than in " + sources[p].what + " (" +
                                    had.dtype + ")");
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
        std::pair<size_t, size_t> from = list.front();
        for (const auto& h : list) {
          if (sources[h.first].holder == q) from = h;
        }
        covered += region.elements();
        parts.push_back(Part{sources[from.first].holder, q, from.first, from.second, t, region});
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

LocalSource local_source(const std::byte* data, const std::vector<TensorEntry>& entries) {
  LocalSource out;
  out.data = data;
  size_t offset = 0;
  for (const TensorEntry& t : entries) {
    out.offsets.push_back(offset);
    out.esizes.push_back(hal::dtype_size(t.dtype));
    offset += t.bytes();
  }
  return out;
}

Status prepare_staging(RankGroup& group, const StateRegistry& reg, const Snapshot& source,
                       Snapshot& staging, Status local) {
  const int rank = group.rank();
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
  for (int r = 0; r < group.size(); ++r) {
    if (!ready[r].empty())
      return failed_precondition("rank " + std::to_string(r) + ": " + ready[r]);
  }
  return Status();
}

namespace {

// The parts this rank keeps are copied in place; the others travel pairwise.
class PartExchange {
 public:
  PartExchange(RankGroup& group, const StateRegistry& reg, const std::vector<Source>& sources,
               const std::vector<Part>& parts, const std::vector<LocalSource>& local,
               Snapshot& staging)
      : group_(group),
        reg_(reg),
        sources_(sources),
        parts_(parts),
        local_(local),
        staging_(staging),
        rank_(group.rank()) {}

  Status run() {
    keep_local();
    // Pairs (i < j) in one global order; the lower rank sends first.
    for (int i = 0; i < group_.size(); ++i) {
      for (int j = i + 1; j < group_.size(); ++j) {
        if (i != rank_ && j != rank_) continue;
        TSR_RETURN_IF_ERROR(trade(i == rank_ ? j : i, rank_ == i));
      }
    }
    return Status();
  }

 private:
  size_t esize(size_t dst_tensor) const {
    return hal::dtype_size(reg_.tensors()[dst_tensor].dtype);
  }
  // Where part p's source tensor starts in this rank's memory, and its slice.
  const std::byte* src_data(const Part& p) const {
    const LocalSource& s = local_[p.source];
    return s.data + s.offsets[p.src_tensor];
  }
  const Slice& src_slice(const Part& p) const {
    return sources_[p.source].tensors[p.src_tensor].slice;
  }

  void keep_local() {
    for (const Part& p : parts_) {
      if (p.from != rank_ || p.to != rank_) continue;
      copy_region(src_data(p), src_slice(p), staging_.data + staging_.offsets[p.dst_tensor],
                  reg_.tensors()[p.dst_tensor].slice, p.region, esize(p.dst_tensor));
    }
  }

  bool moves(int from, int to) const {
    for (const Part& p : parts_) {
      if (p.from == from && p.to == to) return true;
    }
    return false;
  }

  std::string pack(int to) const {
    std::string out;
    for (const Part& p : parts_) {
      if (p.from != rank_ || p.to != to) continue;
      const size_t es = local_[p.source].esizes[p.src_tensor];
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(p.region.elements()) * es);
      copy_region(src_data(p), src_slice(p), reinterpret_cast<std::byte*>(out.data() + at),
                  p.region, p.region, es);
    }
    return out;
  }

  Status unpack(int from, const std::string& in) {
    size_t at = 0;
    for (const Part& p : parts_) {
      if (p.from != from || p.to != rank_) continue;
      const size_t bytes = static_cast<size_t>(p.region.elements()) * esize(p.dst_tensor);
      if (at + bytes > in.size()) break;
      copy_region(reinterpret_cast<const std::byte*>(in.data() + at), p.region,
                  staging_.data + staging_.offsets[p.dst_tensor],
                  reg_.tensors()[p.dst_tensor].slice, p.region, esize(p.dst_tensor));
      at += bytes;
    }
    if (at != in.size()) {
      return data_loss("reshard_from_memory: rank " + std::to_string(from) + " sent " +
                       std::to_string(in.size()) + " bytes, rank " + std::to_string(rank_) +
                       " expected " + std::to_string(at) + " or more");
    }
    return Status();
  }

  // One pair's exchange; the lower rank sends first, so the two never both wait to receive.
  Status trade(int other, bool send_first) {
    auto send = [&]() -> Status {
      return moves(rank_, other) ? group_.send(other, pack(other)) : Status();
    };
    auto receive = [&]() -> Status {
      if (!moves(other, rank_)) return Status();
      TSR_ASSIGN_OR_RETURN(std::string bytes, group_.recv(other));
      return unpack(other, bytes);
    };
    if (send_first) {
      TSR_RETURN_IF_ERROR(send());
      return receive();
    }
    TSR_RETURN_IF_ERROR(receive());
    return send();
  }

  RankGroup& group_;
  const StateRegistry& reg_;
  const std::vector<Source>& sources_;
  const std::vector<Part>& parts_;
  const std::vector<LocalSource>& local_;
  Snapshot& staging_;
  const int rank_;
};

}  // namespace

Status exchange_parts(RankGroup& group, const StateRegistry& reg,
                      const std::vector<Source>& sources, const std::vector<Part>& parts,
                      const std::vector<LocalSource>& local, Snapshot& staging) {
  return PartExchange(group, reg, sources, parts, local, staging).run();
}

}  // namespace memory_reshard

namespace {

using namespace memory_reshard;

// Phase 1 of the same-size path: every rank's old and new tensor descriptions, all of the same
// step, and the parts (regions of tensors) that move from one rank to another.
Result<std::vector<Part>> agree_on_parts(RankGroup& group, const StateRegistry& reg,
                                         const Snapshot& source, std::vector<Source>* sources) {
  const int size = group.size(), rank = group.rank();
  Json mine = {
      {"step", source.step}, {"old", describe(source.entries)}, {"new", describe(reg.tensors())}};
  TSR_ASSIGN_OR_RETURN(auto gathered, group.allgather(mine.dump()));
  sources->assign(size, Source{});
  std::vector<std::vector<Described>> new_tensors(size);
  for (int r = 0; r < size; ++r) {
    const Json j = Json::parse(gathered[r], nullptr, false);
    if (!j.is_discarded() && j.contains("shrink")) {
      return failed_precondition("reshard_from_memory: rank " + std::to_string(r) +
                                 " is resharding after rebind_shrunk, rank " +
                                 std::to_string(rank) + " is not (every rank must rebind alike)");
    }
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
      (*sources)[r] = Source{r, described(j["old"]), "the snapshot of rank " + std::to_string(r)};
      new_tensors[r] = described(j["new"]);
    } catch (const std::exception& e) {
      return internal_error("reshard_from_memory: malformed description from rank " +
                            std::to_string(r) + ": " + e.what());
    }
  }
  return plan_parts(*sources, new_tensors);
}

}  // namespace

Status Checkpointer::Impl::reshard_exchange(const Snapshot& source, Snapshot& staging) {
  RankGroup& group = *self->group_;
  const StateRegistry& reg = self->registry_;
  std::vector<Source> sources;
  TSR_ASSIGN_OR_RETURN(std::vector<Part> parts, agree_on_parts(group, reg, source, &sources));
  TSR_RETURN_IF_ERROR(
      prepare_staging(group, reg, source, staging, reserve(staging, reg.total_tensor_bytes())));
  std::vector<LocalSource> local(sources.size());
  local[static_cast<size_t>(group.rank())] = local_source(source.data, source.entries);
  TSR_RETURN_IF_ERROR(exchange_parts(group, reg, sources, parts, local, staging));
  staging.entries.assign(reg.tensors().begin(), reg.tensors().end());
  staging.step = source.step;
  staging.valid = true;
  return Status();
}

Result<LoadResult> Checkpointer::reshard_from_memory() {
  impl_->wait_idle();
  if (impl_->shrink) return impl_->reshard_after_shrink();
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
