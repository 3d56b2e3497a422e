// GradSync: bucketed gradient synchronisation that overlaps with the backward pass.
//
//   auto sync = GradSync::create(world, device, options).value();
//   for (auto& p : params) sync->add_parameter(p.name, p.data, p.grad, p.count, DType::kF32);
//   // each step, as backward produces gradient i (last layer first):
//   sync->mark_ready(i, compute_stream);          // or mark_ready(i, event), mark_unused(i)
//   StepStats stats = sync->finish().value();     // every bucket reduced; grads hold the result
//
// Parameters are grouped into buckets in reverse registration order (the order backward produces
// them). A bucket whose gradients are all marked is launched on the engine's communication
// stream, waiting only for the events of its own gradients; buckets launch in index order on
// every rank, so the collectives match across ranks whatever order the marks come in.
//
// Modes: kAllReduce (data parallel: every rank gets the reduced gradient in its grad buffers),
// kShardedOptimizer (ZeRO-1/2: each bucket is reduce-scattered, each rank owns one shard of it and
// runs the optimizer on its shard only (shard_segments()); gather_parameters() then all-gathers
// the updated parameters, first layers first) and kShardedParameters (ZeRO-3: the engine keeps
// only this rank's shard of the parameters; gather(i, stream, pass) all-gathers the bucket holding
// parameter i into a pooled buffer just before a layer runs, prefetching the next buckets of the
// pass, and release(i, stream) hands the buffer back for reuse; gradients are reduce-scattered as
// in ZeRO-2).
//
// Thread-safety: a GradSync is used by one thread (the trainer's), like its communicator, which
// it must not share with other threads while a step is in flight. Nor may that thread call the
// communicator during a step: the engine queues its collectives through the communicator's stream
// API as buckets complete, so other traffic would interleave with them differently on different
// ranks (give other traffic its own communicator, e.g. from split()). Between steps it is free.
//
// Memory: every buffer registered (gradients, parameters) is device memory of the engine's device
// (hal::Device::allocate); host memory is accepted only where that device's memory is
// host-accessible (TSR_CAP_HOST_ACCESSIBLE), and a pointer of another device or backend, or one
// running past its allocation, is refused naming the parameter. The engine's own buffers
// (buckets, shards, gathered parameters, codec state and error feedback) are device memory too;
// pointers it returns (ShardSegment, gather()) are device pointers. It never dereferences device
// memory and runs no collective inside a stream callback: collectives go through the
// communicator's stream API; callbacks only read clocks and run the codecs' host steps on pinned
// staging buffers (docs/OVERLAP.md, "Memory").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::overlap {

using hal::DType;

enum class SyncMode {
  kAllReduce,          // plain data parallel
  kShardedOptimizer,   // ZeRO-1/2: reduce-scatter + parameter all-gather after the optimizer
  kShardedParameters,  // ZeRO-3: parameters sharded too, all-gathered per bucket with prefetch
};

// The direction of a pass over the layers, for kShardedParameters' prefetch: the forward pass
// runs parameters in registration order, the backward pass in reverse.
enum class Pass { kForward, kBackward };

enum class Reduction { kAverage, kSum };

enum class CodecKind {
  kNone,      // the gradient as it is
  kBf16,      // bf16 on the wire (f32 buckets): cast, allreduce, cast back
  kTopK,      // the k largest |g| per bucket, indices + values by all-gather, error feedback
  kPowerSgd,  // rank-r PowerSGD per bucket, error feedback, warm-started Q
};
std::string_view codec_name(CodecKind kind);  // "none", "bf16", "topk", "powersgd"

struct CodecOptions {
  CodecKind kind = CodecKind::kNone;
  double topk_ratio = 0.01;    // fraction of a bucket's elements sent by top-k, in (0, 1]
  int powersgd_rank = 4;       // r of PowerSGD, >= 1
  bool error_feedback = true;  // top-k and PowerSGD keep what they did not send, per rank
  uint64_t seed = 1;           // PowerSGD's initial Q (the same on every rank)
};

