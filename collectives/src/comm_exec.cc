// Running operations: the algorithm context, sequence numbers and headers, the flight recorder,
// and the proxy thread that runs operations queued on streams.
#include <cstring>

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

class Context final : public AlgoContext {
 public:
  explicit Context(CommImpl& comm) : comm_(comm) {}
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

Status CommImpl::execute_now(const OpDesc& d) {
  std::lock_guard lock(exec_mutex_);
  if (aborted()) return abort_status();
  Context c(*this);
  c.dtype = d.dtype;
  c.reduce_op = d.op;
  c.header.op = uint8_t(d.kind == OpKind::kRecv ? OpKind::kSend : d.kind);
  c.header.dtype = uint8_t(d.dtype);
  c.header.count = d.count;
  c.header.reduce = d.reduces() ? uint8_t(uint8_t(d.op) + 1) : 0;
  c.header.root =
      d.kind == OpKind::kReduce || d.kind == OpKind::kBroadcast ? uint32_t(d.root) + 1 : 0;
  // Point-to-point messages are numbered per pair (only two ranks take part); collectives share
  // one sequence across the communicator.
  if (d.kind == OpKind::kSend) {
    c.header.seq = send_seq_[size_t(d.root)]++;
  } else if (d.kind == OpKind::kRecv) {
    c.header.seq = recv_seq_[size_t(d.root)]++;
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
  entry.peer = (d.kind == OpKind::kReduce || d.kind == OpKind::kBroadcast ||
                d.kind == OpKind::kSend || d.kind == OpKind::kRecv)
                   ? d.root
                   : -1;
  entry.queued = std::chrono::system_clock::now();
  const uint64_t id = recorder_.record(std::move(entry));
  recorder_.started(id, algo.name);
  Status status = algo.fn(c, d);
  recorder_.finished(id, status, c.header.step);
  if (!status.ok()) {
    const std::string what = std::string(op_name(d.kind)) + " #" + std::to_string(c.header.seq) +
                             " (" + std::string(algo.name) + ", step " +
                             std::to_string(c.header.step) + ") on rank " + std::to_string(rank_);
    status = status.with_context(what);
    // A failure inside the hierarchical algorithm aborts only the inner (per-host or cross-host)
    // communicator it happened on; this one must not go on as if its ranks were in step.
    if (!aborted()) abort(status.message());
    TSR_LOG(kError, "coll") << status.to_string() << "\nflight record of rank " << rank_ << ":\n"
                            << recorder_.dump(rank_);
  }
  return status;
}

Result<Work> CommImpl::enqueue(OpDesc d, const hal::Stream& stream) {
  if (aborted()) return abort_status();
  auto state = std::make_shared<WorkState>();
  // The event first: its creation touches no stream, so failing there leaves nothing behind.
  const auto& backend = stream.backend();
  tsr_event event = nullptr;
  TSR_RETURN_IF_ERROR(
      backend->check(backend->api().event_create(stream.device(), TSR_EVENT_DISABLE_TIMING, &event),
                     "event_create for a collective's completion"));
  state->event = hal::Event(backend, event);
  // The callback opens the gate for the proxy once the stream reached this point, then holds the
  // stream until the operation finished, so later work on the stream sees its result.
  TSR_RETURN_IF_ERROR(stream.add_callback([state](Status upstream) {
    state->mark_ready(std::move(upstream));
    while (state->wait(std::chrono::milliseconds(50)).code() == StatusCode::kDeadlineExceeded) {
    }
  }));
  if (Status recorded = state->event.record(stream); !recorded.ok()) {
    // The callback is queued and would hold the stream forever: release it.
    state->finish(recorded);
    return recorded;
  }
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(Task{std::move(d), state});
    if (!proxy_.joinable()) proxy_ = std::thread([this] { proxy_main(); });
  }
  queue_cv_.notify_all();
  return Work(state);
}

void CommImpl::proxy_main() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      proxy_busy_ = true;
    }
    {
      std::lock_guard lock(queue_mutex_);
      proxy_at_gate_ = true;
    }
    // Until the stream reaches the operation: bounded by the communicator's timeout, and released
    // by an abort posted here or by a peer (which would otherwise only be seen once it runs).
    Status status = task.state->wait_ready(options_.timeout, [this]() -> Status {
      if (aborted()) return abort_status();
      Status by_peer = shm_ ? shm_->posted_abort_status(rank_) : Status();
      if (!by_peer.ok()) abort(by_peer.message());
      return by_peer;
    });
    {
      std::lock_guard lock(queue_mutex_);
      proxy_at_gate_ = false;
    }
    if (status.ok()) {
      status = execute_now(task.desc);
    } else if (!aborted()) {
      abort(std::string(op_name(task.desc.kind)) + " on a stream: " + status.message());
    }
    task.state->finish(std::move(status));
    {
      std::lock_guard lock(queue_mutex_);
      proxy_busy_ = false;
    }
    queue_cv_.notify_all();
  }
}

