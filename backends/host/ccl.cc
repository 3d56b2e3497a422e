// The entries of the host reference CCL's sub-table: argument checks, communicator handles, the
// issue-order tickets and the group queue; the algorithms are in ccl_ops.cc, the shared segment
// in ccl_segment.cc.
//
// Groups: group_start/group_end nest (a per-thread depth). Operations issued inside a group are
// checked at once and queued; the outermost group_end enqueues, for each stream in the order it
// first appeared, one task holding that stream's operations: collectives run one after another
// in issue order, and each run of consecutive send/recv operations progresses together, so
// matching sends and receives between two ranks never deadlock inside a group.
#include "ccl.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "api.h"
#include "dtype.h"
#include "errors.h"
#include "handles.h"
#include "state.h"

namespace tessera::host::ccl {

void Comm::set_error(tsr_status status, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (error_ != TSR_OK) return;
  error_ = status;
  message_ = message;
}

tsr_status Comm::error(std::string* message) {
  std::lock_guard lock(mutex_);
  if (error_ != TSR_OK) *message = message_;
  return error_;
}

namespace {

constexpr uint64_t kCommTag = 0xC;
constexpr char kIdMagic[8] = {'T', 'S', 'R', 'H', 'C', 'C', 'L', '1'};
constexpr size_t kIdNameBytes = 16;
constexpr int kDefaultInitTimeoutSeconds = 60;

HandleTable<Comm>& comms() {
  static HandleTable<Comm> table{kCommTag};  // process-wide, as the communicators' segments are
  return table;
}

tsr_comm comm_handle(uint64_t id) {
  return reinterpret_cast<tsr_comm>(static_cast<uintptr_t>(id));
}

// The backend, when it is up and the CCL is on.
tsr_status require_enabled(const char* operation, Backend** out) {
  if (tsr_status s = require_backend(operation, out); s != TSR_OK) return s;
  if (!(*out)->config.collectives) {
    return fail(TSR_FAILED_PRECONDITION,
                "%s: the %s is off (set %s=1 or the init option collectives=1)", operation,
                kLibrary, kEnableEnv);
  }
  return TSR_OK;
}

tsr_status lookup_comm(const char* operation, tsr_comm handle, std::shared_ptr<Comm>* out) {
  *out = comms().find(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));
  if (*out == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "%s: comm %p is not a live communicator of the %s", operation,
                static_cast<void*>(handle), kLibrary);
  }
  return TSR_OK;
}

std::string segment_name(const tsr_comm_unique_id& id) {
  std::string name = "/tessera-ccl-";
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < kIdNameBytes; ++i) {
    name += kHex[id.bytes[sizeof kIdMagic + i] >> 4];
    name += kHex[id.bytes[sizeof kIdMagic + i] & 15];
  }
  return name;
}

tsr_status init_timeout(std::chrono::milliseconds* out) {
  *out = std::chrono::seconds(kDefaultInitTimeoutSeconds);
  const char* env = std::getenv(kInitTimeoutEnv);
  if (env == nullptr || env[0] == '\0') return TSR_OK;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !(seconds > 0) || seconds > 86400) {
    return fail(TSR_INVALID_ARGUMENT,
                "comm_init_rank: %s='%s' is not a number of seconds in (0, 86400]", kInitTimeoutEnv,
                env);
  }
  *out = std::chrono::milliseconds(int64_t(seconds * 1000.0));
  return TSR_OK;
}

// What the caller passed, before validation.
struct Call {
  const char* name;
  Kind kind;
  tsr_comm comm;
  tsr_stream stream;
  const void* send;
  void* recv;
  size_t count;
  tsr_dtype dtype;
  tsr_reduce_op op;
  int32_t peer;
};

// A checked operation and the stream it goes to.
struct Pending {
  Op op;
  std::shared_ptr<Stream> stream;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Pending> t_group;

// Resolves `ptr` (bytes long) to the address the backend reaches it through, refusing device
// memory of another device than the communicator's.
tsr_status resolve_buffer(Backend& backend, const char* operation, const char* param,
                          const void* ptr, size_t bytes, int32_t device, void** out) {
  if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, param);
  if (std::optional<Allocation> a = backend.memory.find(ptr);
      a && (a->kind == AllocationKind::kDevice || a->kind == AllocationKind::kIpc) &&
      a->device != device) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is memory of device %d, not of device %d (the communicator's)",
                operation, param, ptr, a->device, device);
  }
  return resolve(backend.memory, operation, param, ptr, bytes, /*device_only=*/false, out);
}

