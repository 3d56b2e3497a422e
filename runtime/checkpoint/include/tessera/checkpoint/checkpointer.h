// Checkpointer: asynchronous, sharded, incremental, checksummed checkpoints of a StateRegistry,
// committed atomically across the ranks of a RankGroup, loadable into another parallel layout.
//
//   auto ck = Checkpointer::create(options, group).value();
//   ck->registry().add_host_tensor("w", DType::kF32, {4096, 4096}, slice, ptr);
//   ck->save_async(step);          // blocks only for the snapshot into pinned host memory
//   ...train...
//   SaveResult r = ck->wait().value();  // committed, or why not
//   ck->load({.fallback = true});  // the newest good checkpoint, verified, resharded as needed
//
// On-disk layout under `dir` (docs/CHECKPOINT.md): step-N/{manifest.json, rank-RRRRR.shard},
// step-N.tmp/ while a save is in flight, `latest` naming the newest committed step.
// A Checkpointer is used from one thread (the training loop); it runs one background thread of its
// own. Every rank of the group must make the same sequence of save/load calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/rank_group.h"
#include "tessera/checkpoint/state.h"
#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::ckpt {

// Where a fault can be injected (tests) or where a save may be interrupted.
enum class FaultPoint {
  kMidShard,       // after the first chunk of this rank's shard is written
  kAfterShards,    // every local shard file is durable, before reporting to rank 0
  kAfterManifest,  // rank 0: manifest.json durable, before the rename to step-N/
  kDuringLatest,   // rank 0: latest.tmp durable, before it replaces `latest`
  kDuringGc,       // rank 0: between the deletions of garbage collection
};
std::string_view fault_point_name(FaultPoint point);

// What save_async does when the previous save is still persisting.
enum class BusyPolicy { kWait, kSkip };

// The CPU priority of the background persist thread (compression, checksums, writes), so that it
// uses the cores training leaves idle. Applied to that thread only; where the system refuses
// (a container without the right), the thread keeps the normal priority and a warning is logged.
enum class PersistPriority {
  kNormal,  // like the training threads
  kNice,    // nice 19: a small share of a busy core, all of an idle one (the default)
  kIdle,    // SCHED_IDLE: only cores nothing else wants (a fully busy host stalls the save)
};

struct CheckpointOptions {
  std::string dir;                // root of the checkpoints (shared by all ranks)
  size_t chunk_bytes = 4u << 20;  // raw bytes per chunk (the unit of checksum, delta, reshard)
  int zstd_level = -1;        // zstd fast mode: ~3 GB/s per core; 1 saves ~11% on fp32 at ~0.6 GB/s
  double max_write_mbps = 0;  // persist rate limit in MB/s (1e6 bytes); 0: unlimited
  BusyPolicy busy_policy = BusyPolicy::kWait;
  PersistPriority persist_priority = PersistPriority::kNice;
  int keep_last = 3;   // committed checkpoints kept by garbage collection (>= 1)
  int full_every = 1;  // 1: every save full; K: a full save, then K-1 deltas
  bool fsync = true;   // false only for tests on throwaway directories
  // Shard files written O_DIRECT (no page-cache copy; buffered where the filesystem refuses it).
  bool direct_io = true;
  // Keep the last snapshot in a buddy's memory (replica.cc). A rank then holds two buffers of
  // its source's state size: the replica, and the one the next replica is received into.
  bool peer_replica = false;
  // buddy = (rank + stride) % size. 0: chosen from the ranks' hosts (one allgather at the first
  // replica), so every buddy is on another host when the group spans hosts (src/buddy.h).
  int replica_stride = 0;
  std::optional<hal::Device> device;  // for device tensors: pinned buffers and copies
  std::string layout;                 // the plan/layout saved under (free text or JSON), manifest
  std::map<std::string, std::string> metadata;  // training metadata, written to the manifest
  // Tests: called at each FaultPoint on the thread that reaches it; a non-OK status fails the
  // save there as an I/O error would.
  std::function<Status(FaultPoint)> fault_hook;
};

// What save_async did before returning.
struct SaveStart {
  int64_t step = 0;
  bool skipped = false;   // BusyPolicy::kSkip and a save was in flight: nothing was taken
  bool waited = false;    // BusyPolicy::kWait and a save was in flight: waited for it
  double wait_s = 0;      // time spent waiting for the previous save
  double blocking_s = 0;  // snapshot time (device->pinned host copies and blob reads)
  size_t snapshot_bytes = 0;
};

// The outcome of one background save, as seen by this rank.
struct SaveResult {
  int64_t step = 0;
  Status status;       // OK: committed and published in `latest`; else why it was aborted
  bool delta = false;  // stored as a delta of base_step
  int64_t base_step = -1;
  double blocking_s = 0;     // copied from SaveStart
  double persist_s = 0;      // background: compress, write, fsync, commit (durable and published)
  double gc_s = 0;           // rank 0, after persist_s: deleting the steps no longer kept
  size_t bytes_written = 0;  // this rank's shard file bytes
  size_t bytes_full = 0;     // what a full save of the same chunks stores (delta: the base's)
  size_t bytes_raw = 0;      // uncompressed bytes this rank is responsible for
  size_t chunks = 0, chunks_changed = 0;  // chunks_changed: delta saves, stored not referenced
  double replica_s = 0;                   // time to send the snapshot to the buddy (peer_replica)
};

struct LoadOptions {
  std::optional<int64_t> step;  // nullopt: the step named by `latest`
  bool fallback = false;        // on a bad checkpoint try older committed ones (reported)
};

struct LoadResult {
  int64_t step = -1;
  std::vector<std::string> refused;  // "step-7: <reason>" for each checkpoint refused first
  size_t bytes_read = 0;             // this rank, from storage
  size_t chunks_read = 0;
  double seconds = 0;
};

