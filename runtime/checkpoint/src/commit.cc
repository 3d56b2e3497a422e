// The background side of a save: agree on the step and the writers, write this rank's shard,
// report to rank 0, and let rank 0 commit (manifest, rename, `latest`, garbage collection).
// Every rank makes the same sequence of collective calls whatever fails, so a failure on one rank
// aborts the save on all of them and the group stays usable.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>

#include "chunk_encoder.h"
#include "codec.h"
#include "fs.h"
#include "impl.h"
#include "publish.h"
#include "step_paths.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::json;

// What every rank says before writing: its step, its delta base and what it holds.
std::string metadata_message(const StateRegistry& reg, int64_t step, bool want_delta,
                             int64_t base_step) {
  Json j = {{"step", step}, {"delta", want_delta}, {"base", base_step}};
  j["tensors"] = Json::array();
  for (const auto& t : reg.tensors()) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", std::string(hal::dtype_name(t.dtype))},
                            {"shape", t.shape},
                            {"offset", t.slice.offset},
                            {"len", t.slice.len},
                            {"replicated", t.replicated}});
    if (t.placement) {
      j["tensors"].back()["placement"] = {t.placement->tp_dim, t.placement->zero_dim,
                                          t.placement->zero_stage, t.placement->layer,
                                          t.placement->expert_dim};
    }
  }
  j["blobs"] = Json::array();
  for (const auto& b : reg.blobs()) {
    j["blobs"].push_back({{"name", b.name}, {"replicated", b.replicated}});
  }
  return j.dump();
}

struct Agreement {
  bool delta = false;
  int64_t base_step = -1;
  std::vector<bool> write_tensor;  // this rank's tensors, registry order
  std::vector<bool> write_blob;
  std::vector<TensorRecord> tensors;  // global metadata, first-seen order
};

// Decides from the gathered metadata, identically on every rank.
// *reading: the rank whose metadata is being read, so a JSON type error can name it.
Result<Agreement> agree(const std::vector<std::string>& gathered, int rank, int64_t step,
                        size_t* reading) {
  Agreement a;
  std::vector<Json> metas;
  for (size_t r = 0; r < gathered.size(); ++r) {
    Json j = Json::parse(gathered[r], nullptr, false);
    if (j.is_discarded()) {
      return internal_error("malformed save metadata from rank " + std::to_string(r));
    }
    metas.push_back(std::move(j));
  }
  a.delta = true;
  for (size_t r = 0; r < metas.size(); ++r) {
    *reading = r;
    if (metas[r]["step"].get<int64_t>() != step) {
      return failed_precondition("ranks disagree on the step: rank " + std::to_string(r) +
                                 " saves " + std::to_string(metas[r]["step"].get<int64_t>()) +
                                 ", rank " + std::to_string(rank) + " saves " +
                                 std::to_string(step));
    }
    a.delta = a.delta && metas[r]["delta"].get<bool>() &&
              metas[r]["base"].get<int64_t>() == metas[0]["base"].get<int64_t>();
  }
  a.base_step = a.delta ? metas[0]["base"].get<int64_t>() : -1;
  std::map<std::string, size_t> index;
  std::set<std::string> written;  // replicated name@slice already claimed by a lower rank
  std::set<std::string> blob_written;
  for (size_t r = 0; r < metas.size(); ++r) {
    *reading = r;
    for (const Json& t : metas[r]["tensors"]) {
      const std::string name = t["name"].get<std::string>();
      Slice slice{t["offset"].get<std::vector<int64_t>>(), t["len"].get<std::vector<int64_t>>()};
      auto [it, fresh] = index.emplace(name, a.tensors.size());
      if (fresh) {
        a.tensors.push_back(TensorRecord{
            name, t["dtype"].get<std::string>(), t["shape"].get<std::vector<int64_t>>(), {}, {}});
      } else {
        const TensorRecord& seen = a.tensors[it->second];
        if (seen.dtype != t["dtype"].get<std::string>() ||
            seen.shape != t["shape"].get<std::vector<int64_t>>()) {
          return invalid_argument("tensor '" + name + "': rank " + std::to_string(r) +
                                  " registered another dtype or global shape than a lower rank");
        }
      }
      std::optional<Placement> placement;
      if (t.contains("placement")) {
        const auto p = t["placement"].get<std::vector<int>>();
        placement = Placement{p.at(0), p.at(1), p.at(2), p.at(3), p.at(4)};
      }
      if (fresh) {
        a.tensors[it->second].placement = placement;
      } else if (a.tensors[it->second].placement != placement) {
        // The manifest records one placement per tensor; resharding by the wrong one would
        // silently scramble the tensor.
        return invalid_argument("tensor '" + name + "': rank " + std::to_string(r) +
                                " registered another placement than a lower rank");
      }
      bool writes = true;
      if (t["replicated"].get<bool>()) writes = written.insert(shard_key(name, slice)).second;
      if (static_cast<int>(r) == rank) a.write_tensor.push_back(writes);
    }
    for (const Json& b : metas[r]["blobs"]) {
      bool writes = true;
      if (b["replicated"].get<bool>()) {
        writes = blob_written.insert(b["name"].get<std::string>()).second;
      }
      if (static_cast<int>(r) == rank) a.write_blob.push_back(writes);
    }
  }
  return a;
}

