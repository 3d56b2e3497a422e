// kShardedParameters (ZeRO-3): each rank keeps only its shard of every bucket's parameters; a
// bucket is all-gathered into a pooled buffer when a layer needs it (gather()), the next buckets of
// the pass are prefetched, and release() hands the buffer back. Gradients are reduce-scattered as
// in ZeRO-2 (grad_sync.cc).
//
// Why a second communicator: the reduce-scatters launch when buckets complete, the gathers when
// the trainer asks; on one communicator their interleaving could differ between ranks and the
// collectives would mismatch. On their own communicator and stream, each sequence is the same on
// every rank, and gathers overlap reduce-scatters.
#include <algorithm>

#include "engine.h"
#include "tessera/common/log.h"

namespace tessera::overlap {

Status GradSync::Impl::build_sharded_parameters() {
  const int n = world();
  for (Bucket& b : buckets) {
    const size_t size = hal::dtype_size(b.info.dtype);
    slot_bytes = std::max(slot_bytes, b.shard * size_t(n) * size);
    TSR_ASSIGN_OR_RETURN(b.param_shard, device.allocate(b.shard * size));
    TSR_RETURN_IF_ERROR(comm_stream.memset(b.param_shard.data(), 0, b.shard * size));
    // This rank's slice of the initial values (the trainer's `data`, read this once).
    for (const ShardPiece& piece : shard_pieces(b)) {
      const Param& param = params[size_t(piece.param)];
      if (param.data == nullptr) continue;
      TSR_RETURN_IF_ERROR(comm_stream.copy(
          static_cast<char*>(b.param_shard.data()) + piece.shard_offset * size,
          static_cast<const char*>(param.data) + piece.param_offset * size, piece.count * size));
    }
    TSR_ASSIGN_OR_RETURN(b.gathered, device.create_event(false));
  }
  TSR_ASSIGN_OR_RETURN(staging, device.allocate(slot_bytes));
  TSR_ASSIGN_OR_RETURN(gather_stream, device.create_stream(-1));
  auto dup = comm->split(0, rank());
  if (!dup.ok()) return dup.status().with_context("overlap: parameter all-gather communicator");
  gather_comm = std::move(dup.value());
  return Status();
}

Status GradSync::Impl::ensure_gathered(int index, bool demand) {
  Bucket& b = buckets[size_t(index)];
  if (b.slot >= 0) return Status();
  // The least recently used slot nobody holds or reserved; host state only, so every rank picks
  // the same one and skips the same prefetches.
  int pick = -1;
  for (size_t s = 0; s < slots.size(); ++s) {
    const GatherSlot& slot = slots[s];
    if (slot.holders > 0 || slot.reserved) continue;
    if (pick < 0 || slot.last_use < slots[size_t(pick)].last_use) pick = int(s);
  }
  const size_t target = size_t(options.prefetch_buckets) + 2;  // in use, prefetched, draining
  // No free slot, or only ones caching a bucket while the pool is below its window: add one.
  if (pick < 0 || (slots.size() < target && slots[size_t(pick)].bucket >= 0)) {
    if (!demand && slots.size() >= target) return Status();  // prefetch: never past the window
    GatherSlot fresh;
    TSR_ASSIGN_OR_RETURN(fresh.buffer, device.allocate(slot_bytes));
    TSR_ASSIGN_OR_RETURN(fresh.free, device.create_event(false));
    slots.push_back(std::move(fresh));
    pick = int(slots.size()) - 1;
    if (slots.size() > target) {
      TSR_LOG(kInfo, "overlap") << "rank " << rank() << ": " << slots.size()
                                << " gathered buckets held at once; gather pool grown";
    }
  }
  GatherSlot& slot = slots[size_t(pick)];
  if (slot.bucket >= 0) buckets[size_t(slot.bucket)].slot = -1;
  slot.bucket = index;
  slot.reserved = !demand;
  slot.last_use = ++use_clock;
  b.slot = pick;
  // The buffer's last readers (the compute work before its last release) finish first.
  if (slot.free_recorded) TSR_RETURN_IF_ERROR(gather_stream.wait(slot.free));
  std::erase_if(b.gather_works, [](const coll::Work& w) { return w.done(); });
  // Trace: from the stream reaching the gather (its buffer free) to the bucket in place.
  auto begin = trace ? std::make_shared<Clock::time_point>() : nullptr;
  if (begin) {
    TSR_RETURN_IF_ERROR(gather_stream.add_callback([begin](Status) { *begin = Clock::now(); }));
  }
  auto work = gather_comm->allgather(b.param_shard.data(), slot.buffer.data(), b.shard,
                                     b.info.dtype, gather_stream);
  if (!work.ok()) {
    return work.status().with_context("parameter all-gather of bucket " + std::to_string(index));
  }
  b.gather_works.push_back(std::move(work.value()));
  if (begin) {
    const size_t bytes = b.shard * size_t(world()) * hal::dtype_size(b.info.dtype);
    std::string args =
        "\"bucket\":" + std::to_string(index) + ",\"bytes\":" + std::to_string(bytes) +
        ",\"prefetch\":" + (demand ? "false" : "true") + ",\"step\":" + std::to_string(step);
    TSR_RETURN_IF_ERROR(
        gather_stream.add_callback([t = trace, begin, index, args = std::move(args)](Status) {
          t->span("gather bucket " + std::to_string(index), "gather", Trace::kGather, *begin,
                  Clock::now(), args);
        }));
  }
  return b.gathered.record(gather_stream);
}

Status GradSync::Impl::wait_gathers(const std::string& what) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = buckets[i];
    TSR_RETURN_IF_ERROR(
        wait_works(b.gather_works, what + ": parameter all-gather of bucket " + std::to_string(i)));
    b.gather_works.clear();
  }
  if (Status s = gather_stream.synchronize(); !s.ok()) {
    return s.with_context("overlap parameter all-gather stream");
  }
  return Status();
}

