// Running operations: the algorithm context, the route (host, staged, native), sequence numbers
// and headers, the flight recorder. Operations queued on streams: comm_stream.cc.
#include <algorithm>
#include <cstring>
#include <thread>

#include "comm_impl.h"
#include "reduce.h"
#include "tessera/common/log.h"

namespace tessera::coll {

// ---- AlgoContext
// -----------------------------------------------------------------------------------

P2P AlgoContext::send(int peer, const void* src, size_t bytes) const {
  P2P op;
  op.kind = P2P::Kind::kSend;
  op.peer = peer;
  op.src = src;
  op.bytes = bytes;
  op.header = header;
  return op;
}

P2P AlgoContext::recv(int peer, void* dst, size_t bytes) const {
  P2P op;
  op.kind = P2P::Kind::kRecv;
  op.peer = peer;
  op.dst = dst;
  op.bytes = bytes;
  op.header = header;
  op.dtype = dtype;
  return op;
}

P2P AlgoContext::recv_reduce(int peer, const void* local, void* dst, size_t bytes) const {
  P2P op = recv(peer, dst, bytes);
  op.kind = P2P::Kind::kRecvReduce;
  op.src = local;
  op.op = reduce_op == ReduceOp::kAvg ? ReduceOp::kSum : reduce_op;
  return op;
}

namespace {

// The wire header of operation `d` (transport.h): what every rank checks the messages of its
// peers against. The sequence number and the algorithm are stamped by the caller. A recv carries
// a send's header: the two ends of a point-to-point message describe the same message.
WireHeader header_for(const OpDesc& d) {
  WireHeader h;
  h.op = uint8_t(d.kind == OpKind::kRecv ? OpKind::kSend : d.kind);
  h.dtype = uint8_t(d.dtype);
  h.count = d.count;
  h.reduce = d.reduces() ? uint8_t(uint8_t(d.op) + 1) : 0;
  h.root = d.rooted() ? uint32_t(d.root) + 1 : 0;
  return h;
}

class Context final : public AlgoContext {
 public:
  Context(CommImpl& comm, const OpDesc& d) : comm_(comm) {
    dtype = d.dtype;
    reduce_op = d.op;
    header = header_for(d);
  }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status run(std::span<P2P> ops) override {
    for (P2P& p2p : ops) p2p.header.sender = uint32_t(comm_.rank());
    return comm_.run(ops, header.step);
  }
  void* scratch(size_t bytes, int slot) override { return comm_.scratch(bytes, slot); }
  CommImpl* local_comm() override { return comm_.local_comm(); }
  CommImpl* cross_comm() override { return comm_.cross_comm(); }

