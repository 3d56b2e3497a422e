#include "tessera/checkpoint/reshard.h"

#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "chunk_encoder.h"
#include "codec.h"
#include "fs.h"
#include "impl.h"
#include "overlap.h"
#include "publish.h"
#include "step_paths.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {
namespace {

// The step to read: committed (step-N/ with N <= `latest`).
Result<int64_t> committed_step(const std::string& src, const std::optional<int64_t>& step) {
  if (!std::filesystem::is_directory(src)) {
    return not_found("'" + src + "' is not a checkpoint directory");
  }
  if (!step) {
    auto latest = read_latest_committed(src);
    if (!latest.ok()) return latest.status().with_context("'" + src + "/latest'");
    return *latest;
  }
  auto latest = read_latest(src);
  const StepPaths paths(src, *step);
  if (!fs::exists(paths.final_dir)) {
    if (fs::exists(paths.tmp_dir)) {
      return failed_precondition("'" + paths.final_dir + "' is not committed (only " + paths.rel +
                                 ".tmp: a save in flight or interrupted)");
    }
    return not_found("'" + paths.final_dir + "' does not exist");
  }
  if (!latest.ok() || *step > *latest) {
    return failed_precondition("'" + paths.final_dir + "' is not committed: `latest` names " +
                               (latest.ok() ? step_dir_name(*latest) : "no step") +
                               " (a save interrupted before it was published)");
  }
  return *step;
}

// The options' target layout and chunk size, before anything is read.
Status check_target(const ReshardOptions& options) {
  const ParallelLayout& to = options.to;
  TSR_RETURN_IF_ERROR(check_layout_bounds(to, "reshard: target layout"));
  if (to.tp < 1 || to.pp < 1 || to.dp < 1 || to.cp < 1 || to.ep < 1 || to.dp % to.ep != 0) {
    return invalid_argument("reshard: tp, cp, dp, pp and ep must be >= 1 and ep must divide dp (" +
                            to.text() + ")");
  }
  if (options.chunk_bytes > kMaxChunkBytes) {
    return invalid_argument("reshard: chunk_bytes " + std::to_string(options.chunk_bytes) +
                            " is above the limit of " + std::to_string(kMaxChunkBytes));
  }
  return Status();
}

// The source's manifest, its files (and its base's, for a delta) checked against the manifest.
Result<Manifest> read_source(const std::string& src_root, const std::string& dst_root,
                             const ReshardOptions& options) {
  TSR_ASSIGN_OR_RETURN(const int64_t step, committed_step(src_root, options.step));
  TSR_ASSIGN_OR_RETURN(Manifest src, read_manifest(src_root, step));
  TSR_RETURN_IF_ERROR(check_files(src_root, src));
  if (src.delta) {
    auto base = read_manifest(src_root, src.base_step);
    if (!base.ok()) return base.status().with_context("base of delta step " + std::to_string(step));
    TSR_RETURN_IF_ERROR(check_files(src_root, *base));
  }
  std::error_code ec;
  const auto a = std::filesystem::weakly_canonical(src_root, ec);
  const auto b = std::filesystem::weakly_canonical(dst_root, ec);
  if (a == b) return invalid_argument("reshard: --out '" + dst_root + "' is the source itself");
  return src;
}

// Each tensor's placement: the layout file's overrides the manifest's; none means written whole.
Result<std::vector<std::optional<Placement>>> choose_placements(const Manifest& src,
                                                                const std::string& src_root,
                                                                const ReshardOptions& options,
                                                                ReshardResult* result) {
  for (const auto& [name, p] : options.placements) {
    if (src.find_tensor(name) == nullptr) {
      return invalid_argument("placement for tensor '" + name + "': not in " +
                              step_dir_name(src.step) + " of '" + src_root + "'");
    }
  }
  std::vector<std::optional<Placement>> placement(src.tensors.size());
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    auto it = options.placements.find(src.tensors[i].name);
    placement[i] =
        it != options.placements.end() ? std::optional(it->second) : src.tensors[i].placement;
    if (!placement[i]) result->whole.push_back(src.tensors[i].name);
  }
  return placement;
}

// What one rank of the target layout writes: (tensor index, slice) first seen on it, its blobs.
struct RankWrites {
  std::vector<std::pair<size_t, Slice>> tensors;
  std::vector<const BlobRecord*> blobs;
};

struct WritePlan {
  std::map<int, RankWrites> ranks;  // only the ranks that write a file
  uint64_t total = 0;               // raw bytes to write
};

