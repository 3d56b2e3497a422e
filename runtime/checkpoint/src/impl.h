// Internal state of a Checkpointer, shared by save.cc, commit.cc, load.cc and replica.cc.
#pragma once

#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {

// One snapshot buffer: the raw bytes of every registered tensor (in registry order) and the
// blobs. Allocated once and reused; pinned through the HAL when a device is configured.
struct Snapshot {
  struct FreeAligned {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::optional<hal::HostBuffer> pinned;
  // Page-aligned, so shard writes can go O_DIRECT straight from it (codec::ShardWriter).
  std::unique_ptr<std::byte, FreeAligned> plain;
  std::byte* data = nullptr;
  size_t capacity = 0;
  int64_t step = -1;
  bool valid = false;                // holds a complete snapshot of `step`
  std::vector<size_t> offsets;       // per tensor
  std::vector<TensorEntry> entries;  // what each tensor was (name, shape, slice) when taken
  std::vector<std::string> blob_names;
  std::vector<std::string> blobs;
};

// The raw chunk records a rank wrote in the last committed full save: the base of deltas.
struct DeltaBase {
  int64_t step = -1;
  std::map<std::string, std::vector<ChunkRecord>> chunks;  // key: tensor name + slice text
};

struct Checkpointer::Impl {
  explicit Impl(Checkpointer* owner) : self(owner) {}
  Checkpointer* self;
  Snapshot buffers[2];
  int committed_buffer = -1;  // the buffer holding the newest committed snapshot
  int last_snapshot = -1;     // the buffer the newest save_async filled (committed or not)
  std::optional<hal::Stream> stream;

  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false, stop = false;
  int job_buffer = -1;
  SaveStart job_start;
  std::optional<SaveResult> last_result;

  // Background-thread state (touched only by the worker, or by the caller while idle).
  DeltaBase base;
  int saves_since_full = 0;

  // Peer replica: the copy of another rank's newest committed snapshot that this rank keeps.
  // The buddy ring's stride (buddy.h): options' replica_stride, or chosen from the hosts at the
  // first replica; 0 until then.
  int replica_stride = 0;
  struct Replica {
    int owner = -1;
    int64_t step = -1;
    std::string header;  // serialize_snapshot: JSON (step, tensor names and sizes) + blob bytes
    std::string bytes;   // the raw tensor bytes, laid out like a Snapshot
    // What each tensor of `bytes` is (name, dtype, shape, slice; data unset), from the header:
    // what resharding after a shrink needs when `owner` is gone. Empty: restore() only.
    std::vector<TensorEntry> entries;
    // The previous replica's bytes, received into by the next exchange and then swapped with
    // `bytes`: each save reuses resident pages instead of faulting in a fresh buffer of the
    // buddy's state size (~120 ms for 40 MB on a VM, most of a replica's cost). It holds no
    // valid replica, so `bytes` stays intact until a whole new one has arrived.
    std::string spare;
  } replica;

  // Set by rebind_shrunk until the next reshard_from_memory or load succeeds: the group lost
  // ranks, and the snapshots and the replica still describe the old, larger world.
  struct Shrink {
    int old_size = 0;              // ranks of the world the snapshots were taken in
    std::vector<int> old_rank_of;  // [rank in the current group] -> rank in that world
  };
  std::optional<Shrink> shrink;

  Status reserve(Snapshot& into, size_t bytes);
  Status snapshot(Snapshot& into, int64_t step);
  void worker_loop();
  // commit.cc: the whole background save of one snapshot.
  SaveResult persist(Snapshot& snap, const SaveStart& start);
  // persist() with any exception turned into a failed SaveResult (and step-N.tmp cleaned up).
  SaveResult persist_guarded(Snapshot& snap, const SaveStart& start);
  Status run_gc(int64_t just_committed);
  Status fault(FaultPoint point) const;
  // replica.cc
  Status exchange_replica(const Snapshot& snap, double* seconds);
  std::string serialize_snapshot(const Snapshot& snap) const;  // the header
  // `from`: the rank that sent the replica (for errors).
  Status apply_serialized(std::string_view header, std::string_view data, int from);
  // load.cc: the registered memory from a staged buffer laid out like a snapshot.
  Status write_back(const std::byte* data, const std::vector<std::string>& blobs);
  Status load_step(int64_t step, Snapshot& staging, LoadResult* result);
  // memory_reshard.cc: fills `staging` (laid out like the registry) from the snapshots every rank
  // holds in `source`.
  Status reshard_exchange(const Snapshot& source, Snapshot& staging);
  // shrink_reshard.cc: reshard_from_memory while `shrink` is set.
  Result<LoadResult> reshard_after_shrink();
  // After a shrink, once the registry holds state of the new world from elsewhere (load): the
  // snapshots and the replica of the old world can no longer stand for it.
  void forget_old_world();
  // Waits until no save is in flight.
  void wait_idle();
};

// "name@[0:4, 0:8]": a tensor slice's identity for deltas.
std::string shard_key(const std::string& name, const Slice& slice);

}  // namespace tessera::ckpt