 private:
  CommImpl& comm_;
};

size_t op_bytes(const OpDesc& d, int size) {
  const size_t e = dtype_bytes(d.dtype);
  switch (d.kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll: return d.count * e * size_t(size);
    case OpKind::kAllGatherV: {
      size_t total = 0;
      for (size_t c : d.counts) total += c;
      return total * e;
    }
    default: return d.count * e;
  }
}

}  // namespace

// ---- execution
// -------------------------------------------------------------------------------------

Status CommImpl::execute(const OpDesc& d) {
  drain();
  return execute_now(d);
}

MemoryTarget CommImpl::memory_target(const hal::Stream* stream) const {
  MemoryTarget t;
  t.mode = memory_mode_;
  if (device_) {
    t.backend = device_->backend();
    t.device = device_->index();
    t.id = device_->id();
    t.host_accessible = device_->has(TSR_CAP_HOST_ACCESSIBLE);
    t.can_stage = true;
  } else if (stream != nullptr && stream->handle() != nullptr) {
    t.backend = stream->backend();
    t.device = stream->device();
    t.id = t.backend->name() + ":" + std::to_string(t.device);
    // A caller's stream comes without a hal::Device: its properties are queried here. A failed
    // query counts as not host-accessible (the buffers are then checked as device memory).
    auto device = hal::Device::query(t.backend, t.device);
    t.host_accessible = device.ok() && device->has(TSR_CAP_HOST_ACCESSIBLE);
  }
  return t;
}

DeviceRoute CommImpl::route_for(const OpDesc& d) const {
  if (!d.device_memory || !device_) return DeviceRoute::kHost;
  if (device_path_ == DevicePath::kStaged) return DeviceRoute::kStaged;
  // The backend's collective library (native_route.h) when this group took it at creation and
  // the operation has a native form; the others are staged.
  if (native_ && native_->has(d.kind)) return DeviceRoute::kNative;
  if (device_->has(TSR_CAP_HOST_ACCESSIBLE)) return DeviceRoute::kHost;
  return DeviceRoute::kStaged;
}

Status CommImpl::execute_now(const OpDesc& d) {
  std::lock_guard lock(exec_mutex_);
  if (aborted()) return abort_status();
  const DeviceRoute route = route_for(d);
  if (!route_logged_[size_t(d.kind)][size_t(route)]) {
    route_logged_[size_t(d.kind)][size_t(route)] = true;
    TSR_LOG(kInfo, "coll") << "communicator " << uid_ << " rank " << rank_ << ": "
                           << op_name(d.kind) << " on "
                           << (d.device_memory ? "device memory of " + device_->id()
                                               : std::string("host memory"))
                           << " takes the " << route_name(route) << " route"
                           << (chunk_all_ && chunked_op(d.kind)
                                   ? " (chunks of " + std::to_string(stage_chunk_) + " bytes)"
                                   : std::string());
  }
  Status status;
  if (route == DeviceRoute::kNative) {
    status = native_->run(d);  // fails (and aborts) with its own context
  } else if (route == DeviceRoute::kStaged) {
    status = run_staged(d);
  } else if (chunk_all_ && chunked_op(d.kind)) {
    // The same chunk operations a staging rank runs (staged.h): host memory on a staging
    // communicator must not shift the sequence numbers against it.
    const ChunkPlan plan = chunk_plan(d.count, d.dtype, stage_chunk_);
    for (size_t i = 0; i < plan.chunks && status.ok(); ++i) {
      status = run_algorithm(chunk_of(d, plan, i), route);
    }
  } else {
    status = run_algorithm(d, route);
  }
  if (!status.ok() && !aborted()) {
    // A failure outside the algorithm (staging copies): the peers are in the operation.
    status =
        status.with_context(std::string(op_name(d.kind)) + " (" + std::string(route_name(route)) +
                            " route) on rank " + std::to_string(rank_));
    abort(status.message());
    TSR_LOG(kError, "coll") << status.to_string();
  }
  return status;
}

Status CommImpl::run_staged(const OpDesc& d) {
  if (!stager_) {
    TSR_ASSIGN_OR_RETURN(stager_, Stager::create(*device_, stage_chunk_));
  }
  return stager_->run(d, rank_, size_,
                      [this](const OpDesc& h) { return run_algorithm(h, DeviceRoute::kStaged); });
}

Status CommImpl::run_algorithm(const OpDesc& d, DeviceRoute route) {
  if (aborted()) return abort_status();
  Context c(*this, d);
  // Point-to-point messages are numbered per pair (only two ranks take part); collectives share
  // one sequence across the communicator.
  if (d.kind == OpKind::kSend) {
    c.header.seq = send_seq_[size_t(d.peer)]++;
  } else if (d.kind == OpKind::kRecv) {
    c.header.seq = recv_seq_[size_t(d.peer)]++;
  } else {
    c.header.seq = seq_++;
  }
  const size_t bytes = op_bytes(d, size_);
  ChoiceMemo& memo = choice_memo_[size_t(d.kind)];
  if (memo.bytes != bytes) memo = ChoiceMemo{bytes, &tuner_->choose(d.kind, bytes)};
  const AlgoInfo& algo = *memo.info;
  c.header.algo = algorithm_index(d.kind, algo);
  FlightRecorder::Entry entry;
  entry.seq = c.header.seq;
  entry.op = d.kind;
  entry.dtype = d.dtype;
  entry.count = d.count;
  entry.peer = d.named_rank();
  entry.route = route_name(route);
  entry.queued = std::chrono::system_clock::now();
  const uint64_t id = recorder_.record(std::move(entry));
  recorder_.started(id, algo.name);
  Status status = algo.fn(c, d);
  recorder_.finished(id, status, c.header.step);
  if (!status.ok()) {
    const std::string what = std::string(op_name(d.kind)) + " #" + std::to_string(c.header.seq) +
                             " (" + std::string(algo.name) + ", " + std::string(route_name(route)) +
                             " route, step " + std::to_string(c.header.step) + ") on rank " +
                             std::to_string(rank_);
    status = status.with_context(what);
    // A failure inside the hierarchical algorithm aborts only the inner (per-host or cross-host)
    // communicator it happened on; this one must not go on as if its ranks were in step.
    if (!aborted()) abort(status.message());
    TSR_LOG(kError, "coll") << status.to_string() << "\nflight record of rank " << rank_ << ":\n"
                            << recorder_.dump(rank_);
  }
  return status;
}

// ---- building blocks for the hierarchical algorithms
// ---------------------------------------------

Status CommImpl::reduce_scatter_blocks(void* data, const std::vector<size_t>& counts,
                                       const std::vector<size_t>& displs, DType dtype,
                                       ReduceOp op) {
  // A ring reduce-scatter in place on `data`: partial sums accumulate in the blocks themselves
  // (data is the caller's scratch copy), so block r of data ends with the group's result.
  Context c(*this, OpDesc::reduce_scatter(data, data, counts.empty() ? 0 : counts[0], dtype, op));
  c.header.algo = 0xff;  // the hierarchical algorithms' own ring (algorithm_name: "algorithm?")
  c.header.seq = seq_++;
  const int n = size_, r = rank_;
  const size_t e = dtype_bytes(dtype);
  auto wrap = [n](int i) { return size_t(((i % n) + n) % n); };
  char* base = static_cast<char*>(data);
  for (int s = 0; s < n - 1; ++s) {
    const size_t out = wrap(r - s - 1), in = wrap(r - s - 2);
    P2P ops[2] = {c.send(wrap(r + 1), base + displs[out] * e, counts[out] * e),
                  c.recv_reduce(int(wrap(r - 1)), base + displs[in] * e, base + displs[in] * e,
                                counts[in] * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  return Status();
}

Status CommImpl::allreduce_inline(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) {
  return execute_now(OpDesc::allreduce(send, recv, count, dtype, op));
}

Status CommImpl::allgatherv_inline(void* data, const std::vector<size_t>& counts,
                                   const std::vector<size_t>& displs, DType dtype) {
  const void* mine = static_cast<char*>(data) + displs[size_t(rank_)] * dtype_bytes(dtype);
  return execute_now(OpDesc::allgatherv(mine, data, counts, displs, dtype));
}

Result<std::vector<std::string>> CommImpl::allgather_bytes(std::string_view mine) {
  std::vector<uint64_t> sizes(static_cast<size_t>(size_));
  const uint64_t my_size = mine.size();
  TSR_RETURN_IF_ERROR(execute(OpDesc::allgather(&my_size, sizes.data(), 1, DType::kI64)));
  std::vector<size_t> counts, displs;
  size_t total = 0;
  for (uint64_t s : sizes) {
    counts.push_back(size_t(s));
    displs.push_back(total);
    total += size_t(s);
  }
  std::string all(total, '\0');
  TSR_RETURN_IF_ERROR(
      execute(OpDesc::allgatherv(mine.data(), all.data(), counts, displs, DType::kU8)));
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(displs[size_t(r)], counts[size_t(r)]));
  return out;
}

}  // namespace tessera::coll
