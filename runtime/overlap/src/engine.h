// GradSync's state, shared by grad_sync.cc (registration, steps), buckets.cc (layout) and
// zero.cc (shards and the parameter all-gather). Internal.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codec.h"
#include "tessera/overlap/grad_sync.h"
#include "trace.h"

namespace tessera::overlap {

enum class Mark : uint8_t { kNone, kReady, kUnused };

struct Param {
  std::string name;
  void* data = nullptr;
  void* grad = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  size_t bytes = 0;
  int bucket = -1;
  size_t offset = 0;  // elements from the start of its bucket
  hal::Event ready;   // the engine's own: relays the trainer's event or marks its stream
  Mark mark = Mark::kNone;
  int holds = 0;  // kShardedParameters: gather() calls not yet matched by release()
};

struct Bucket {
  BucketInfo info;
  size_t shard = 0;        // kShardedOptimizer: elements per rank (count padded to world * shard)
  hal::DeviceBuffer flat;  // gradients in, reduced out (and the gathered parameters in ZeRO)
  // Set when the bucket's gradients are adjacent in memory and the reduction is elementwise
  // (allreduce mode, no codec or bf16): the bucket is reduced where it lies, with no copies.
  void* in_place = nullptr;
  hal::DeviceBuffer reduced_shard;  // kShardedOptimizer: this rank's reduced gradient shard
  std::unique_ptr<Codec> codec;
  int pending = 0;  // gradients not yet marked this step
  bool launched = false;
  // The collectives this bucket queued on the communication stream in this step (the
  // communicator's stream API); finish() waits for them, bounded.
  std::vector<coll::Work> works;
  bool done_at_communicated = false;  // times.done is times.communicated (no stamp of its own)
  std::string algorithm;
  BucketTimes times;
  hal::Event gathered;  // sharded modes: recorded after the parameter all-gather
  std::vector<coll::Work> gather_works;
  // kShardedParameters: this rank's shard of the parameters (the optimizer updates it), and the
  // pooled buffer holding the gathered bucket (-1: not gathered).
  hal::DeviceBuffer param_shard;
  int slot = -1;
};

// Where one parameter meets this rank's shard of a bucket: elements [param_offset, +count) of the
// parameter are elements [shard_offset, +count) of the shard.
struct ShardPiece {
  int param = -1;
  size_t shard_offset = 0;
  size_t param_offset = 0;
  size_t count = 0;
};

// kShardedParameters: one pooled buffer for a gathered bucket. A slot is reusable once nothing
// holds it and no prefetch reserved it; its next all-gather waits for `free` (the compute work
// that read it last).
struct GatherSlot {
  hal::DeviceBuffer buffer;
  int bucket = -1;        // the bucket whose parameters it holds, -1: none
  int holders = 0;        // gathered parameters of that bucket not yet released
  bool reserved = false;  // prefetched and not yet asked for
  uint64_t last_use = 0;  // least recently used slots are taken first
  hal::Event free;
  bool free_recorded = false;
};

struct GradSync::Impl {
  std::shared_ptr<coll::Communicator> comm;
  hal::Device device;
  GradSyncOptions options;
  std::chrono::milliseconds timeout{300000};
  size_t bucket_bytes = 0;
  hal::Stream comm_stream;   // every bucket's copies, codec steps and collectives, in order
  hal::Stream relay_stream;  // waits on trainer events and records the engine's own
  std::shared_ptr<Trace> trace;

  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<BucketInfo> bucket_infos;
  bool built = false;
  std::vector<ShardSegment> segments;
  size_t shard_elements = 0;

  // kShardedParameters: parameter all-gathers run on their own communicator (a duplicate made at
  // build) and stream, so their order across ranks is the trainer's gather() order whatever
  // order the gradient buckets complete in, and they overlap the reduce-scatters.
  std::shared_ptr<coll::Communicator> gather_comm;
  hal::Stream gather_stream;
  std::vector<GatherSlot> slots;
  size_t slot_bytes = 0;      // the largest bucket, padded to world x shard
  hal::DeviceBuffer staging;  // device: the reduce-scatter input of every bucket, one at a time
  uint64_t use_clock = 0;

  // The current step.
  uint64_t step = 0;
  bool in_step = false;
  int next_launch = 0;
  Clock::time_point step_start;
  Status failure;  // sticky: set when a step failed past recovery

  // Errors of host callbacks on the communication stream (guarded).
  std::mutex callback_mutex;
  Status callback_error;

  // Open compute spans per stream (trace only). Shared with the callbacks on the trainer's
  // streams, which may run after the engine is gone.
  struct SpanBook {
    std::mutex mutex;
    std::map<tsr_stream, std::vector<std::pair<std::string, Clock::time_point>>> open;
    std::shared_ptr<Trace> trace;
  };
  std::shared_ptr<SpanBook> spans = std::make_shared<SpanBook>();

  explicit Impl(const hal::Device& d) : device(d) {}

  int rank() const { return comm->rank(); }
  bool sharded() const { return options.mode != SyncMode::kAllReduce; }
  bool sharded_params() const { return options.mode == SyncMode::kShardedParameters; }
  int world() const { return comm->size(); }

  // buckets.cc: checks the registration of a new parameter against the others, and that its
  // buffers are memory of the engine's device (device_memory.h).
  Status check_new_param(const std::string& name, const void* data, const void* grad, size_t count,
                         DType dtype) const;
  // buckets.cc: forms the buckets, allocates their buffers, checks the layout agrees on every
  // rank (one blocking allgather), and maps the shards.
  Status build();
  // build()'s phases: buckets in reverse registration order, the cross-rank layout check, one
  // bucket's buffers and codec, and the shard segments of the sharded modes.
  void assign_buckets();
  Status check_layout_agrees();
  Status allocate_bucket(size_t index);
  void map_shard_segments();
  void* adjacent_gradients(const Bucket& b) const;
  // The parameters (or parts of them) in this rank's shard of `b`, in bucket order.
  std::vector<ShardPiece> shard_pieces(const Bucket& b) const;
  // grad_sync.cc
  // Host bookkeeping on the communication stream (a callback that never waits; see CodecContext).
  Status host(std::function<void()> fn);
  Status launch(int bucket);
  // Queues one collective of bucket `index` through the communicator's stream API (`enqueue`
  // makes the call on the communication stream) and keeps its Work for finish().
  Status collective(int index, const std::function<Result<coll::Work>()>& enqueue);
  Status launch_ready_buckets();
  // A new step from `start`: nothing marked, every bucket waiting for all its parameters.
  void begin_step(Clock::time_point start);
  Status check_usable() const;
  Status fail_step(Status status, bool abort_comm);
  Status wait_works(std::vector<coll::Work>& works, const std::string& what);
  void record_callback_error(Status status);
  // zero3.cc: all-gathers bucket `index` into a slot unless it is there. `demand`: gather() needs
  // it (a slot is added when none is free); otherwise a prefetch, skipped when none is free.
  Status ensure_gathered(int index, bool demand);
  Status build_sharded_parameters();
  Status wait_gathers(const std::string& what);
  void forget_gathered();  // after a step: the shards change, gathered copies are stale
};

}  // namespace tessera::overlap