// "OK<partial manifest>" or "ER<code>:<message>"
std::string encode_outcome(const Status& status, const std::string& payload) {
  if (status.ok()) return "OK" + payload;
  return "ER" + std::to_string(static_cast<int>(status.code())) + ":" + status.message();
}

Status decode_error(const std::string& message, int from) {
  if (message.rfind("ER", 0) != 0) return Status();
  const size_t colon = message.find(':');
  const int code = std::atoi(message.substr(2, colon - 2).c_str());
  return Status(static_cast<StatusCode>(code),
                "rank " + std::to_string(from) + ": " + message.substr(colon + 1));
}

}  // namespace

namespace {

// One rank's shard of a save: its tensors' chunks, delta-encoded against the last full save when
// the ranks agreed on a delta, and its blobs, appended to step-N.tmp/rank-R.shard.
class ShardSave {
 public:
  ShardSave(Checkpointer::Impl& impl, const CheckpointOptions& opt, const Agreement& a,
            codec::ShardWriter& file, SaveResult* r)
      : impl_(impl),
        opt_(opt),
        a_(a),
        r_(r),
        base_reader_(opt.dir),
        limiter_(opt.max_write_mbps),
        encoder_(file, opt.zstd_level,
                 [this](uint64_t, uint64_t stored) { return after_store(stored); }) {}

  Result<ShardRecord> tensor(const TensorEntry& t, const std::byte* p, int rank);
  Result<BlobRecord> blob(const BlobEntry& b, const std::string& bytes, int rank);

 private:
  // Counts, rate-limits, and fires the mid-shard fault point after the first chunk.
  Status after_store(uint64_t stored) {
    r_->bytes_written += stored;
    limiter_.account(stored);
    if (!first_stored_) return Status();
    first_stored_ = false;
    return impl_.fault(FaultPoint::kMidShard);
  }
  // The base's chunks of this tensor slice, when a delta is agreed and the base has as many.
  const std::vector<ChunkRecord>* delta_base(const TensorEntry& t, size_t count) const;
  // One chunk: "ref" when unchanged since `base`, "xor" when changed, "zstd" without a base.
  // `tensor` and `index` name the chunk in errors.
  Status encode_chunk(const std::byte* data, size_t len, const ChunkRecord* base,
                      const std::string& tensor, size_t index, ChunkRecord* rec);