struct RestoreResult {
  int64_t step = -1;
  bool from_peer = false;  // this rank's state came from a buddy's memory (or its own)
  double seconds = 0;
  std::string detail;  // what each path did
};

class Checkpointer {
 public:
  // Validates the options (INVALID_ARGUMENT naming the field) and creates `dir` if needed.
  static Result<std::unique_ptr<Checkpointer>> create(CheckpointOptions options,
                                                      std::shared_ptr<RankGroup> group);
  ~Checkpointer();  // waits for the save in flight
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  StateRegistry& registry() { return registry_; }
  const CheckpointOptions& options() const { return options_; }
  RankGroup& group() { return *group_; }

  // Snapshots the registry and starts persisting it in the background. Blocks for the snapshot
  // only (and, with BusyPolicy::kWait, for the previous save). Errors: the registry is invalid
  // (a device tensor without options.device, ...), a negative step. The outcome of the save comes
  // from wait().
  Result<SaveStart> save_async(int64_t step);
  // Waits for the save in flight and returns its result; the last result again when idle;
  // FAILED_PRECONDITION when nothing was ever saved.
  Result<SaveResult> wait();
  // True while a save is persisting.
  bool busy() const;

  // Collective. Loads a committed checkpoint into the registered tensors and blobs, resharding
  // from whatever layout it was saved under. Verifies the manifest checksum, the set, sizes and
  // presence of files, and the checksum of every chunk read; refuses a bad checkpoint with an
  // error naming the file and chunk. The registered memory is written only once every rank has
  // read its part successfully.
  Result<LoadResult> load(const LoadOptions& options = {});

  // Collective, after a failure: every rank returns to the newest step whose snapshot survives
  // in memory (its own, or its buddy's copy when this rank restarted); when some rank's state is
  // in no memory, all ranks load from storage instead. Needs peer_replica.
  Result<RestoreResult> restore();

  // After the job's communicator was re-formed (an elastic restart: a new generation of the
  // group), makes this Checkpointer use `group`, keeping its snapshots and the replica it holds
  // for its buddy, so that every rank can then call restore(). The group must have this rank's
  // rank and size (INVALID_ARGUMENT otherwise) and no save may be in flight (FAILED_PRECONDITION).
  Status rebind(std::shared_ptr<RankGroup> group);

  // Collective over `group`, after ranks died and the survivors re-formed a smaller communicator
  // (--nnodes MIN:MAX): makes this Checkpointer use `group`, keeping its snapshots and the replica
  // it holds, so that reshard_from_memory() can then move the old world's newest state into the
  // slices the survivors register for the smaller one. `old_rank_of[r]` is the rank that rank r of
  // `group` had in this Checkpointer's current group; every survivor passes the same list. Until
  // reshard_from_memory() or load() succeeds, save_async() and restore() are refused
  // (FAILED_PRECONDITION); the next save after it is a full one. Called again before resharding
  // (another rank lost meanwhile), the lists compose. Errors, the same on every survivor, and
  // nothing changes: INVALID_ARGUMENT when `group` is not smaller, `old_rank_of` is not one
  // distinct old rank per new rank, does not map this rank to its own old rank, or differs between
  // survivors; FAILED_PRECONDITION while a save is in flight on some survivor (wait() first).
  Status rebind_shrunk(std::shared_ptr<RankGroup> group, std::vector<int> old_rank_of);

  // Collective, for re-planning without a restart: moves the newest snapshot (taken by
  // save_async; wait() for it first) into the layout registered now. The trainer takes a
  // snapshot, clear()s the registry, registers its new slices (same world size, same tensor names,
  // dtypes and global shapes; new buffers) and calls this on every rank: each rank receives the
  // parts of its new slices from the ranks whose snapshot holds them (send/recv of the group), with
  // no storage I/O. Blobs are taken from the rank's own snapshot by name. Afterwards the snapshot
  // in the new layout stands for the same step (restore() from own memory works; the replicas of
  // the old layout are dropped until the next save). Errors: no snapshot, ranks at different
  // steps, a tensor unknown to the snapshot or of another dtype/shape, a slice no rank holds.
  //
  // After rebind_shrunk() (a smaller world; the new layout's slices are registered for it) the
  // parts come from the survivors' own snapshots and from the replicas they hold of lost ranks
  // (peer_replica: a lost rank's state survives when its buddy did). The step is the newest one
  // every survivor holds a snapshot of and from which every new slice can be assembled (a rank
  // keeps its last committed snapshot beside a newer uncommitted one, so a rank lost during a save
  // costs that save, not the memory copy). Errors, on every survivor alike: DATA_LOSS naming the
  // old ranks whose state is in no survivor's memory (their buddies died too) when a new slice
  // needs it — load() from storage then, which also ends the shrink; FAILED_PRECONDITION naming
  // every rank's steps when the survivors hold no step in common. Blobs: each rank's from its own
  // snapshot by name (a replicated blob is in every survivor's); the per-rank blobs of lost ranks
  // are dropped, so a blob registered now must be one this survivor had.
  Result<LoadResult> reshard_from_memory();
  // The layout text the next saves record in their manifests (CheckpointOptions::layout): after
  // reshard_from_memory the job runs another plan, and manifests must not keep naming the old
  // one. INVALID_ARGUMENT for text that is not UTF-8; FAILED_PRECONDITION while a save is in
  // flight (wait() first).
  Status set_layout(std::string layout);

  // Internal, for the implementation files.
  struct Impl;

 private:
  Checkpointer(CheckpointOptions options, std::shared_ptr<RankGroup> group);
  CheckpointOptions options_;
  std::shared_ptr<RankGroup> group_;
  StateRegistry registry_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::ckpt
