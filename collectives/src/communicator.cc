// The public Communicator: argument checks with errors that name the operation and the argument,
// then CommImpl.
#include "tessera/coll/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <span>

#include "comm_impl.h"
#include "memory_kind.h"
#include "reduce.h"
#include "tessera/common/env.h"

namespace tessera::coll {

std::string_view op_name(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce: return "allreduce";
    case OpKind::kReduce: return "reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllGather: return "allgather";
    case OpKind::kAllGatherV: return "allgatherv";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllToAll: return "alltoall";
    case OpKind::kAllToAllV: return "alltoallv";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kBarrier: return "barrier";
  }
  return "unknown";
}

// ---- Work ---------------------------------------------------------------------------------------

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return failed_precondition("Work::wait on an empty handle");
  return state_->wait(timeout);
}

bool Work::done() const {
  return state_ && state_->done();
}

const hal::Event& Work::event() const {
  static const hal::Event kNone;
  return state_ ? state_->event : kNone;
}

// ---- creation -----------------------------------------------------------------------------------

namespace {

Result<CommOptions> resolve(CommOptions options) {
  if (options.timeout.count() <= 0) {
    // At most a year: deadlines are steady_clock::now() + timeout, in int64 nanoseconds.
    TSR_ASSIGN_OR_RETURN(const int64_t ms, env::get_int("TESSERA_COLL_TIMEOUT_MS", 300000, 1,
                                                        int64_t(365) * 24 * 3600 * 1000));
    options.timeout = std::chrono::milliseconds(ms);
  }
  if (options.algorithms.empty()) options.algorithms = env::get("TESSERA_COLL_ALGO").value_or("");
  if (options.transport.empty()) {
    options.transport = env::get("TESSERA_COLL_TRANSPORT").value_or("auto");
  }
  if (options.transport != "auto" && options.transport != "shm" && options.transport != "ucx") {
    return invalid_argument("TESSERA_COLL_TRANSPORT='" + options.transport +
                            "': expected auto, shm or ucx");
  }
  if (options.memory.empty()) options.memory = env::get("TESSERA_COLL_MEMORY").value_or("auto");
  if (auto mode = parse_memory_mode(options.memory); !mode.ok()) {
    return mode.status().with_context("TESSERA_COLL_MEMORY (CommOptions::memory)");
  }
  if (options.device_path.empty()) {
    options.device_path = env::get("TESSERA_COLL_DEVICE_PATH").value_or("auto");
  }
  if (auto path = parse_device_path(options.device_path); !path.ok()) {
    return path.status().with_context("TESSERA_COLL_DEVICE_PATH (CommOptions::device_path)");
  }
  if (options.stage_chunk_bytes == 0) {
    // Each chunk is a pinned host buffer and a device buffer: 1 GiB is already absurd.
    TSR_ASSIGN_OR_RETURN(const uint64_t chunk, env::get_bytes("TESSERA_COLL_STAGE_CHUNK",
                                                              uint64_t(4) << 20, 1, 1ull << 30));
    options.stage_chunk_bytes = size_t(chunk);
  }
  return options;
}

// What the options ask of the device, checked before any exchange so that every rank (all read
// the same environment) fails the same way instead of leaving the others in a creation.
Status check_device_options(const CommOptions& options, const std::optional<hal::Device>& device) {
  if (parse_memory_mode(options.memory).value_or(MemoryMode::kAuto) == MemoryMode::kDevice &&
      !device) {
    return invalid_argument(
        "Communicator::create: memory=device (TESSERA_COLL_MEMORY) needs the communicator's "
        "device: use create(bootstrap, device, options)");
  }
  if (parse_device_path(options.device_path).value_or(DevicePath::kAuto) == DevicePath::kNative) {
    if (!device) {
      return invalid_argument(
          "Communicator::create: device path native (TESSERA_COLL_DEVICE_PATH) needs the "
          "communicator's device: use create(bootstrap, device, options)");
    }
    // The library must be there and on for this device (the host backend's reference CCL is off
    // unless enabled); native_route.h says what runs where.
    if (std::string why = native_unavailable_reason(*device); !why.empty()) {
      return failed_precondition(
          "Communicator::create: device path native (TESSERA_COLL_DEVICE_PATH) on " + device->id() +
          ": " + why + "; use auto or staged");
    }
  }
  return Status();
}

Result<std::shared_ptr<Communicator>> create_world(std::shared_ptr<Bootstrap> bootstrap,
                                                   std::optional<hal::Device> device,
                                                   CommOptions options) {
  if (!bootstrap) return invalid_argument("Communicator::create: bootstrap is null");
  TSR_ASSIGN_OR_RETURN(options, resolve(std::move(options)));
  TSR_RETURN_IF_ERROR(check_device_options(options, device));
  CommImpl::CreateArgs args;
  // Per bootstrap and generation: a restarted rank's first communicator of generation g has the
  // same uid (hence store keys, shared-memory segment and UCX ids) as the survivors' first one of
  // g, and nothing of an older generation can collide with it.
  const uint64_t index = bootstrap->next_world_index();
  args.uid = "g" + std::to_string(bootstrap->info().generation) + "w" + std::to_string(index);
  args.bootstrap = bootstrap;
  args.device = std::move(device);
  args.options = options;
  args.world_rank = bootstrap->info().rank;
  args.key = bootstrap->info().rank;
  auto exchanges = std::make_shared<int>(0);
  Bootstrap* boot = bootstrap.get();
  const std::string uid = args.uid;
  args.exchange = [boot, uid, exchanges](std::string_view mine) {
    return boot->allgather("comm/" + uid + "/" + std::to_string((*exchanges)++), mine);
  };
  TSR_ASSIGN_OR_RETURN(std::unique_ptr<CommImpl> impl, CommImpl::create(std::move(args)));
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace

Result<std::shared_ptr<Communicator>> Communicator::create(std::shared_ptr<Bootstrap> bootstrap,
                                                           CommOptions options) {
  return create_world(std::move(bootstrap), std::nullopt, std::move(options));
}

Result<std::shared_ptr<Communicator>> Communicator::create(std::shared_ptr<Bootstrap> bootstrap,
                                                           const hal::Device& device,
                                                           CommOptions options) {
  return create_world(std::move(bootstrap), device, std::move(options));
}

Communicator::Communicator(std::unique_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank();
}
int Communicator::size() const {
  return impl_->size();
}
int Communicator::local_rank() const {
  return impl_->local_rank();
}
int Communicator::local_size() const {
  return impl_->local_size();
}
int Communicator::num_hosts() const {
  return impl_->num_hosts();
}
int Communicator::world_rank(int rank) const {
  return impl_->world_rank(rank);
}
void Communicator::abort(std::string reason) {
  impl_->abort(reason);
}
bool Communicator::aborted() const {
  return impl_->aborted();
}
std::string Communicator::flight_record() const {
  return impl_->flight_record();
}
std::string_view Communicator::algorithm_for(OpKind op, size_t bytes) const {
  return impl_->tuner().choose(op, bytes).name;
}
std::string_view Communicator::route_for(OpKind op, bool device_memory) const {
  OpDesc d;
  d.kind = op;
  d.device_memory = device_memory;
  return route_name(impl_->route_for(d));
}

Result<std::shared_ptr<Communicator>> Communicator::split(int color, int key) {
  if (impl_->aborted()) return impl_->abort_status();
  TSR_ASSIGN_OR_RETURN(std::unique_ptr<CommImpl> child, impl_->split(color < 0 ? -1 : color, key));
  if (!child) return std::shared_ptr<Communicator>();
  return std::shared_ptr<Communicator>(new Communicator(std::move(child)));
}

Result<std::shared_ptr<Communicator>> Communicator::group(std::span<const int> ranks) {
  int position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size()) {
      return invalid_argument("Communicator::group: rank " + std::to_string(ranks[i]) +
                              " at position " + std::to_string(i) + " is not in [0, " +
                              std::to_string(size()) + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      if (ranks[j] == ranks[i]) {
        return invalid_argument("Communicator::group: rank " + std::to_string(ranks[i]) +
                                " listed twice");
      }
    }
    if (ranks[i] == rank()) position = int(i);
  }
  return split(position >= 0 ? 0 : -1, position);
}

// ---- argument checks
// ------------------------------------------------------------------------------

namespace {

Status check_buffer(const char* op, const char* name, const void* p, size_t count) {
  if (p == nullptr && count > 0) {
    return invalid_argument(std::string(op) + ": " + name + " is null (count " +
                            std::to_string(count) + ")");
  }
  return Status();
}

Status check_rank(const char* op, const char* name, int r, int size) {
  if (r < 0 || r >= size) {
    return invalid_argument(std::string(op) + ": " + name + " " + std::to_string(r) +
                            " is not a rank of this communicator (size " + std::to_string(size) +
                            ")");
  }
  return Status();
}

Status check_dtype(const char* op, DType dtype, ReduceOp rop, bool reduces) {
  if (int32_t(dtype) < 0 || int32_t(dtype) >= TSR_DTYPE_COUNT) {
    return invalid_argument(std::string(op) + ": dtype " + std::to_string(int32_t(dtype)) +
                            " is not a tessera dtype");
  }
  if (reduces && (int32_t(rop) < 0 || int32_t(rop) >= TSR_REDUCE_OP_COUNT)) {
    return invalid_argument(std::string(op) + ": reduction " + std::to_string(int32_t(rop)) +
                            " is not a tessera reduction");
  }
  return Status();
}

// The bytes an operation touches per buffer must fit in size_t (a count of -1 passed as size_t,
// or 2^62 f32, would otherwise wrap to a small or zero size).
Status check_bytes(const char* op, size_t count, DType dtype, size_t per_rank_blocks) {
  const size_t e = hal::dtype_size(dtype);
  if (e > 0 && count > std::numeric_limits<size_t>::max() / e / per_rank_blocks) {
    return invalid_argument(
        std::string(op) + ": count " + std::to_string(count) + " x " + std::to_string(e) +
        " bytes" +
        (per_rank_blocks > 1 ? " x " + std::to_string(per_rank_blocks) + " ranks" : std::string()) +
        " overflows the address space");
  }
  return Status();
}

// The sum of a count array, refused when it wraps.
Result<size_t> checked_sum(const char* op, const char* name, std::span<const size_t> counts) {
  size_t total = 0;
  for (size_t c : counts) {
    if (c > std::numeric_limits<size_t>::max() - total) {
      return invalid_argument(std::string(op) + ": the sum of " + name + " overflows size_t");
    }
    total += c;
  }
  return total;
}

// A call this rank refuses while the others enter the operation would leave them waiting until
// the timeout, and shift this rank's sequence numbers against theirs: with peers, a refused call
// aborts the communicator (they fail at once with "aborted by rank R: <why>").
Status refuse(CommImpl& impl, int rank, int size, Status why) {
  if (!why.ok() && size > 1) {
    impl.abort("rank " + std::to_string(rank) + " refused its call: " + why.message());
  }
  return why;
}

// The argument checks of one operation, shared by the blocking and the stream forms so both
// refuse the same calls in the same words. The v-variants check their count arrays themselves.
Status check_args(const OpDesc& d, int rank, int size) {
  const std::string name(op_name(d.kind));
  const char* op = name.c_str();
  TSR_RETURN_IF_ERROR(check_dtype(op, d.dtype, d.op, d.reduces()));
  const bool per_rank = d.kind == OpKind::kAllGather || d.kind == OpKind::kReduceScatter ||
                        d.kind == OpKind::kAllToAll;
  TSR_RETURN_IF_ERROR(check_bytes(op, d.count, d.dtype, per_rank ? size_t(size) : 1));
  switch (d.kind) {
    case OpKind::kReduce:
      TSR_RETURN_IF_ERROR(check_rank(op, "root", d.root, size));
      TSR_RETURN_IF_ERROR(check_buffer(op, "send", d.send, d.count));
      return rank == d.root ? check_buffer(op, "recv", d.recv, d.count) : Status();
    case OpKind::kBroadcast:
      TSR_RETURN_IF_ERROR(check_rank(op, "root", d.root, size));
      if (rank == d.root) TSR_RETURN_IF_ERROR(check_buffer(op, "send", d.send, d.count));
      return check_buffer(op, "recv", d.recv, d.count);
    case OpKind::kSend:
    case OpKind::kRecv:
      TSR_RETURN_IF_ERROR(check_rank(op, "peer", d.peer, size));
      if (d.peer == rank) return invalid_argument(name + ": peer is this rank");
      return check_buffer(op, "buf", d.kind == OpKind::kSend ? d.send : d.recv, d.count);
    case OpKind::kBarrier: return Status();
    default:  // allreduce, allgather, reduce_scatter, alltoall: a send and a receive buffer
      TSR_RETURN_IF_ERROR(check_buffer(op, "send", d.send, d.count));
      return check_buffer(op, "recv", d.recv, d.count);
  }
}

// Which memory the buffers are (memory_kind.h): refuses memory of another device, host memory
// under memory=device, device memory the CPU cannot address under memory=host, mixed kinds.
// `stream` is the stream of a stream form (the device to check against when the communicator has
// none).
Status check_memory(const CommImpl& impl, OpDesc& d, int rank, int size,
                    const hal::Stream* stream) {
  TSR_ASSIGN_OR_RETURN(const BufferMemory memory,
                       classify_buffers(d, rank, size, impl.memory_target(stream)));
  d.device_memory = memory == BufferMemory::kDevice;
  return Status();
}

// Every blocking operation: refused once the communicator is aborted, then checked, then run.
Status run(CommImpl& impl, int rank, int size, OpDesc d) {
  if (impl.aborted()) return impl.abort_status();
  TSR_RETURN_IF_ERROR(refuse(impl, rank, size, check_args(d, rank, size)));
  TSR_RETURN_IF_ERROR(refuse(impl, rank, size, check_memory(impl, d, rank, size, nullptr)));
  return impl.execute(d);
}

}  // namespace

#define TSR_CHECK_COMM(opname)                          \
  do {                                                  \
    if (impl_->aborted()) return impl_->abort_status(); \
  } while (0)

Status Communicator::allreduce(const void* send, void* recv, size_t count, DType dtype,
                               ReduceOp op) {
  return run(*impl_, rank(), size(), OpDesc::allreduce(send, recv, count, dtype, op));
}

Status Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                            int root) {
  return run(*impl_, rank(), size(), OpDesc::reduce(send, recv, count, dtype, op, root));
}

