#include "tessera/checkpoint/reshard.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "codec.h"
#include "fs.h"
#include "impl.h"
#include "overlap.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {
namespace {

std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.shard", rank);
  return name;
}

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
  const std::string dir = fs::join(src, step_dir_name(*step));
  if (!fs::exists(dir)) {
    if (fs::exists(dir + ".tmp")) {
      return failed_precondition("'" + dir + "' is not committed (only " + step_dir_name(*step) +
                                 ".tmp: a save in flight or interrupted)");
    }
    return not_found("'" + dir + "' does not exist");
  }
  if (!latest.ok() || *step > *latest) {
    return failed_precondition("'" + dir + "' is not committed: `latest` names " +
                               (latest.ok() ? step_dir_name(*latest) : "no step") +
                               " (a save interrupted before it was published)");
  }
  return *step;
}

// What one rank of the target layout writes: (tensor index, slice) first seen on it, its blobs.
struct RankWrites {
  std::vector<std::pair<size_t, Slice>> tensors;
  std::vector<const BlobRecord*> blobs;
};

struct Writer {
  codec::ShardWriter* file;
  codec::Compressor compressor;
  std::string stored;
  const ReshardOptions* options;
  ReshardResult* result;
  uint64_t done = 0, total = 0;

  Status chunks(const void* data, size_t bytes, size_t chunk_bytes, std::vector<ChunkRecord>* out) {
    const auto* p = static_cast<const std::byte*>(data);
    for (size_t off = 0; off < bytes || (off == 0 && bytes == 0); off += chunk_bytes) {
      const size_t len = std::min(chunk_bytes, bytes - off);
      ChunkRecord rec;
      rec.enc = "zstd";
      rec.raw = len;
      rec.hash = codec::xxh3(p + off, len);
      TSR_ASSIGN_OR_RETURN(rec.data, file->append_encoded(compressor, options->zstd_level, p + off,
                                                          len, rec.hash, &stored));
      result->bytes_written += rec.data.stored;
      result->bytes_raw += len;
      done += len;
      if (options->progress) options->progress(done, total);
      out->push_back(std::move(rec));
      if (bytes == 0) break;
    }
    return Status();
  }
};

}  // namespace