// Validates `call` into *out. count == 0 leaves out->op.count 0 (a no-op).
tsr_status check(const Call& call, Pending* out) {
  const char* kOp = call.name;
  Backend* backend = nullptr;
  if (tsr_status s = require_enabled(kOp, &backend); s != TSR_OK) return s;
  std::shared_ptr<Comm> comm;
  if (tsr_status s = lookup_comm(kOp, call.comm, &comm); s != TSR_OK) return s;
  std::shared_ptr<Stream> stream;
  if (tsr_status s = lookup_stream(*backend, kOp, call.stream, &stream); s != TSR_OK) return s;
  if (stream->device() != comm->device) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: the stream is on device %d but rank %d's communicator is on device %d", kOp,
                stream->device(), comm->rank, comm->device);
  }
  const int32_t dtype = enum_bits(call.dtype), op = enum_bits(call.op);
  if (!dtype_valid(dtype)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: dtype %d is not a tsr_dtype", kOp, dtype);
  }
  const bool reduces = call.kind == Kind::kAllReduce || call.kind == Kind::kReduceScatter;
  if (reduces && (op < 0 || op >= TSR_REDUCE_OP_COUNT)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: op %d is not a tsr_reduce_op", kOp, op);
  }
  const bool point = call.kind == Kind::kSend || call.kind == Kind::kRecv;
  if ((point || call.kind == Kind::kBroadcast) && (call.peer < 0 || call.peer >= comm->nranks)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %s %d is not a rank of the communicator (0..%d)", kOp,
                call.kind == Kind::kBroadcast ? "root" : "peer", call.peer, comm->nranks - 1);
  }
  if (point && call.peer == comm->rank) {
    return fail(TSR_INVALID_ARGUMENT, "%s: rank %d cannot %s itself", kOp, comm->rank, kOp);
  }
  Op& o = out->op;
  o.kind = call.kind;
  o.name = kOp;
  o.comm = comm;
  o.count = call.count;
  o.element = dtype_size(dtype);
  o.dtype = static_cast<tsr_dtype>(dtype);
  o.op = reduces ? static_cast<tsr_reduce_op>(op) : TSR_REDUCE_SUM;
  o.peer = call.peer;
  out->stream = std::move(stream);
  if (call.count == 0) return TSR_OK;
  const size_t n = size_t(comm->nranks);
  if (call.count > SIZE_MAX / o.element / n) {
    return fail(TSR_INVALID_ARGUMENT, "%s: count %zu of %s overflows size_t", kOp, call.count,
                dtype_name(dtype));
  }
  const size_t block = call.count * o.element;
  // Bytes of each side: allgather's recv and reduce_scatter's send hold one block per rank.
  size_t send_bytes = block, recv_bytes = block;
  switch (call.kind) {
    case Kind::kAllGather: recv_bytes = block * n; break;
    case Kind::kReduceScatter: send_bytes = block * n; break;
    case Kind::kAllToAll: send_bytes = recv_bytes = block * n; break;
    default: break;
  }
  const bool has_send =
      call.kind != Kind::kRecv && (call.kind != Kind::kBroadcast || call.peer == comm->rank);
  const bool has_recv = call.kind != Kind::kSend;
  void* send = nullptr;
  void* recv = nullptr;
  if (has_send) {
    if (tsr_status s =
            resolve_buffer(*backend, kOp, "send", call.send, send_bytes, comm->device, &send);
        s != TSR_OK) {
      return s;
    }
  }
  if (has_recv) {
    if (tsr_status s = resolve_buffer(*backend, kOp, call.kind == Kind::kRecv ? "buf" : "recv",
                                      call.recv, recv_bytes, comm->device, &recv);
        s != TSR_OK) {
      return s;
    }
  }
  if (has_send && has_recv && ranges_overlap(send, send_bytes, recv, recv_bytes)) {
    // In place as NCCL defines it: the same buffer, or (allgather, reduce_scatter) this rank's
    // block of the larger buffer.
    const char* s = static_cast<const char*>(send);
    const char* r = static_cast<const char*>(recv);
    const size_t mine = size_t(comm->rank) * block;
    const bool in_place = (call.kind == Kind::kAllReduce || call.kind == Kind::kBroadcast) ? s == r
                          : call.kind == Kind::kAllGather     ? s == r + mine
                          : call.kind == Kind::kReduceScatter ? r == s + mine
                                                              : false;
    if (!in_place) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: send and recv overlap without being the in-place form (the same buffer, "
                  "or this rank's block of the larger one; alltoall has none)",
                  kOp);
    }
  }
  o.send = static_cast<const char*>(send);
  o.recv = static_cast<char*>(recv);
  return TSR_OK;
}