Status Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  return run(*impl_, rank(), size(), OpDesc::broadcast(send, recv, count, dtype, root));
}

Status Communicator::allgather(const void* send, void* recv, size_t count, DType dtype) {
  return run(*impl_, rank(), size(), OpDesc::allgather(send, recv, count, dtype));
}

Status Communicator::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                                std::span<const size_t> displs, DType dtype) {
  TSR_CHECK_COMM("allgatherv");
  size_t total = 0;
  const Status checked = [&]() -> Status {
    TSR_RETURN_IF_ERROR(check_dtype("allgatherv", dtype, ReduceOp::kSum, false));
    if (counts.size() != size_t(size()) || displs.size() != size_t(size())) {
      return invalid_argument("allgatherv: counts and displs need " + std::to_string(size()) +
                              " entries (got " + std::to_string(counts.size()) + " and " +
                              std::to_string(displs.size()) + ")");
    }
    TSR_ASSIGN_OR_RETURN(total, checked_sum("allgatherv", "counts", counts));
    TSR_RETURN_IF_ERROR(check_bytes("allgatherv", total, dtype, 1));
    TSR_RETURN_IF_ERROR(check_buffer("allgatherv", "send", send, counts[size_t(rank())]));
    return check_buffer("allgatherv", "recv", recv, total);
  }();
  TSR_RETURN_IF_ERROR(refuse(*impl_, rank(), size(), checked));
  OpDesc d = OpDesc::allgatherv(send, recv, {counts.begin(), counts.end()},
                                {displs.begin(), displs.end()}, dtype);
  TSR_RETURN_IF_ERROR(
      refuse(*impl_, rank(), size(), check_memory(*impl_, d, rank(), size(), nullptr)));
  return impl_->execute(d);
}