static Result<ReshardResult> reshard_unguarded(const std::string& src_root,
                                               const std::string& dst_root,
                                               const ReshardOptions& options) {
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
  TSR_ASSIGN_OR_RETURN(const int64_t step, committed_step(src_root, options.step));
  TSR_ASSIGN_OR_RETURN(Manifest src, read_manifest(src_root, step));
  TSR_RETURN_IF_ERROR(check_files(src_root, src));
  if (src.delta) {
    auto base = read_manifest(src_root, src.base_step);
    if (!base.ok()) return base.status().with_context("base of delta step " + std::to_string(step));
    TSR_RETURN_IF_ERROR(check_files(src_root, *base));
  }
  {
    std::error_code ec;
    const auto a = std::filesystem::weakly_canonical(src_root, ec);
    const auto b = std::filesystem::weakly_canonical(dst_root, ec);
    if (a == b) return invalid_argument("reshard: --out '" + dst_root + "' is the source itself");
  }
  // Placements: the layout file's override the manifest's.
  for (const auto& [name, p] : options.placements) {
    if (src.find_tensor(name) == nullptr) {
      return invalid_argument("placement for tensor '" + name + "': not in " + step_dir_name(step) +
                              " of '" + src_root + "'");
    }
  }
  ReshardResult result;
  result.step = step;
  result.world_size = to.size();
  std::vector<std::optional<Placement>> placement(src.tensors.size());
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    auto it = options.placements.find(src.tensors[i].name);
    placement[i] =
        it != options.placements.end() ? std::optional(it->second) : src.tensors[i].placement;
    if (!placement[i]) result.whole.push_back(src.tensors[i].name);
  }
  // Every slice of every rank first: a bad layout fails before anything is written. Only what a
  // rank writes is kept (a slice first seen there, its blobs): ranks holding only replicas write
  // no file, so memory, files and bytes follow the source's size, not the target's world (a dp of
  // a million would otherwise mean a million files and slice lists).
  const int world = to.size();
  std::map<int, RankWrites> writes;
  uint64_t total = 0;
  std::set<std::string> counted;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < src.tensors.size(); ++i) {
      if (r > 0 && !placement[i]) continue;  // whole on every rank: rank 0 writes it
      const TensorRecord& t = src.tensors[i];
      TSR_ASSIGN_OR_RETURN(auto s, layout_slice(t.name, t.shape, placement[i], to, r));
      if (!s || !counted.insert(shard_key(t.name, *s)).second) continue;
      auto dtype = hal::parse_dtype(t.dtype);
      if (!dtype) return data_loss("tensor '" + t.name + "': unknown dtype '" + t.dtype + "'");
      total += static_cast<uint64_t>(s->elements()) * hal::dtype_size(*dtype);
      writes[r].tensors.emplace_back(i, std::move(*s));
    }
  }
  for (const BlobRecord& b : src.blobs) {
    if (!b.replicated && b.rank >= world) continue;
    total += b.size;
    writes[b.replicated ? 0 : b.rank].blobs.push_back(&b);
  }

  TSR_RETURN_IF_ERROR(fs::make_dirs(dst_root));
  const std::string final_rel = step_dir_name(step);
  const std::string final_dir = fs::join(dst_root, final_rel);
  const std::string tmp_dir = final_dir + ".tmp";
  if (fs::exists(final_dir)) {
    return already_exists("'" + final_dir + "' already exists");
  }
  if (auto latest = read_latest(dst_root); latest.ok() && *latest > step) {
    return failed_precondition("'" + dst_root + "/latest' names a newer step (" +
                               step_dir_name(*latest) + ")");
  }
  TSR_RETURN_IF_ERROR(fs::remove_all(tmp_dir));  // left by an interrupted reshard
  TSR_RETURN_IF_ERROR(fs::make_dirs(tmp_dir));

  Manifest out;
  out.step = step;
  out.world_size = world;
  out.layout = to.text();
  out.metadata = src.metadata;
  out.metadata["resharded_from"] = src_root + "/" + final_rel + " (world " +
                                   std::to_string(src.world_size) +
                                   (src.layout.empty() ? "" : ", " + src.layout) + ")";
  out.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    out.tensors.push_back(TensorRecord{
        src.tensors[i].name, src.tensors[i].dtype, src.tensors[i].shape, {}, placement[i]});
  }
  size_t chunk_bytes = options.chunk_bytes;
  for (const auto& t : src.tensors) {
    if (chunk_bytes == 0 && !t.shards.empty()) chunk_bytes = t.shards[0].chunk_bytes;
  }
  if (chunk_bytes == 0) chunk_bytes = 4u << 20;

  auto write_all = [&]() -> Status {
    codec::ChunkReader reader(src_root);
    std::vector<std::byte> buffer;
    uint64_t done = 0;
    for (const auto& [r, mine] : writes) {
      const std::string file = rank_file(r);
      TSR_ASSIGN_OR_RETURN(
          auto shard, codec::ShardWriter::create(fs::join(tmp_dir, file), final_rel + "/" + file,
                                                 options.direct_io));
      Writer w{shard.get(), {}, {}, &options, &result, done, total};
      for (const auto& [i, slice] : mine.tensors) {
        const TensorRecord& t = src.tensors[i];
        const size_t esize = hal::dtype_size(*hal::parse_dtype(t.dtype));
        buffer.resize(static_cast<size_t>(slice.elements()) * esize);
        int64_t covered = 0;
        for (const ShardRecord& s : t.shards) {
          Slice inter;
          if (slice.elements() == 0 || !intersect(slice, s.slice, &inter)) continue;
          covered += inter.elements();
          TSR_RETURN_IF_ERROR(copy_overlap(reader, t, s, slice, inter, esize, buffer.data()));
        }
        if (covered < slice.elements()) {
          return data_loss("tensor '" + t.name + "' slice " + slice_text(slice) +
                           " is not covered by the shards of " + final_rel);
        }
        ShardRecord rec{r, slice, chunk_bytes, {}};
        TSR_RETURN_IF_ERROR(w.chunks(buffer.data(), buffer.size(), chunk_bytes, &rec.chunks));
        out.tensors[i].shards.push_back(std::move(rec));
      }
      for (const BlobRecord* b : mine.blobs) {
        std::string bytes;
        TSR_RETURN_IF_ERROR(reader.read_blob(*b, &bytes));
        BlobRecord rec{b->name, r, b->replicated, bytes.size(), {}};
        TSR_RETURN_IF_ERROR(w.chunks(bytes.data(), bytes.size(), chunk_bytes, &rec.chunks));
        out.blobs.push_back(std::move(rec));
      }
      done = w.done;
      TSR_ASSIGN_OR_RETURN(FileRecord f, shard->finish(options.fsync));
      out.files.push_back(std::move(f));
    }
    for (const BlobRecord& b : src.blobs) {
      if (!b.replicated && b.rank >= world) {
        result.dropped_blobs.push_back(b.name + " of rank " + std::to_string(b.rank));
      }
    }
    result.bytes_read = reader.bytes_read();
    result.chunks_read = reader.chunks_read();
    // Commit: the manifest, the rename, `latest`, each made durable before the next.
    TSR_RETURN_IF_ERROR(
        fs::write_file(fs::join(tmp_dir, "manifest.json"), manifest_to_json(out), options.fsync));
    if (options.fsync) TSR_RETURN_IF_ERROR(fs::fsync_path(tmp_dir));
    TSR_RETURN_IF_ERROR(fs::rename_path(tmp_dir, final_dir));
    if (options.fsync) TSR_RETURN_IF_ERROR(fs::fsync_path(dst_root));
    bool renamed = false;
    Status published = fs::replace_file(fs::join(dst_root, "latest"), final_rel + "\n",
                                        options.fsync, {}, &renamed);
    if (published.ok()) return Status();
    if (renamed) {
      // `latest` names it: deleting it would leave `latest` naming nothing.
      return published.with_context("'" + final_dir +
                                    "' was published but its durability is unknown");
    }
    fs::remove_all(final_dir).ignore();
    return published.with_context("publishing '" + final_dir + "'");
  };
  Status s;
  try {
    s = write_all();
  } catch (const std::exception& e) {
    // A library throw (bad_alloc, a JSON type error) must not abort the tool or leave the .tmp.
    s = internal_error(std::string("exception while writing '") + tmp_dir + "': " + e.what());
  }
  if (!s.ok()) {
    fs::remove_all(tmp_dir).ignore();
    return s.with_context("reshard of '" + src_root + "/" + final_rel + "'");
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