// Fails every rank of every communicator in `ops` (so no peer waits for this one) and records
// the failure as this rank's asynchronous error.
void fail_communicators(const std::vector<Op>& ops, tsr_status status, const std::string& why) {
  std::set<Comm*> seen;
  for (const Op& op : ops) {
    if (!seen.insert(op.comm.get()).second) continue;
    op.comm->set_error(status, why);
    op.comm->segment->post_abort(status, why);
  }
}

// Runs one stream's share of the issued operations, holding each communicator's turn.
tsr_status run_task(const std::vector<Op>& ops,
                    const std::vector<std::pair<std::shared_ptr<Comm>, uint64_t>>& tickets,
                    tsr_status stream_status, std::string* message) {
  size_t held = 0;
  tsr_status status = TSR_OK;
  for (; held < tickets.size() && status == TSR_OK; ++held) {
    Comm& c = *tickets[held].first;
    const uint64_t ticket = tickets[held].second;
    status = c.segment->wait([&] { return c.turn.load() == ticket; }, ops.front().name,
                             "its earlier operations on other streams", message);
    if (status != TSR_OK) break;
  }
  if (status == TSR_OK && stream_status != TSR_OK) {
    status = stream_status;
    *message = "rank " + std::to_string(ops.front().comm->rank) +
               "'s stream had already failed when " + ops.front().name + " was due";
  }
  for (size_t i = 0; i < ops.size() && status == TSR_OK;) {
    if (ops[i].kind != Kind::kSend && ops[i].kind != Kind::kRecv) {
      status = run_collective(ops[i], message);
      ++i;
      continue;
    }
    std::vector<const Op*> batch;
    for (; i < ops.size() && (ops[i].kind == Kind::kSend || ops[i].kind == Kind::kRecv); ++i) {
      batch.push_back(&ops[i]);
    }
    status = run_point_to_point(batch, message);
  }
  if (status != TSR_OK) {
    fail_communicators(ops, status, *message);
    *message = std::string(kLibrary) + ": " + *message;  // the stream's error names the library
  }
  for (size_t i = 0; i < held; ++i) {
    Comm& c = *tickets[i].first;
    c.turn.store(tickets[i].second + 1);
    c.segment->wake();
  }
  return status;
}

// Enqueues `ops` (all on `stream`) as one task, taking a ticket on each communicator. The
// communicators' issue locks are held across ticket and enqueue, so a refused enqueue (a
// destroyed stream) gives its tickets back and never leaves later operations waiting for them.
tsr_status enqueue(Stream& stream, std::vector<Op> ops) {
  std::vector<Comm*> order;
  for (const Op& op : ops) order.push_back(op.comm.get());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (Comm* c : order) locks.emplace_back(c->issue_mutex);
  std::vector<std::pair<std::shared_ptr<Comm>, uint64_t>> tickets;
  for (const Op& op : ops) {
    bool have = false;
    for (const auto& t : tickets) have = have || t.first == op.comm;
    if (!have) tickets.emplace_back(op.comm, op.comm->next_ticket.fetch_add(1));
  }
  const char* name = ops.size() == 1 ? ops.front().name : "group";
  tsr_status s = stream.enqueue(
      name, /*always_run=*/true,
      [ops = std::move(ops), tickets](tsr_status stream_status, std::string* message) {
        return run_task(ops, tickets, stream_status, message);
      });
  if (s != TSR_OK) {
    for (const auto& t : tickets) t.first->next_ticket.fetch_sub(1);
  }
  return s;
}

tsr_status issue(const Call& call) {
  return guarded(call.name, [&] {
    Pending pending;
    if (tsr_status s = check(call, &pending); s != TSR_OK) return s;
    if (pending.op.count == 0) return TSR_OK;
    if (t_group_depth > 0) {
      t_group.push_back(std::move(pending));
      return TSR_OK;
    }
    std::vector<Op> ops;
    ops.push_back(std::move(pending.op));
    return enqueue(*pending.stream, std::move(ops));
  });
}