  Checkpointer::Impl& impl_;
  const CheckpointOptions& opt_;
  const Agreement& a_;
  SaveResult* r_;
  codec::ChunkReader base_reader_;
  codec::RateLimiter limiter_;
  ChunkEncoder encoder_;
  std::string scratch_;  // an XOR delta
  bool first_stored_ = true;
};

const std::vector<ChunkRecord>* ShardSave::delta_base(const TensorEntry& t, size_t count) const {
  if (!a_.delta) return nullptr;
  auto it = impl_.base.chunks.find(shard_key(t.name, t.slice));
  return it != impl_.base.chunks.end() && it->second.size() == count ? &it->second : nullptr;
}

Status ShardSave::encode_chunk(const std::byte* data, size_t len, const ChunkRecord* b,
                               const std::string& tensor, size_t index, ChunkRecord* rec) {
  rec->raw = len;
  rec->hash = codec::xxh3(data, len);
  if (b && b->raw != len) b = nullptr;
  if (b && b->hash == rec->hash) {
    rec->enc = "ref";
    rec->data = b->data;
  } else if (b) {
    rec->enc = "xor";
    scratch_.resize(len);
    TSR_RETURN_IF_ERROR(base_reader_.read(
        *b, scratch_.data(), "base of tensor '" + tensor + "' chunk " + std::to_string(index)));
    codec::xor_into(scratch_.data(), data, len);
    TSR_ASSIGN_OR_RETURN(rec->data, encoder_.store(scratch_.data(), len, std::nullopt));
    rec->base = b->data;
    ++r_->chunks_changed;
  } else {
    rec->enc = "zstd";
    TSR_ASSIGN_OR_RETURN(rec->data, encoder_.store(data, len, rec->hash));
    if (a_.delta) ++r_->chunks_changed;
  }
  r_->bytes_full += b ? b->data.stored : rec->data.stored;
  r_->bytes_raw += len;
  ++r_->chunks;
  return Status();
}

Result<ShardRecord> ShardSave::tensor(const TensorEntry& t, const std::byte* p, int rank) {
  ShardRecord shard{rank, t.slice, opt_.chunk_bytes, {}};
  const size_t n = t.bytes();
  const size_t count = (n + opt_.chunk_bytes - 1) / opt_.chunk_bytes;
  const std::vector<ChunkRecord>* base = delta_base(t, count);
  for (size_t c = 0; c < count; ++c) {
    const size_t off = c * opt_.chunk_bytes;
    ChunkRecord rec;
    TSR_RETURN_IF_ERROR(encode_chunk(p + off, std::min(opt_.chunk_bytes, n - off),
                                     base ? &(*base)[c] : nullptr, t.name, c, &rec));
    shard.chunks.push_back(std::move(rec));
  }
  return shard;
}

Result<BlobRecord> ShardSave::blob(const BlobEntry& b, const std::string& bytes, int rank) {
  BlobRecord blob{b.name, rank, b.replicated, bytes.size(), {}};
  TSR_RETURN_IF_ERROR(
      encoder_.store_chunks(bytes.data(), bytes.size(), opt_.chunk_bytes, &blob.chunks));
  for (const ChunkRecord& c : blob.chunks) {
    r_->bytes_full += c.data.stored;
    r_->bytes_raw += c.raw;
  }
  return blob;
}

}  // namespace

// Writes this rank's shard (the tensors and blobs the agreement gives it) into step-N.tmp/.
static Status write_shard(Checkpointer::Impl& impl, const CheckpointOptions& opt,
                          const StateRegistry& reg, const Snapshot& snap, const Agreement& a,
                          int rank, Manifest* mine, SaveResult* r) {
  const StepPaths paths(opt.dir, snap.step);
  TSR_RETURN_IF_ERROR(fs::make_dirs(paths.tmp_dir));
  TSR_ASSIGN_OR_RETURN(
      auto writer,
      codec::ShardWriter::create(paths.tmp_shard(rank), paths.shard_name(rank), opt.direct_io));
  ShardSave save(impl, opt, a, *writer, r);
  for (size_t i = 0; i < reg.tensors().size(); ++i) {
    if (!a.write_tensor[i]) continue;
    const TensorEntry& t = reg.tensors()[i];
    TSR_ASSIGN_OR_RETURN(ShardRecord shard, save.tensor(t, snap.data + snap.offsets[i], rank));
    mine->tensors.push_back(TensorRecord{
        t.name, std::string(hal::dtype_name(t.dtype)), t.shape, {std::move(shard)}, {}});
  }
  for (size_t i = 0; i < reg.blobs().size(); ++i) {
    if (!a.write_blob[i]) continue;
    TSR_ASSIGN_OR_RETURN(BlobRecord blob, save.blob(reg.blobs()[i], snap.blobs[i], rank));
    mine->blobs.push_back(std::move(blob));
  }
  TSR_ASSIGN_OR_RETURN(FileRecord record, writer->finish(opt.fsync));
  mine->files.push_back(std::move(record));
  return impl.fault(FaultPoint::kAfterShards);
}