// Every slice of every rank first: a bad layout fails before anything is written. Only what a
// rank writes is kept (a slice first seen there, its blobs): ranks holding only replicas write
// no file, so memory, files and bytes follow the source's size, not the target's world (a dp of
// a million would otherwise mean a million files and slice lists).
Result<WritePlan> plan_writes(const Manifest& src,
                              const std::vector<std::optional<Placement>>& placement,
                              const ParallelLayout& to) {
  const int world = to.size();
  WritePlan plan;
  std::set<std::string> counted;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < src.tensors.size(); ++i) {
      if (r > 0 && !placement[i]) continue;  // whole on every rank: rank 0 writes it
      const TensorRecord& t = src.tensors[i];
      TSR_ASSIGN_OR_RETURN(auto s, layout_slice(t.name, t.shape, placement[i], to, r));
      if (!s || !counted.insert(shard_key(t.name, *s)).second) continue;
      auto dtype = hal::parse_dtype(t.dtype);
      if (!dtype) return data_loss("tensor '" + t.name + "': unknown dtype '" + t.dtype + "'");
      plan.total += static_cast<uint64_t>(s->elements()) * hal::dtype_size(*dtype);
      plan.ranks[r].tensors.emplace_back(i, std::move(*s));
    }
  }
  for (const BlobRecord& b : src.blobs) {
    if (!b.replicated && b.rank >= world) continue;
    plan.total += b.size;
    plan.ranks[b.replicated ? 0 : b.rank].blobs.push_back(&b);
  }
  return plan;
}

// The destination: no step-N/ yet and no newer `latest`; an empty step-N.tmp/ to write into.
Status prepare_target(const StepPaths& paths) {
  TSR_RETURN_IF_ERROR(fs::make_dirs(paths.root));
  if (fs::exists(paths.final_dir)) {
    return already_exists("'" + paths.final_dir + "' already exists");
  }
  if (auto latest = read_latest(paths.root); latest.ok() && *latest > paths.step) {
    return failed_precondition("'" + paths.root + "/latest' names a newer step (" +
                               step_dir_name(*latest) + ")");
  }
  TSR_RETURN_IF_ERROR(fs::remove_all(paths.tmp_dir));  // left by an interrupted reshard
  return fs::make_dirs(paths.tmp_dir);
}

// The target manifest before any shard is written: the source's tensors with their placements.
Manifest target_manifest(const Manifest& src, const std::string& src_root, const ParallelLayout& to,
                         const std::vector<std::optional<Placement>>& placement) {
  Manifest out;
  out.step = src.step;
  out.world_size = to.size();
  out.layout = to.text();
  out.metadata = src.metadata;
  out.metadata["resharded_from"] = src_root + "/" + step_dir_name(src.step) + " (world " +
                                   std::to_string(src.world_size) +
                                   (src.layout.empty() ? "" : ", " + src.layout) + ")";
  out.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    out.tensors.push_back(TensorRecord{
        src.tensors[i].name, src.tensors[i].dtype, src.tensors[i].shape, {}, placement[i]});
  }
  return out;
}

// The options' chunk size, else the source's, else the save's default.
size_t target_chunk_bytes(const ReshardOptions& options, const Manifest& src) {
  if (options.chunk_bytes != 0) return options.chunk_bytes;
  for (const auto& t : src.tensors) {
    if (!t.shards.empty() && t.shards[0].chunk_bytes != 0) return t.shards[0].chunk_bytes;
  }
  return 4u << 20;
}

// Writes the target's shard files, one per writing rank, from the overlapping source chunks.
class TargetWriter {
 public:
  TargetWriter(const std::string& src_root, const Manifest& src, const StepPaths& paths,
               const ReshardOptions& options, size_t chunk_bytes, uint64_t total,
               ReshardResult* result)
      : reader_(src_root),
        src_(src),
        paths_(paths),
        options_(options),
        chunk_bytes_(chunk_bytes),
        total_(total),
        result_(result) {}

  // Rank r's file and its records in *out.
  Status write_rank(int r, const RankWrites& mine, Manifest* out);
  const codec::ChunkReader& reader() const { return reader_; }

 private:
  // Counts and reports progress after each stored chunk.
  Status after_store(uint64_t raw, uint64_t stored) {
    result_->bytes_written += stored;
    result_->bytes_raw += raw;
    done_ += raw;
    if (options_.progress) options_.progress(done_, total_);
    return Status();
  }
  // The bytes of `slice` of source tensor t, assembled from the shards that overlap it.
  Status gather_slice(const TensorRecord& t, const Slice& slice);

  codec::ChunkReader reader_;
  const Manifest& src_;
  const StepPaths& paths_;
  const ReshardOptions& options_;
  const size_t chunk_bytes_;
  const uint64_t total_;
  ReshardResult* result_;
  uint64_t done_ = 0;
  std::vector<std::byte> buffer_;
};