void GradSync::Impl::forget_gathered() {
  for (GatherSlot& slot : slots) {
    if (slot.bucket >= 0) buckets[size_t(slot.bucket)].slot = -1;
    slot.bucket = -1;
    slot.reserved = false;
  }
}

Result<void*> GradSync::gather(int param, const hal::Stream& compute, Pass pass) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (param < 0 || size_t(param) >= m.params.size()) {
    return out_of_range("gather: parameter index " + std::to_string(param) +
                        " is not registered (" + std::to_string(m.params.size()) + " parameters)");
  }
  Param& p = m.params[size_t(param)];
  if (!m.sharded_params()) {
    return failed_precondition("gather: parameter '" + p.name +
                               "': gather() is for the sharded parameters mode (ZeRO-3) only");
  }
  if (Status s = m.build(); !s.ok()) {
    m.failure = s;
    return s;
  }
  const int index = p.bucket;
  if (Status s = m.ensure_gathered(index, /*demand=*/true); !s.ok()) {
    return m.fail_step(s.with_context("gather of parameter '" + p.name + "'"), true);
  }
  Bucket& b = m.buckets[size_t(index)];
  GatherSlot& slot = m.slots[size_t(b.slot)];
  slot.reserved = false;
  slot.last_use = ++m.use_clock;
  ++slot.holders;
  ++p.holds;
  void* gathered = static_cast<char*>(slot.buffer.data()) + p.offset * hal::dtype_size(p.dtype);
  if (Status s = compute.wait(b.gathered); !s.ok()) return s.with_context("gather");
  // (`slot` dangles from here: a prefetch may grow the pool.)
  // The next buckets of the pass move while this layer computes (forward: lower bucket indices,
  // as buckets follow reverse registration order).
  const int step = pass == Pass::kForward ? -1 : 1;
  for (int k = 1; k <= m.options.prefetch_buckets; ++k) {
    const int next = index + step * k;
    if (next < 0 || next >= int(m.buckets.size())) break;
    if (Status s = m.ensure_gathered(next, /*demand=*/false); !s.ok()) {
      return m.fail_step(s.with_context("prefetch after parameter '" + p.name + "'"), true);
    }
  }
  return gathered;
}

Status GradSync::release(int param, const hal::Stream& compute) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (param < 0 || size_t(param) >= m.params.size()) {
    return out_of_range("release: parameter index " + std::to_string(param) +
                        " is not registered (" + std::to_string(m.params.size()) + " parameters)");
  }
  Param& p = m.params[size_t(param)];
  if (p.holds == 0) {
    return failed_precondition("release: parameter '" + p.name + "' (index " +
                               std::to_string(param) +
                               ") is not gathered (released twice, or never gathered)");
  }
  GatherSlot& slot = m.slots[size_t(m.buckets[size_t(p.bucket)].slot)];
  --p.holds;
  if (--slot.holders == 0) {
    TSR_RETURN_IF_ERROR(slot.free.record(compute));
    slot.free_recorded = true;
  }
  return Status();
}

ShardedMemory GradSync::memory() const {
  const Impl& m = *impl_;
  ShardedMemory out;
  for (const Bucket& b : m.buckets) {
    out.parameter_shard_bytes += b.param_shard.size();
    out.gradient_shard_bytes += b.reduced_shard.size();
    out.staging_bytes += b.flat.size();
  }
  out.staging_bytes += m.staging.size();
  for (const GatherSlot& slot : m.slots) out.gather_buffer_bytes += slot.buffer.size();
  return out;
}

}  // namespace tessera::overlap