struct GradSyncOptions {
  SyncMode mode = SyncMode::kAllReduce;
  Reduction reduction = Reduction::kAverage;
  // Bucket capacity in bytes. 0: TESSERA_BUCKET_MB, else the alpha-beta rule of
  // default_bucket_bytes(). A parameter larger than a bucket gets a bucket of its own.
  size_t bucket_bytes = 0;
  // Codecs apply to f32 buckets in kAllReduce mode; other dtypes travel uncompressed.
  CodecOptions codec;
  // finish() with gradients neither marked ready nor unused: false (default) fails naming them
  // and aborts the communicator (so peers fail at once instead of at their timeout); true treats
  // them as unused (zero contribution), the rule for models with parameters a step may skip.
  bool zero_fill_unmarked = false;
  // kShardedParameters: buckets all-gathered ahead of the one gather() asks for, in the direction
  // of the pass (the next layers' parameters move while this layer computes). 0: no prefetch.
  int prefetch_buckets = 1;
  // Bound on each wait of finish() and wait_parameters(). 0: 300 s.
  std::chrono::milliseconds timeout{0};
  // Chrome trace file ("" : TESSERA_TRACE; still empty: no trace). Rank r writes <stem>.rank<r>
  // <ext>, e.g. trace.json -> trace.rank0.json.
  std::string trace_path;
};

// Counters of one step, from finish().
struct StepStats {
  uint64_t step = 0;
  size_t buckets = 0;
  size_t payload_bytes = 0;    // gradient bytes reduced (all buckets)
  size_t wire_bytes = 0;       // bytes this rank handed to the collectives (after the codec)
  size_t unused_params = 0;    // marked unused, or zero-filled by finish()
  double step_seconds = 0;     // first mark of the step to the return of finish()
  double comm_seconds = 0;     // communication stream busy time: waits done to bucket done
  double exposed_seconds = 0;  // finish() waiting after compute and the trainer were done
  double overlap_ratio = 1;    // 1 - exposed / comm, in [0, 1] (1 when nothing was sent)
};

// One contiguous piece of this rank's optimizer shard (kShardedOptimizer): `count` elements of
// parameter `param` from element `param_offset`; `grad` points at the reduced gradient (engine
// device memory, valid after finish() until the next step), `data` into the parameter itself
// (kShardedParameters: into the engine's shard of it, which the optimizer updates in place).
// Both are device pointers: the optimizer runs on the device or stages them.
struct ShardSegment {
  int param = 0;
  size_t param_offset = 0;
  size_t count = 0;
  void* grad = nullptr;
  void* data = nullptr;
};

// Engine memory of the sharded modes on this rank (kShardedParameters: everything the engine holds
// for the parameters; compare with the model's full size to see what sharding saves).
struct ShardedMemory {
  size_t parameter_shard_bytes = 0;  // kShardedParameters: this rank's parameter shards
  size_t gradient_shard_bytes = 0;   // the reduced gradient shards the optimizer reads
  size_t gather_buffer_bytes = 0;    // kShardedParameters: the pool of gathered buckets
  size_t staging_bytes = 0;          // full-size bucket buffers (reduce-scatter input)
};

// What a bucket holds (for tests, tools and traces).
struct BucketInfo {
  std::vector<int> params;  // in bucket order (reverse registration order)
  DType dtype = DType::kF32;
  size_t count = 0;  // elements
  size_t bytes = 0;
};

// The bucket size the alpha-beta rule picks for `comm` (TESSERA_BUCKET_MB overrides): large
// enough that per-message latency plus the engine's per-bucket cost stay under 10% of a ring
// allreduce of the bucket, clamped to [1 MiB, 64 MiB]. INVALID_ARGUMENT naming the variable when
// TESSERA_BUCKET_MB is not a finite number of MiB in [0.001, 65536].
Result<size_t> default_bucket_bytes(const coll::Communicator& comm);