void CommImpl::drain() {
  std::unique_lock lock(queue_mutex_);
  queue_cv_.wait(lock, [&] { return queue_.empty() && !proxy_busy_; });
}

// ---- building blocks for the hierarchical algorithms
// ---------------------------------------------

Status CommImpl::reduce_scatter_blocks(void* data, const std::vector<size_t>& counts,
                                       const std::vector<size_t>& displs, DType dtype,
                                       ReduceOp op) {
  // A ring reduce-scatter in place on `data`: partial sums accumulate in the blocks themselves
  // (data is the caller's scratch copy), so block r of data ends with the group's result.
  Context c(*this);
  c.dtype = dtype;
  c.reduce_op = op;
  c.header.op = uint8_t(OpKind::kReduceScatter);
  c.header.dtype = uint8_t(dtype);
  c.header.reduce = uint8_t(uint8_t(op) + 1);
  c.header.algo = 0xff;  // the hierarchical algorithms' own ring (algorithm_name: "algorithm?")
  c.header.count = counts.empty() ? 0 : counts[0];
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
  OpDesc d;
  d.kind = OpKind::kAllReduce;
  d.send = send;
  d.recv = recv;
  d.count = count;
  d.dtype = dtype;
  d.op = op;
  return execute_now(d);
}

Status CommImpl::allgatherv_inline(void* data, const std::vector<size_t>& counts,
                                   const std::vector<size_t>& displs, DType dtype) {
  OpDesc d;
  d.kind = OpKind::kAllGatherV;
  d.send = static_cast<char*>(data) + displs[size_t(rank_)] * dtype_bytes(dtype);
  d.recv = data;
  d.dtype = dtype;
  d.counts = counts;
  d.displs = displs;
  for (size_t c : counts) d.count += c;
  return execute_now(d);
}

Result<std::vector<std::string>> CommImpl::allgather_bytes(std::string_view mine) {
  std::vector<uint64_t> sizes(static_cast<size_t>(size_));
  const uint64_t my_size = mine.size();
  OpDesc d;
  d.kind = OpKind::kAllGather;
  d.send = &my_size;
  d.recv = sizes.data();
  d.count = 1;
  d.dtype = DType::kI64;
  TSR_RETURN_IF_ERROR(execute(d));
  OpDesc v;
  v.kind = OpKind::kAllGatherV;
  v.dtype = DType::kU8;
  size_t total = 0;
  for (uint64_t s : sizes) {
    v.counts.push_back(size_t(s));
    v.displs.push_back(total);
    total += size_t(s);
  }
  v.count = total;
  std::string all(total, '\0');
  v.send = mine.data();
  v.recv = all.data();
  TSR_RETURN_IF_ERROR(execute(v));
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    out.push_back(all.substr(v.displs[size_t(r)], v.counts[size_t(r)]));
  }
  return out;
}

}  // namespace tessera::coll