Status Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                    ReduceOp op) {
  return run(*impl_, rank(), size(), OpDesc::reduce_scatter(send, recv, recv_count, dtype, op));
}

Status Communicator::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  return run(*impl_, rank(), size(), OpDesc::alltoall(send, recv, count, dtype));
}

Status Communicator::alltoallv(const void* send, std::span<const size_t> send_counts,
                               std::span<const size_t> send_displs, void* recv,
                               std::span<const size_t> recv_counts,
                               std::span<const size_t> recv_displs, DType dtype) {
  TSR_CHECK_COMM("alltoallv");
  const Status checked = [&]() -> Status {
    TSR_RETURN_IF_ERROR(check_dtype("alltoallv", dtype, ReduceOp::kSum, false));
    const size_t n = size_t(size());
    if (send_counts.size() != n || send_displs.size() != n || recv_counts.size() != n ||
        recv_displs.size() != n) {
      return invalid_argument("alltoallv: counts and displacements need " + std::to_string(n) +
                              " entries each");
    }
    TSR_ASSIGN_OR_RETURN(const size_t sent, checked_sum("alltoallv", "send_counts", send_counts));
    TSR_ASSIGN_OR_RETURN(const size_t received,
                         checked_sum("alltoallv", "recv_counts", recv_counts));
    TSR_RETURN_IF_ERROR(check_bytes("alltoallv", std::max(sent, received), dtype, 1));
    TSR_RETURN_IF_ERROR(check_buffer("alltoallv", "send", send, sent));
    return check_buffer("alltoallv", "recv", recv, received);
  }();
  TSR_RETURN_IF_ERROR(refuse(*impl_, rank(), size(), checked));
  // Count 0 in the header: the total moved is not known locally (OpDesc::alltoallv).
  OpDesc d = OpDesc::alltoallv(send, {send_counts.begin(), send_counts.end()},
                               {send_displs.begin(), send_displs.end()}, recv,
                               {recv_counts.begin(), recv_counts.end()},
                               {recv_displs.begin(), recv_displs.end()}, dtype);
  TSR_RETURN_IF_ERROR(
      refuse(*impl_, rank(), size(), check_memory(*impl_, d, rank(), size(), nullptr)));
  return impl_->execute(d);
}