// An existing step-N/ before the rename: committed (N <= latest) is refused; an unpublished one
// (N > latest, or no `latest`: a crash between the rename and `latest`) is replaced. It is moved
// into step-N.tmp/ first, so a crash mid-delete never leaves a half-deleted "committed" step.
static Status replace_unpublished(const StepPaths& paths) {
  if (!fs::exists(paths.final_dir)) return Status();
  auto latest = read_latest(paths.root);
  if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) {
    return latest.status().with_context("'" + paths.final_dir +
                                        "' exists and 'latest' is unreadable");
  }
  if (latest.ok() && paths.step <= *latest) {
    return already_exists("'" + paths.final_dir + "' is already committed (latest is step " +
                          std::to_string(*latest) + ")");
  }
  const std::string doomed = fs::join(paths.tmp_dir, "replaced-" + paths.rel);
  TSR_RETURN_IF_ERROR(fs::rename_path(paths.final_dir, doomed));
  return fs::remove_all(doomed);
}

// Refuses to publish a step-N.tmp/ holding anything but the manifest and this save's shards.
static Status check_no_strays(const std::string& tmp_dir, const Manifest& m) {
  std::set<std::string> expected{"manifest.json"};
  for (const auto& f : m.files) expected.insert(f.name.substr(f.name.find('/') + 1));
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> names, fs::list_dir(tmp_dir));
  for (const auto& name : names) {
    if (!expected.count(name)) {
      return internal_error("'" + fs::join(tmp_dir, name) + "' is not part of the save of step " +
                            std::to_string(m.step) + " (a stray file); not publishing it");
    }
  }
  return Status();
}

// The step's manifest: the agreed tensors with every rank's reported shards, blobs and files.
static Result<Manifest> merge_reports(const CheckpointOptions& opt, const Agreement& a,
                                      int64_t step, int world,
                                      const std::vector<std::string>& reports) {
  Manifest m;
  m.step = step;
  m.delta = a.delta;
  m.base_step = a.base_step;
  m.world_size = world;
  m.layout = opt.layout;
  m.metadata = opt.metadata;
  m.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  m.tensors = a.tensors;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < m.tensors.size(); ++i) index[m.tensors[i].name] = i;
  for (size_t r = 0; r < reports.size(); ++r) {
    TSR_ASSIGN_OR_RETURN(Manifest part, parse_manifest(std::string_view(reports[r]).substr(2),
                                                       "report of rank " + std::to_string(r)));
    for (auto& t : part.tensors) {
      auto& dst = m.tensors[index.at(t.name)].shards;
      for (auto& s : t.shards) dst.push_back(std::move(s));
    }
    for (auto& b : part.blobs) m.blobs.push_back(std::move(b));
    for (auto& f : part.files) m.files.push_back(std::move(f));
  }
  return m;
}

// Rank 0: the manifest, the rename and `latest`. On failure nothing is published, except when
// `latest` was already replaced (then the error says so).
static Status commit(Checkpointer::Impl& impl, const CheckpointOptions& opt, const Agreement& a,
                     int64_t step, int world, const std::vector<std::string>& reports) {
  TSR_ASSIGN_OR_RETURN(const Manifest m, merge_reports(opt, a, step, world, reports));
  const StepPaths paths(opt.dir, step);
  PublishHooks hooks;
  hooks.before_rename = [&]() -> Status {
    TSR_RETURN_IF_ERROR(impl.fault(FaultPoint::kAfterManifest));
    TSR_RETURN_IF_ERROR(replace_unpublished(paths));
    return check_no_strays(paths.tmp_dir, m);
  };
  hooks.before_latest = [&] { return impl.fault(FaultPoint::kDuringLatest); };
  return publish_step(paths, m, opt.fsync, hooks);
}