// ---- the entries ------------------------------------------------------------------------------

tsr_status get_unique_id(tsr_comm_unique_id* out_id) {
  static constexpr const char* kOp = "get_unique_id";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_enabled(kOp, &backend); s != TSR_OK) return s;
    if (out_id == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_id is NULL", kOp);
    tsr_comm_unique_id id{};
    std::memcpy(id.bytes, kIdMagic, sizeof kIdMagic);
    uint8_t* name = id.bytes + sizeof kIdMagic;
    if (getrandom(name, kIdNameBytes, 0) != ssize_t(kIdNameBytes)) {
      return fail(TSR_INTERNAL, "%s: getrandom failed: %s", kOp, std::strerror(errno));
    }
    *out_id = id;
    return TSR_OK;
  });
}

tsr_status comm_init_rank(int32_t device, int32_t nranks, const tsr_comm_unique_id* id,
                          int32_t rank, tsr_comm* out_comm) {
  static constexpr const char* kOp = "comm_init_rank";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_enabled(kOp, &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, kOp, device, &dev); s != TSR_OK) return s;
    if (id == nullptr || out_comm == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", kOp, id == nullptr ? "id" : "out_comm");
    }
    if (std::memcmp(id->bytes, kIdMagic, sizeof kIdMagic) != 0) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: the unique id was not made by the %s's get_unique_id (or was corrupted "
                  "on its way to rank %d)",
                  kOp, kLibrary, rank);
    }
    if (nranks < 1 || nranks > kMaxRanks) {
      return fail(TSR_INVALID_ARGUMENT, "%s: nranks is %d (the %s supports 1..%d)", kOp, nranks,
                  kLibrary, kMaxRanks);
    }
    if (rank < 0 || rank >= nranks) {
      return fail(TSR_INVALID_ARGUMENT, "%s: rank %d is not in 0..%d", kOp, rank, nranks - 1);
    }
    std::chrono::milliseconds timeout;
    if (tsr_status s = init_timeout(&timeout); s != TSR_OK) return s;
    auto comm = std::make_shared<Comm>();
    comm->device = device;
    comm->rank = rank;
    comm->nranks = nranks;
    std::string message;
    if (tsr_status s =
            Segment::join(segment_name(*id), nranks, rank, timeout, &comm->segment, &message);
        s != TSR_OK) {
      return fail(s, "%s: rank %d of %d on device %d: %s", kOp, rank, nranks, device,
                  message.c_str());
    }
    log(TSR_LOG_DEBUG, "%s: rank %d of %d formed on host device %d", kLibrary, rank, nranks,
        device);
    *out_comm = comm_handle(comms().insert(std::move(comm)));
    return TSR_OK;
  });
}

// Releases the handle at once. Operations already enqueued keep the communicator's state alive
// and finish (or fail on abort or a peer's death) on their streams.
tsr_status comm_destroy(tsr_comm handle) {
  static constexpr const char* kOp = "comm_destroy";
  return guarded(kOp, [&] {
    std::shared_ptr<Comm> comm;
    if (tsr_status s = lookup_comm(kOp, handle, &comm); s != TSR_OK) return s;
    comms().remove(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));
    return TSR_OK;
  });
}

tsr_status comm_abort(tsr_comm handle) {
  static constexpr const char* kOp = "comm_abort";
  return guarded(kOp, [&] {
    std::shared_ptr<Comm> comm;
    if (tsr_status s = lookup_comm(kOp, handle, &comm); s != TSR_OK) return s;
    comm->segment->post_abort(TSR_ABORTED, "rank " + std::to_string(comm->rank) +
                                               " aborted the communicator (comm_abort)");
    return TSR_OK;
  });
}

tsr_status comm_get_async_error(tsr_comm handle) {
  static constexpr const char* kOp = "comm_get_async_error";
  return guarded(kOp, [&] {
    std::shared_ptr<Comm> comm;
    if (tsr_status s = lookup_comm(kOp, handle, &comm); s != TSR_OK) return s;
    std::string why;
    tsr_status status = comm->error(&why);
    if (status == TSR_OK) status = comm->segment->aborted(&why);
    // No check of the peers' processes here: a peer that exited after its last operation is no
    // failure (the communicator's users poll this while their own part of that operation still
    // runs). A death during an operation fails that operation's waits, which record it here.
    if (status == TSR_OK) return TSR_OK;
    return fail(status, "%s: rank %d of %d: %s", kLibrary, comm->rank, comm->nranks, why.c_str());
  });
}