Status Communicator::send(const void* buf, size_t count, DType dtype, int peer) {
  return run(*impl_, rank(), size(), OpDesc::send_to(buf, count, dtype, peer));
}

Status Communicator::recv(void* buf, size_t count, DType dtype, int peer) {
  return run(*impl_, rank(), size(), OpDesc::recv_from(buf, count, dtype, peer));
}

Status Communicator::barrier() {
  return run(*impl_, rank(), size(), OpDesc::barrier());
}

// ---- on a stream
// ------------------------------------------------------------------------------------

namespace {

Status check_stream(const char* op, const CommImpl& impl, const hal::Stream& stream) {
  if (stream.handle() == nullptr) return invalid_argument(std::string(op) + ": stream is empty");
  const auto& device = impl.device();
  if (device && (stream.backend() != device->backend() || stream.device() != device->index())) {
    return invalid_argument(std::string(op) + ": stream belongs to device " +
                            stream.backend()->name() + ":" + std::to_string(stream.device()) +
                            " but this communicator uses " + device->id());
  }
  return Status();
}

// Every stream operation: refused once aborted, checked (arguments, then the stream), queued.
Result<Work> enqueue(CommImpl& impl, int rank, int size, OpDesc d, const hal::Stream& stream) {
  if (impl.aborted()) return impl.abort_status();
  TSR_RETURN_IF_ERROR(refuse(impl, rank, size, check_args(d, rank, size)));
  TSR_RETURN_IF_ERROR(
      refuse(impl, rank, size, check_stream(std::string(op_name(d.kind)).c_str(), impl, stream)));
  TSR_RETURN_IF_ERROR(refuse(impl, rank, size, check_memory(impl, d, rank, size, &stream)));
  return impl.enqueue(std::move(d), stream);
}

}  // namespace

Result<Work> Communicator::allreduce(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op, const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::allreduce(send, recv, count, dtype, op), stream);
}

Result<Work> Communicator::reduce(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op, int root, const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::reduce(send, recv, count, dtype, op, root),
                 stream);
}

Result<Work> Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                     int root, const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::broadcast(send, recv, count, dtype, root), stream);
}

Result<Work> Communicator::allgather(const void* send, void* recv, size_t count, DType dtype,
                                     const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::allgather(send, recv, count, dtype), stream);
}

Result<Work> Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                          DType dtype, ReduceOp op, const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::reduce_scatter(send, recv, recv_count, dtype, op),
                 stream);
}

Result<Work> Communicator::alltoall(const void* send, void* recv, size_t count, DType dtype,
                                    const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::alltoall(send, recv, count, dtype), stream);
}

Result<Work> Communicator::send(const void* buf, size_t count, DType dtype, int peer,
                                const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::send_to(buf, count, dtype, peer), stream);
}

Result<Work> Communicator::recv(void* buf, size_t count, DType dtype, int peer,
                                const hal::Stream& stream) {
  return enqueue(*impl_, rank(), size(), OpDesc::recv_from(buf, count, dtype, peer), stream);
}

}  // namespace tessera::coll