Status Checkpointer::Impl::run_gc(int64_t just_committed) {
  const CheckpointOptions& opt = self->options_;
  TSR_ASSIGN_OR_RETURN(std::vector<StepInfo> steps, list_steps(opt.dir));
  std::set<int64_t> keep{just_committed};
  auto latest = read_latest(opt.dir);
  if (latest.ok()) keep.insert(*latest);
  int kept = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->committed && kept < opt.keep_last) {
      keep.insert(it->step);
      ++kept;
    }
  }
  for (int64_t step : std::set<int64_t>(keep)) {
    auto m = read_manifest(opt.dir, step);
    if (!m.ok()) {
      // A kept delta's base is unknown: deleting anything might delete it. Try next round.
      return m.status().with_context("skipped, nothing deleted: kept step " + std::to_string(step) +
                                     " has an unreadable manifest");
    }
    if (m->delta) keep.insert(m->base_step);
  }
  for (const StepInfo& s : steps) {
    if (s.committed && keep.count(s.step)) continue;
    const StepPaths victim(opt.dir, s.step);
    if (s.committed) {
      // Unpublish first (a crash leaves a .tmp directory, never a half-deleted checkpoint).
      if (fs::exists(victim.tmp_dir)) TSR_RETURN_IF_ERROR(fs::remove_all(victim.tmp_dir));
      TSR_RETURN_IF_ERROR(fs::rename_path(victim.final_dir, victim.tmp_dir));
    }
    TSR_RETURN_IF_ERROR(fault(FaultPoint::kDuringGc));
    TSR_RETURN_IF_ERROR(fs::remove_all(victim.tmp_dir));
  }
  if (opt.fsync) TSR_RETURN_IF_ERROR(fs::fsync_path(opt.dir));
  return Status();
}

namespace {

// Phase A: every rank's metadata to every rank, and the same decision on each: the step, delta
// or full, and who writes what. A malformed message (a JSON type error) names the rank it came
// from.
Result<Agreement> agree_on_save(RankGroup& group, const StateRegistry& reg, int64_t step,
                                bool want_delta, int64_t base_step, const std::string& what) {
  auto gathered = group.allgather(metadata_message(reg, step, want_delta, base_step));
  if (!gathered.ok()) return gathered.status().with_context(what + ": metadata exchange");
  Result<Agreement> agreed = internal_error("no agreement");
  size_t reading = 0;
  try {
    agreed = agree(*gathered, group.rank(), step, &reading);
  } catch (const std::exception& e) {
    agreed = internal_error("malformed save metadata from rank " + std::to_string(reading) + ": " +
                            e.what());
  }
  if (!agreed.ok()) return agreed.status().with_context(what + " aborted");
  return agreed;
}

// Phase C: every rank's outcome (and, when it wrote, its records) to every rank. The first failure
// of any rank, or of the exchange, aborts the save everywhere.
Status exchange_reports(RankGroup& group, const Status& local, const Manifest& mine,
                        std::vector<std::string>* reports) {
  auto gathered = group.allgather(encode_outcome(local, manifest_to_json(mine)));
  if (!gathered.ok()) return gathered.status().with_context("reports to rank 0");
  *reports = std::move(*gathered);
  for (size_t q = 0; q < reports->size(); ++q) {
    TSR_RETURN_IF_ERROR(decode_error((*reports)[q], static_cast<int>(q)));
  }
  return Status();
}

// Phase D: rank 0 commits; every rank learns the outcome.
Status commit_and_share(Checkpointer::Impl& impl, RankGroup& group, const CheckpointOptions& opt,
                        const Agreement& a, int64_t step, const std::vector<std::string>& reports,
                        const std::string& what) {
  Status committed;
  if (group.rank() == 0) {
    committed = commit(impl, opt, a, step, group.size(), reports);
    if (!committed.ok()) fs::remove_all(StepPaths(opt.dir, step).tmp_dir).ignore();
  }
  auto outcome = group.allgather(encode_outcome(committed, ""));
  if (!outcome.ok()) return outcome.status().with_context(what + ": commit outcome");
  return decode_error((*outcome)[0], 0).with_context(what + " aborted at commit");
}

}  // namespace

// The new delta base after a commit, on every rank alike: a full save's chunks become the base.
static void advance_delta_base(Checkpointer::Impl& impl, bool delta, const Manifest& mine) {
  if (delta) {
    ++impl.saves_since_full;
    return;
  }
  impl.base.step = mine.step;
  impl.base.chunks.clear();
  for (auto& t : mine.tensors) {
    for (auto& s : t.shards) impl.base.chunks[shard_key(t.name, s.slice)] = s.chunks;
  }
  impl.saves_since_full = 0;
}