class GradSync {
 public:
  // The engine's streams are created on `device`. Fails on bad options (naming the field).
  static Result<std::unique_ptr<GradSync>> create(std::shared_ptr<coll::Communicator> comm,
                                                  const hal::Device& device,
                                                  GradSyncOptions options = {});
  ~GradSync();  // waits for queued work (errors are logged)
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // ---- registration (before the first mark) ---------------------------------------------
  // Registers a parameter and its gradient (`count` elements of `dtype` each, device memory of
  // the engine's device: see "Memory" above); returns its index.
  // `data` may be null in kAllReduce mode. In kShardedParameters mode `data` (null: zeros) is read
  // once, when the buckets are formed, for this rank's shard; the engine never touches it again,
  // so the trainer may free it then (buckets() forms them). Errors: null grad, count 0, a buffer
  // not aligned to the element size, a buffer overlapping another registered one (both named), a
  // buffer that is not memory of the engine's device (host memory on a device whose memory is not
  // host-accessible, another device's, past the end of its allocation), a duplicate name, or
  // registration after the first mark.
  Result<int> add_parameter(std::string name, void* data, void* grad, size_t count, DType dtype);

  // ---- one step ------------------------------------------------------------------------------
  // Gradient `param` is ready once `ready` completes (an event recorded on the compute stream).
  // The event is relayed at once, so the trainer may re-record it right after this call.
  Status mark_ready(int param, const hal::Event& ready);
  // Gradient `param` is ready after the work queued so far on `compute`.
  Status mark_ready(int param, const hal::Stream& compute);
  // `param` took no part in this step: it contributes zeros (its grad buffer still receives the
  // reduced value of the other ranks in kAllReduce mode).
  Status mark_unused(int param);
  // Waits for every bucket of the step and returns its counters. Errors name the parameter,
  // bucket or rank; after a communication failure the engine only returns errors.
  Result<StepStats> finish();

  // ---- kShardedOptimizer ------------------------------------------------------------------
  // This rank's share of every bucket, mapped back to parameters.
  const std::vector<ShardSegment>& shard_segments() const;
  size_t shard_elements() const;  // total elements of this rank's shard
  // All-gathers the parameters (each rank contributes its shard's `data`), first layers first,
  // on the communication stream after the work queued so far on `optimizer` (null: the
  // optimizer ran on the host and is done). Returns at once. kShardedParameters: later gathers
  // wait for `optimizer` (call it whenever the optimizer runs on a stream), and the first
  // buckets of the next forward are prefetched.
  Status gather_parameters(const hal::Stream* optimizer = nullptr);
  // `compute` waits until parameter `param` is gathered (the next forward's first layers can
  // start while the rest still moves).
  Status wait_parameter(int param, const hal::Stream& compute);
  // Blocks until every gathered parameter is in place.
  Status wait_parameters();

  // ---- kShardedParameters (ZeRO-3) ----------------------------------------------------------
  // The full parameter `param`, gathered: its bucket is all-gathered into a pooled buffer unless
  // it already is (a prefetch, or an earlier gather of the step), then the next
  // `prefetch_buckets` buckets of `pass` are all-gathered ahead while `compute` works. `compute`
  // waits for the bucket; the (device) pointer stays valid until the matching release(). Every rank
  // must gather the same parameters in the same order (the gathers are collectives). Gathers may
  // nest (a tied weight): each needs its own release. The first call forms the buckets
  // (collective).
  Result<void*> gather(int param, const hal::Stream& compute, Pass pass = Pass::kForward);
  // The work queued so far on `compute` is the last to read the gathered `param`; once every
  // parameter of its bucket is released, the buffer may take another bucket (after that work).
  Status release(int param, const hal::Stream& compute);
  ShardedMemory memory() const;

  // ---- codec state (error feedback, PowerSGD's Q) for the checkpointer --------------------
  // A versioned byte string; set_codec_state refuses one from another layout, naming the field.
  // Between steps only; collective when called before the first mark (see buckets()).
  Result<std::vector<uint8_t>> codec_state();
  Status set_codec_state(std::span<const uint8_t> bytes);

  // ---- traces ------------------------------------------------------------------------------
  // A compute span on `stream` named `name`, from the work queued before begin to the work
  // queued before end; no-ops when tracing is off.
  Status trace_compute_begin(const hal::Stream& stream, std::string name);
  Status trace_compute_end(const hal::Stream& stream);

  // The buckets. Forms them if no mark did yet, which checks the layout with one allgather: the
  // first call is then collective (every rank calls it), like the first mark.
  const std::vector<BucketInfo>& buckets();
  size_t bucket_bytes() const;
  const GradSyncOptions& options() const;
  uint64_t steps_done() const;

  struct Impl;

 private:
  explicit GradSync(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::overlap
