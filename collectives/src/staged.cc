// The staged route (staged.h): the chunk pipeline and whole-buffer staging.
#include "staged.h"

#include <algorithm>
#include <string>

#include "memory_kind.h"

namespace tessera::coll {

ChunkPlan chunk_plan(size_t count, DType dtype, size_t chunk_bytes) {
  ChunkPlan plan;
  plan.per_chunk = std::max<size_t>(1, chunk_bytes / std::max<size_t>(1, hal::dtype_size(dtype)));
  plan.chunks = count == 0 ? 1 : (count - 1) / plan.per_chunk + 1;
  return plan;
}

bool chunked_op(OpKind kind) {
  return kind == OpKind::kAllReduce || kind == OpKind::kReduce || kind == OpKind::kBroadcast;
}

OpDesc chunk_of(const OpDesc& d, const ChunkPlan& plan, size_t i) {
  OpDesc c = d;
  const size_t first = i * plan.per_chunk;
  const size_t offset = first * hal::dtype_size(d.dtype);
  c.count = std::min(plan.per_chunk, d.count - std::min(d.count, first));
  if (d.send != nullptr) c.send = static_cast<const char*>(d.send) + offset;
  if (d.recv != nullptr) c.recv = static_cast<char*>(d.recv) + offset;
  return c;
}

Result<std::unique_ptr<Stager>> Stager::create(const hal::Device& device, size_t chunk_bytes) {
  std::unique_ptr<Stager> s(new Stager());
  s->device_ = std::make_unique<hal::Device>(device);
  s->chunk_bytes_ = std::max<size_t>(1, chunk_bytes);
  TSR_ASSIGN_OR_RETURN(s->d2h_, device.create_stream());
  TSR_ASSIGN_OR_RETURN(s->h2d_, device.create_stream());
  for (size_t i = 0; i < kSlots; ++i) {
    TSR_ASSIGN_OR_RETURN(s->d2h_done_[i], device.create_event(false));
    TSR_ASSIGN_OR_RETURN(s->h2d_done_[i], device.create_event(false));
  }
  return s;
}

Stager::~Stager() {
  // Nothing is in flight between operations (run() settles both streams before returning); the
  // streams' destructors wait for their work anyway. The communicator destroys its stager after
  // its proxy stopped and its signals were raised, so freeing pinned memory here waits for no
  // stream that waits for it.
}

Status Stager::reserve(hal::HostBuffer& buffer, size_t bytes, const char* what) {
  if (buffer.size() >= bytes) return Status();
  // Powers of two, so a growing sequence of sizes reallocates a few times only.
  size_t rounded = size_t(64) << 10;
  while (rounded < bytes) rounded *= 2;
  // The old buffer is kept until the stager goes: freeing pinned memory may wait for every stream
  // of the process (the host backend drains them), and a stream may be waiting on this
  // communicator's signal, which only this operation's end raises.
  if (buffer.data() != nullptr) retired_.push_back(std::move(buffer));
  auto fresh = device_->allocate_host(rounded);
  if (!fresh.ok()) {
    return fresh.status().with_context(std::string("staging: pinned ") + what + " buffer of " +
                                       std::to_string(bytes) + " bytes for " + device_->id());
  }
  buffer = std::move(fresh.value());
  return Status();
}

Status Stager::settle(Status first) {
  Status d2h = d2h_.synchronize();
  Status h2d = h2d_.synchronize();
  if (!first.ok()) return first;
  if (!d2h.ok()) return d2h.with_context("staging: device→host copy on " + device_->id());
  if (!h2d.ok()) return h2d.with_context("staging: host→device copy on " + device_->id());
  return Status();
}

Status Stager::run(const OpDesc& d, int rank, int size, const RunHost& run_host) {
  return chunked_op(d.kind) ? run_chunked(d, rank, run_host) : run_whole(d, rank, size, run_host);
}

// Slot i % 3 holds chunk i from its device→host copy to its host→device copy. The copy into a
// slot waits (on the device) for the copy back out of it of the chunk that used it last.
Status Stager::run_chunked(const OpDesc& d, int rank, const RunHost& run_host) {
  const ChunkPlan plan = chunk_plan(d.count, d.dtype, chunk_bytes_);
  const size_t e = hal::dtype_size(d.dtype);
  const bool root = rank == d.root;
  const bool has_input = d.kind != OpKind::kBroadcast || root;
  const bool has_output = d.kind != OpKind::kReduce || root;
  // The root of an in-place broadcast already holds the result.
  const bool copy_back = has_output && !(d.kind == OpKind::kBroadcast && root && d.send == d.recv);
  // Whole chunks from the first use on: the slots never grow (see reserve()).
  for (auto& slot : slots_) TSR_RETURN_IF_ERROR(reserve(slot, plan.per_chunk * e, "chunk"));

  auto copy_in = [&](size_t i) -> Status {
    const size_t s = i % kSlots;
    const OpDesc c = chunk_of(d, plan, i);
    TSR_RETURN_IF_ERROR(d2h_.wait(h2d_done_[s]));
    if (has_input) TSR_RETURN_IF_ERROR(d2h_.copy(slots_[s].data(), c.send, c.count * e));
    return d2h_done_[s].record(d2h_);
  };
  Status status;
  for (size_t i = 0; i < std::min(kSlots - 1, plan.chunks) && status.ok(); ++i) status = copy_in(i);
  for (size_t i = 0; i < plan.chunks && status.ok(); ++i) {
    const size_t s = i % kSlots;
    if (i + kSlots - 1 < plan.chunks) {
      if (status = copy_in(i + kSlots - 1); !status.ok()) break;
    }
    if (status = d2h_done_[s].synchronize(); !status.ok()) {
      status = status.with_context("staging: device→host copy of chunk " + std::to_string(i));
      break;
    }
    OpDesc c = chunk_of(d, plan, i);
    const OpDesc device_chunk = c;
    c.send = c.recv = slots_[s].data();
    c.device_memory = false;
    if (status = run_host(c); !status.ok()) break;
    if (copy_back) {
      if (status = h2d_.copy(device_chunk.recv, slots_[s].data(), c.count * e); !status.ok()) {
        break;
      }
    }
    status = h2d_done_[s].record(h2d_);
  }
  return settle(std::move(status));
}

// Send and receive buffers that overlap (the in-place forms) are staged as one range, so the
// algorithm sees the same aliasing it would on host memory. The v-variants' receive buffers are
// copied in first: their gaps must come back unchanged.
Status Stager::run_whole(const OpDesc& d, int rank, int size, const RunHost& run_host) {
  const OpExtents x = op_extents(d, rank, size);
  const char* send = static_cast<const char*>(d.send);
  char* recv = static_cast<char*>(d.recv);
  const size_t sb = send != nullptr ? x.send : 0;
  const size_t rb = recv != nullptr ? x.recv : 0;
  OpDesc h = d;
  h.device_memory = false;
  Status status;
  if (sb > 0 && rb > 0 && send < recv + rb && recv < send + sb) {
    const char* base = std::min<const char*>(send, recv);
    const size_t len = size_t(std::max<const char*>(send + sb, recv + rb) - base);
    TSR_RETURN_IF_ERROR(reserve(whole_recv_, len, "in-place"));
    char* stage = static_cast<char*>(whole_recv_.data());
    h.send = stage + (send - base);
    h.recv = stage + (recv - base);
    status = d2h_.copy(stage, base, len);
    if (status.ok()) status = d2h_.synchronize();
    if (status.ok()) status = run_host(h);
    if (status.ok()) status = h2d_.copy(recv, h.recv, rb);
    return settle(std::move(status));
  }
  const bool gaps = d.kind == OpKind::kAllGatherV || d.kind == OpKind::kAllToAllV;
  TSR_RETURN_IF_ERROR(reserve(whole_send_, std::max<size_t>(sb, 1), "send"));
  TSR_RETURN_IF_ERROR(reserve(whole_recv_, std::max<size_t>(rb, 1), "receive"));
  h.send = sb > 0 ? whole_send_.data() : nullptr;
  h.recv = rb > 0 ? whole_recv_.data() : nullptr;
  if (sb > 0) status = d2h_.copy(whole_send_.data(), send, sb);
  if (status.ok() && rb > 0 && gaps) status = d2h_.copy(whole_recv_.data(), recv, rb);
  if (status.ok()) status = d2h_.synchronize();
  if (status.ok()) status = run_host(h);
  if (status.ok() && rb > 0) status = h2d_.copy(recv, whole_recv_.data(), rb);
  return settle(std::move(status));
}

}  // namespace tessera::coll