SaveResult Checkpointer::Impl::persist(Snapshot& snap, const SaveStart& start) {
  const auto t0 = std::chrono::steady_clock::now();
  const CheckpointOptions& opt = self->options_;
  const StateRegistry& reg = self->registry_;
  RankGroup& group = *self->group_;
  const int rank = group.rank();
  const int64_t step = start.step;
  SaveResult r;
  r.step = step;
  r.blocking_s = start.blocking_s;
  const std::string what = "save of step " + std::to_string(step);
  const StepPaths paths(opt.dir, step);
  auto finish = [&](Status status) {
    if (!status.ok() && r.delta) {
      // Every rank saw the same failure: start again from a full save (the base may be bad).
      base = DeltaBase{};
      saves_since_full = 0;
    }
    r.status = std::move(status);
    r.persist_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };

  // A: agree. Rank 0 first removes a step-N.tmp/ left by a crashed save (perhaps of a larger
  // world, whose stray shards would otherwise be renamed into step-N/); no rank writes before the
  // allgather, which waits for rank 0.
  const bool want_delta =
      opt.full_every > 1 && base.step >= 0 && saves_since_full < opt.full_every - 1;
  Status cleared;
  if (rank == 0) cleared = fs::remove_all(paths.tmp_dir);
  if (!cleared.ok()) TSR_LOG(kWarn, "ckpt") << what << ": " << cleared.to_string();
  Result<Agreement> agreed = agree_on_save(group, reg, step, want_delta, base.step, what);
  if (!agreed.ok()) return finish(agreed.status());
  const Agreement& a = *agreed;
  r.delta = a.delta;
  r.base_step = a.base_step;

  // B: this rank's shard.
  Manifest mine;
  mine.step = step;
  mine.world_size = group.size();  // rank 0 parses it: shard ranks are checked against it
  Status local = cleared.ok() ? write_shard(*this, opt, reg, snap, a, rank, &mine, &r)
                              : cleared.with_context("clearing a stale '" + paths.tmp_dir + "'");

  // C: every rank's outcome to every rank (rank 0 needs the records).
  std::vector<std::string> reports;
  Status failure = exchange_reports(group, local, mine, &reports);
  if (!failure.ok()) {
    ::unlink(paths.tmp_shard(rank).c_str());
    if (!reports.empty()) group.barrier().ignore();  // everyone removed its file
    if (rank == 0) fs::remove_all(paths.tmp_dir).ignore();
    return finish(failure.with_context(what + " aborted"));
  }

  // D: rank 0 commits; everyone learns the outcome.
  Status committed = commit_and_share(*this, group, opt, a, step, reports, what);
  if (!committed.ok()) return finish(committed);
  advance_delta_base(*this, a.delta, mine);
  if (opt.peer_replica && group.size() > 1) {
    Status s = exchange_replica(snap, &r.replica_s);
    if (!s.ok()) TSR_LOG(kWarn, "ckpt") << what << ": peer replica: " << s.to_string();
  }
  SaveResult done = finish(Status());
  // Garbage collection once the step is durable and every rank knows it, so persist_s ends at the
  // commit (deleting an old 4 GiB step took 0.5 s here, a quarter of a save). It is still safe
  // against the next save: no rank writes step-M.tmp before the next agreement, an allgather that
  // waits for rank 0, and rank 0 reaches it only after this returns.
  if (rank == 0) {
    const auto gc_start = std::chrono::steady_clock::now();
    Status gc = run_gc(step);
    if (!gc.ok()) TSR_LOG(kWarn, "ckpt") << "garbage collection: " << gc.to_string();
    done.gc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - gc_start).count();
  }
  return done;
}

SaveResult Checkpointer::Impl::persist_guarded(Snapshot& snap, const SaveStart& start) {
  // An exception escaping the worker thread would std::terminate the training process (a JSON
  // type error, bad_alloc): it fails this save instead, and this rank's partial files go.
  std::string error;
  try {
    return persist(snap, start);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  const int rank = self->group_->rank();
  const StepPaths paths(self->options_.dir, start.step);
  ::unlink(paths.tmp_shard(rank).c_str());
  if (rank == 0) fs::remove_all(paths.tmp_dir).ignore();
  base = DeltaBase{};  // the base may be half-updated: start again from a full save
  saves_since_full = 0;
  SaveResult r;
  r.step = start.step;
  r.blocking_s = start.blocking_s;
  r.status = internal_error("save of step " + std::to_string(start.step) + " on rank " +
                            std::to_string(rank) + ": exception: " + error);
  return r;
}

}  // namespace tessera::ckpt