Status TargetWriter::gather_slice(const TensorRecord& t, const Slice& slice) {
  const size_t esize = hal::dtype_size(*hal::parse_dtype(t.dtype));
  buffer_.resize(static_cast<size_t>(slice.elements()) * esize);
  int64_t covered = 0;
  for (const ShardRecord& s : t.shards) {
    Slice inter;
    if (slice.elements() == 0 || !intersect(slice, s.slice, &inter)) continue;
    covered += inter.elements();
    TSR_RETURN_IF_ERROR(copy_overlap(reader_, t, s, slice, inter, esize, buffer_.data()));
  }
  if (covered < slice.elements()) {
    return data_loss("tensor '" + t.name + "' slice " + slice_text(slice) +
                     " is not covered by the shards of " + step_dir_name(src_.step));
  }
  return Status();
}

Status TargetWriter::write_rank(int r, const RankWrites& mine, Manifest* out) {
  TSR_ASSIGN_OR_RETURN(
      auto file,
      codec::ShardWriter::create(paths_.tmp_shard(r), paths_.shard_name(r), options_.direct_io));
  ChunkEncoder encoder(*file, options_.zstd_level,
                       [this](uint64_t raw, uint64_t stored) { return after_store(raw, stored); });
  for (const auto& [i, slice] : mine.tensors) {
    TSR_RETURN_IF_ERROR(gather_slice(src_.tensors[i], slice));
    ShardRecord rec{r, slice, chunk_bytes_, {}};
    TSR_RETURN_IF_ERROR(
        encoder.store_chunks(buffer_.data(), buffer_.size(), chunk_bytes_, &rec.chunks));
    out->tensors[i].shards.push_back(std::move(rec));
  }
  for (const BlobRecord* b : mine.blobs) {
    std::string bytes;
    TSR_RETURN_IF_ERROR(reader_.read_blob(*b, &bytes));
    BlobRecord rec{b->name, r, b->replicated, bytes.size(), {}};
    TSR_RETURN_IF_ERROR(
        encoder.store_chunks(bytes.data(), bytes.size(), chunk_bytes_, &rec.chunks));
    out->blobs.push_back(std::move(rec));
  }
  TSR_ASSIGN_OR_RETURN(FileRecord f, file->finish(options_.fsync));
  out->files.push_back(std::move(f));
  return Status();
}

// Writes every target file into step-N.tmp/ and publishes it.
Status write_and_publish(const std::string& src_root, const Manifest& src, const StepPaths& paths,
                         const ReshardOptions& options, const WritePlan& plan, Manifest out,
                         ReshardResult* result) {
  TargetWriter writer(src_root, src, paths, options, target_chunk_bytes(options, src), plan.total,
                      result);
  for (const auto& [r, mine] : plan.ranks) TSR_RETURN_IF_ERROR(writer.write_rank(r, mine, &out));
  for (const BlobRecord& b : src.blobs) {
    if (!b.replicated && b.rank >= out.world_size) {
      result->dropped_blobs.push_back(b.name + " of rank " + std::to_string(b.rank));
    }
  }
  result->bytes_read = writer.reader().bytes_read();
  result->chunks_read = writer.reader().chunks_read();
  return publish_step(paths, out, options.fsync);
}

}  // namespace

static Result<ReshardResult> reshard_unguarded(const std::string& src_root,
                                               const std::string& dst_root,
                                               const ReshardOptions& options) {
  TSR_RETURN_IF_ERROR(check_target(options));
  TSR_ASSIGN_OR_RETURN(const Manifest src, read_source(src_root, dst_root, options));
  ReshardResult result;
  result.step = src.step;
  result.world_size = options.to.size();
  TSR_ASSIGN_OR_RETURN(const auto placement, choose_placements(src, src_root, options, &result));
  TSR_ASSIGN_OR_RETURN(const WritePlan plan, plan_writes(src, placement, options.to));
  const StepPaths paths(dst_root, src.step);
  TSR_RETURN_IF_ERROR(prepare_target(paths));
  Status s;
  try {
    s = write_and_publish(src_root, src, paths, options, plan,
                          target_manifest(src, src_root, options.to, placement), &result);
  } catch (const std::exception& e) {
    // A library throw (bad_alloc, a JSON type error) must not abort the tool or leave the .tmp.
    s = internal_error(std::string("exception while writing '") + paths.tmp_dir + "': " + e.what());
  }
  if (!s.ok()) {
    fs::remove_all(paths.tmp_dir).ignore();
    return s.with_context("reshard of '" + src_root + "/" + paths.rel + "'");
  }
  return result;
}

Result<ReshardResult> reshard_checkpoint(const std::string& src_root, const std::string& dst_root,
                                         const ReshardOptions& options) {
  // The tool and trainers call this directly: a throw (bad_alloc, length_error) becomes a Status.
  // The writing phase catches its own and removes step-N.tmp/; nothing else writes.
  try {
    return reshard_unguarded(src_root, dst_root, options);
  } catch (const std::exception& e) {
    return internal_error("reshard of '" + src_root + "' into '" + dst_root +
                          "': exception: " + e.what());
  }
}

}  // namespace tessera::ckpt