tsr_status allreduce(const void* send, void* recv, size_t count, tsr_dtype dtype, tsr_reduce_op op,
                     tsr_comm comm, tsr_stream stream) {
  return issue({"allreduce", Kind::kAllReduce, comm, stream, send, recv, count, dtype, op, 0});
}

tsr_status allgather(const void* send, void* recv, size_t send_count, tsr_dtype dtype,
                     tsr_comm comm, tsr_stream stream) {
  return issue({"allgather", Kind::kAllGather, comm, stream, send, recv, send_count, dtype,
                TSR_REDUCE_SUM, 0});
}

tsr_status reduce_scatter(const void* send, void* recv, size_t recv_count, tsr_dtype dtype,
                          tsr_reduce_op op, tsr_comm comm, tsr_stream stream) {
  return issue(
      {"reduce_scatter", Kind::kReduceScatter, comm, stream, send, recv, recv_count, dtype, op, 0});
}

tsr_status broadcast(const void* send, void* recv, size_t count, tsr_dtype dtype, int32_t root,
                     tsr_comm comm, tsr_stream stream) {
  return issue({"broadcast", Kind::kBroadcast, comm, stream, send, recv, count, dtype,
                TSR_REDUCE_SUM, root});
}

tsr_status send(const void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                tsr_stream stream) {
  return issue(
      {"send", Kind::kSend, comm, stream, buf, nullptr, count, dtype, TSR_REDUCE_SUM, peer});
}

tsr_status recv(void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                tsr_stream stream) {
  return issue(
      {"recv", Kind::kRecv, comm, stream, nullptr, buf, count, dtype, TSR_REDUCE_SUM, peer});
}

tsr_status alltoall(const void* send, void* recv, size_t count_per_peer, tsr_dtype dtype,
                    tsr_comm comm, tsr_stream stream) {
  return issue({"alltoall", Kind::kAllToAll, comm, stream, send, recv, count_per_peer, dtype,
                TSR_REDUCE_SUM, 0});
}

tsr_status group_start() {
  ++t_group_depth;
  return TSR_OK;
}

tsr_status group_end() {
  static constexpr const char* kOp = "group_end";
  return guarded(kOp, [&] {
    if (t_group_depth == 0) {
      return fail(TSR_FAILED_PRECONDITION, "%s: no group_start on this thread", kOp);
    }
    if (--t_group_depth > 0) return TSR_OK;
    std::vector<Pending> pending = std::move(t_group);
    t_group.clear();
    // One task per stream, streams in the order they first appear.
    std::vector<Stream*> streams;
    for (const Pending& p : pending) {
      if (std::find(streams.begin(), streams.end(), p.stream.get()) == streams.end()) {
        streams.push_back(p.stream.get());
      }
    }
    tsr_status first = TSR_OK;
    for (Stream* stream : streams) {
      std::vector<Op> ops;
      for (Pending& p : pending) {
        if (p.stream.get() == stream) ops.push_back(p.op);
      }
      tsr_status s = enqueue(*stream, std::move(ops));
      if (first == TSR_OK) first = s;
    }
    return first;
  });
}

const tsr_collectives_api_v1 kTable = [] {
  tsr_collectives_api_v1 t{};
  t.struct_size = sizeof t;
  t.library = kLibrary;
  t.get_unique_id = &get_unique_id;
  t.comm_init_rank = &comm_init_rank;
  t.comm_destroy = &comm_destroy;
  t.comm_abort = &comm_abort;
  t.comm_get_async_error = &comm_get_async_error;
  t.allreduce = &allreduce;
  t.allgather = &allgather;
  t.reduce_scatter = &reduce_scatter;
  t.broadcast = &broadcast;
  t.send = &send;
  t.recv = &recv;
  t.alltoall = &alltoall;
  t.group_start = &group_start;
  t.group_end = &group_end;
  return t;
}();

}  // namespace
}  // namespace tessera::host::ccl

namespace tessera::host::api {
const tsr_collectives_api_v1* collectives() {
  return &ccl::kTable;
}
}  // namespace tessera::host::api
