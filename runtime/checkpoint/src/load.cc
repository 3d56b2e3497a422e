// Loading: pick the checkpoint (latest, a given step, or older ones with fallback), verify it,
// and fill each registered slice from the overlapping parts of the saved shards, whatever layout
// they were saved under. Only the chunks that overlap this rank's slices are read.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "codec.h"
#include "fs.h"
#include "impl.h"
#include "overlap.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace {

// "[4096, 1024]"
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

}  // namespace

void Checkpointer::Impl::wait_idle() {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return !busy; });
}

Status Checkpointer::Impl::load_step(int64_t step, Snapshot& staging, LoadResult* result) {
  const CheckpointOptions& opt = self->options_;
  const StateRegistry& reg = self->registry_;
  const int rank = self->group_->rank();
  TSR_ASSIGN_OR_RETURN(Manifest m, read_manifest(opt.dir, step));
  TSR_RETURN_IF_ERROR(check_files(opt.dir, m));
  if (m.delta) {
    auto base_manifest = read_manifest(opt.dir, m.base_step);
    if (!base_manifest.ok()) {
      return base_manifest.status().with_context("base of delta step " + std::to_string(step));
    }
    TSR_RETURN_IF_ERROR(check_files(opt.dir, *base_manifest));
  }
  TSR_RETURN_IF_ERROR(reserve(staging, reg.total_tensor_bytes()));
  codec::ChunkReader reader(opt.dir);
  size_t offset = 0;
  for (const TensorEntry& t : reg.tensors()) {
    std::byte* dst = staging.data + offset;
    offset += t.bytes();
    const TensorRecord* rec = m.find_tensor(t.name);
    if (rec == nullptr)
      return not_found("tensor '" + t.name + "' is not in step " + std::to_string(step));
    if (rec->dtype != hal::dtype_name(t.dtype) || rec->shape != t.shape) {
      return invalid_argument("tensor '" + t.name + "': step " + std::to_string(step) +
                              " saved it as " + rec->dtype + " " + shape_text(rec->shape) +
                              ", registered as " + std::string(hal::dtype_name(t.dtype)) + " " +
                              shape_text(t.shape));
    }
    int64_t covered = 0;
    for (const ShardRecord& s : rec->shards) {
      Slice inter;
      if (t.slice.elements() == 0 || !intersect(t.slice, s.slice, &inter)) continue;
      covered += inter.elements();
      TSR_RETURN_IF_ERROR(
          copy_overlap(reader, *rec, s, t.slice, inter, hal::dtype_size(t.dtype), dst));
    }
    if (covered < t.slice.elements()) {
      return data_loss("tensor '" + t.name + "' slice " + slice_text(t.slice) +
                       " is not covered by the shards of step " + std::to_string(step));
    }
  }
  staging.blobs.assign(reg.blobs().size(), std::string());
  for (size_t i = 0; i < reg.blobs().size(); ++i) {
    const std::string& name = reg.blobs()[i].name;
    const BlobRecord* found = nullptr;
    for (const BlobRecord& b : m.blobs) {
      if (b.name != name) continue;
      if (b.rank == rank)
        found = &b;
      else if (b.replicated && found == nullptr)
        found = &b;
    }
    if (found == nullptr) {
      return not_found("blob '" + name + "' of rank " + std::to_string(rank) + " is not in step " +
                       std::to_string(step));
    }
    TSR_RETURN_IF_ERROR(reader.read_blob(*found, &staging.blobs[i]));
  }
  result->bytes_read = reader.bytes_read();
  result->chunks_read = reader.chunks_read();
  return Status();
}

Result<LoadResult> Checkpointer::load(const LoadOptions& options) {
  impl_->wait_idle();
  const auto t0 = std::chrono::steady_clock::now();
  RankGroup& group = *group_;
  // Rank 0 chooses the candidates so that every rank tries the same ones.
  nlohmann::json mine = nlohmann::json::array();
  std::string choose_error;
  if (group.rank() == 0) {
    if (options.step) {
      mine.push_back(*options.step);
    } else {
      auto latest = read_latest(options_.dir);
      if (latest.ok())
        mine.push_back(*latest);
      else if (!options.fallback)
        choose_error = latest.status().message();
      if (options.fallback) {
        auto steps = list_steps(options_.dir);
        if (steps.ok()) {
          for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
            if (it->committed && (!latest.ok() || it->step < *latest)) mine.push_back(it->step);
          }
        }
      }
    }
  }
  TSR_ASSIGN_OR_RETURN(auto chosen,
                       group.allgather(choose_error.empty() ? mine.dump() : "!" + choose_error));
  if (chosen[0].rfind("!", 0) == 0) return not_found("load: " + chosen[0].substr(1));
  const nlohmann::json parsed = nlohmann::json::parse(chosen[0], nullptr, false);
  if (!parsed.is_array()) return internal_error("load: malformed candidate list from rank 0");
  std::vector<int64_t> candidates;
  for (const auto& c : parsed) {
    if (!c.is_number_integer()) return internal_error("load: malformed candidate from rank 0");
    candidates.push_back(c.get<int64_t>());
  }
  if (candidates.empty())
    return not_found("load: no committed checkpoint in '" + options_.dir + "'");

  Snapshot& staging = impl_->buffers[impl_->committed_buffer == 0 ? 1 : 0];
  LoadResult result;
  for (int64_t step : candidates) {
    Status local = impl_->load_step(step, staging, &result);
    TSR_ASSIGN_OR_RETURN(auto outcomes, group.allgather(local.ok() ? "" : local.to_string()));
    std::string failure;
    for (size_t r = 0; r < outcomes.size() && failure.empty(); ++r) {
      if (!outcomes[r].empty()) failure = "rank " + std::to_string(r) + ": " + outcomes[r];
    }
    if (failure.empty()) {
      TSR_RETURN_IF_ERROR(impl_->write_back(staging.data, staging.blobs));
      // After a shrink the registry now holds the new world's state from storage.
      if (impl_->shrink) impl_->forget_old_world();
      result.step = step;
      result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return result;
    }
    result.refused.push_back(step_dir_name(step) + ": " + failure);
    TSR_LOG(kWarn, "ckpt") << "refused " << result.refused.back();
    if (!options.fallback) {
      return data_loss("checkpoint " + step_dir_name(step) + " refused: " + failure);
    }
  }
  std::string all;
  for (const auto& r : result.refused) all += (all.empty() ? "" : "; ") + r;
  return data_loss("no loadable checkpoint in '" + options_.dir + "': " + all);
}

}  // namespace tessera::ckpt
