// The native route: the library's communicator, its creation inside the communicator's, and the
// blocking and stream forms of each operation (native_route.h says what runs where and why).
#include "native_route.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "comm_impl.h"
#include "tessera/common/log.h"

namespace tessera::coll {
namespace {

using Clock = std::chrono::steady_clock;

// Polling pause bounds: short at first (small operations finish in microseconds), then 1 ms.
constexpr auto kFirstPause = std::chrono::microseconds(20);
constexpr auto kLongestPause = std::chrono::microseconds(1000);

std::string hex(const uint8_t* bytes, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

bool unhex(std::string_view text, uint8_t* out, size_t n) {
  if (text.size() != n * 2) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return true;
}

}  // namespace

std::string native_unavailable_reason(const hal::Device& device) {
  const tsr_collectives_api_v1* ccl = device.backend()->api().collectives;
  if (ccl == nullptr) {
    return "backend " + device.backend_name() +
           " has no native collective library (no tsr_collectives_api_v1 table)";
  }
  if (!device.has(TSR_CAP_NATIVE_COLLECTIVES)) {
    return "the collective library of backend " + device.backend_name() + " (" +
           std::string(ccl->library != nullptr ? ccl->library : "unnamed") + ") is not usable on " +
           device.id() +
           " (TSR_CAP_NATIVE_COLLECTIVES is off; the host backend's reference CCL is enabled "
           "by TESSERA_HOST_CCL=1)";
  }
  return "";
}

// ---- the library's communicator -------------------------------------------------------------

Result<std::unique_ptr<NativeComm>> NativeComm::init(const hal::Device& device, int rank, int size,
                                                     const tsr_comm_unique_id& id,
                                                     std::chrono::milliseconds timeout,
                                                     FlightRecorder& recorder, Hooks hooks) {
  std::unique_ptr<NativeComm> c(new NativeComm());
  c->backend_ = device.backend();
  c->device_.emplace(device);
  c->ccl_ = device.backend()->api().collectives;
  c->rank_ = rank;
  c->size_ = size;
  c->timeout_ = timeout;
  c->recorder_ = &recorder;
  c->hooks_ = std::move(hooks);
  if (c->ccl_ == nullptr || c->ccl_->comm_init_rank == nullptr) {
    return failed_precondition(native_unavailable_reason(device));
  }
  TSR_RETURN_IF_ERROR(c->backend_->check(
      c->ccl_->comm_init_rank(device.index(), size, &id, rank, &c->comm_),
      std::string(c->library()) + " comm_init_rank (rank " + std::to_string(rank) + " of " +
          std::to_string(size) + " on " + device.id() + ")"));
  return c;
}

NativeComm::~NativeComm() {
  bool pending;
  {
    std::lock_guard lock(pending_mutex_);
    stopping_ = true;
    pending = !pending_.empty();
  }
  // Operations queued on streams that will never complete them (peers gone, or this rank
  // destroying the communicator early) must not keep the watcher, or the streams, waiting.
  if (pending && !aborted_.load()) {
    abort();
    hooks_.abort("communicator destroyed with operations pending");
  }
  pending_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (comm_ != nullptr && ccl_->comm_destroy != nullptr) {
    if (Status s =
            backend_->check(ccl_->comm_destroy(comm_), std::string(library()) + " comm_destroy");
        !s.ok()) {
      TSR_LOG(kWarn, "coll") << s.to_string();
    }
  }
}

bool NativeComm::has(OpKind kind) const {
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduce: return ccl_->allreduce != nullptr;
    case OpKind::kBroadcast: return ccl_->broadcast != nullptr;
    case OpKind::kAllGather: return ccl_->allgather != nullptr;
    case OpKind::kReduceScatter: return ccl_->reduce_scatter != nullptr;
    case OpKind::kAllToAll: return ccl_->alltoall != nullptr;
    case OpKind::kSend: return ccl_->send != nullptr;
    case OpKind::kRecv: return ccl_->recv != nullptr;
    case OpKind::kAllGatherV:
    case OpKind::kAllToAllV:
    case OpKind::kBarrier: return false;
  }
  return false;
}

void NativeComm::abort() {
  if (aborted_.exchange(true)) return;
  if (comm_ != nullptr && ccl_->comm_abort != nullptr) {
    if (Status s = backend_->check(ccl_->comm_abort(comm_), std::string(library()) + " comm_abort");
        !s.ok()) {
      TSR_LOG(kWarn, "coll") << s.to_string();
    }
  }
}

size_t NativeComm::scratch_bytes(const OpDesc& d) const {
  const size_t e = hal::dtype_size(d.dtype);
  if (d.kind == OpKind::kReduce && rank_ != d.root) return d.count * e;
  if (d.kind == OpKind::kAllToAll && d.send == d.recv) return d.count * size_t(size_) * e;
  return 0;
}

Status NativeComm::issue(const OpDesc& d, const hal::Stream& on, void* scratch) {
  const tsr_stream stream = on.handle();
  const auto dtype = static_cast<tsr_dtype>(d.dtype);
  const auto op = static_cast<tsr_reduce_op>(d.op);
  tsr_status s = TSR_OK;
  switch (d.kind) {
    case OpKind::kAllReduce:
      s = ccl_->allreduce(d.send, d.recv, d.count, dtype, op, comm_, stream);
      break;
    case OpKind::kReduce:
      // Composed: every rank allreduces; the ranks other than the root keep the result in scratch.
      s = ccl_->allreduce(d.send, rank_ == d.root ? d.recv : scratch, d.count, dtype, op, comm_,
                          stream);
      break;
    case OpKind::kBroadcast:
      s = ccl_->broadcast(d.send, d.recv, d.count, dtype, d.root, comm_, stream);
      break;
    case OpKind::kAllGather:
      s = ccl_->allgather(d.send, d.recv, d.count, dtype, comm_, stream);
      break;
    case OpKind::kReduceScatter:
      s = ccl_->reduce_scatter(d.send, d.recv, d.count, dtype, op, comm_, stream);
      break;
    case OpKind::kAllToAll:
      if (scratch != nullptr) {
        // In place: the library's alltoall has no in-place form (NCCL's is grouped send/recv
        // that would overwrite blocks not yet sent), so the input goes to scratch first.
        TSR_RETURN_IF_ERROR(on.copy(scratch, d.send, scratch_bytes(d)));
        s = ccl_->alltoall(scratch, d.recv, d.count, dtype, comm_, stream);
      } else {
        s = ccl_->alltoall(d.send, d.recv, d.count, dtype, comm_, stream);
      }
      break;
    case OpKind::kSend: s = ccl_->send(d.send, d.count, dtype, d.peer, comm_, stream); break;
    case OpKind::kRecv: s = ccl_->recv(d.recv, d.count, dtype, d.peer, comm_, stream); break;
    default:
      return internal_error(std::string(op_name(d.kind)) + " has no native form (route choice)");
  }
  return backend_->check(s, "collectives." + std::string(op_name(d.kind)));
}

std::string NativeComm::what(const OpDesc& d, uint64_t seq) const {
  return std::string(op_name(d.kind)) + " #" + std::to_string(seq) + " (native route, " +
         library() + ") on rank " + std::to_string(rank_);
}

Status NativeComm::async_error() const {
  if (ccl_->comm_get_async_error == nullptr) return Status();
  return backend_->check(ccl_->comm_get_async_error(comm_), "comm_get_async_error");
}

Status NativeComm::fail(const OpDesc& d, uint64_t seq, uint64_t record, Status why) {
  if (why.ok()) why = Status(StatusCode::kAborted, "the native communicator was aborted");
  Status status = why.with_context(what(d, seq));
  recorder_->finished(record, status, 0);
  // The Tessera communicator first (its abort calls abort() here): peers on its transports and
  // in the library both learn of it.
  hooks_.abort(status.message());
  abort();
  TSR_LOG(kError, "coll") << status.to_string() << "\nflight record of rank " << rank_ << ":\n"
                          << recorder_->dump(rank_);
  return status;
}

Result<hal::Event> NativeComm::new_event() const {
  auto event = device_->create_event(/*timing=*/false);
  if (!event.ok()) return event.status().with_context("a native collective's event");
  return event;
}

namespace {

FlightRecorder::Entry entry_for(const OpDesc& d, uint64_t seq) {
  FlightRecorder::Entry entry;
  entry.seq = seq;
  entry.op = d.kind;
  entry.dtype = d.dtype;
  entry.count = d.count;
  entry.peer = d.named_rank();
  entry.route = route_name(DeviceRoute::kNative);
  entry.queued = std::chrono::system_clock::now();
  return entry;
}

}  // namespace

// ---- blocking ----------------------------------------------------------------------------------

Status NativeComm::run(const OpDesc& d) {
  const uint64_t seq = seq_++;
  const uint64_t record = recorder_->record(entry_for(d, seq));
  if (aborted_.load()) return fail(d, seq, record, hooks_.stop());
  if (!internal_) {
    auto stream = device_->create_stream();
    if (!stream.ok()) return fail(d, seq, record, stream.status());
    internal_.emplace(std::move(*stream));
  }
  // After this communicator's operations pending on other streams: the library orders nothing
  // across streams (NCCL does not), and the ranks must meet in issue order.
  {
    std::lock_guard lock(pending_mutex_);
    for (const Pending& p : pending_) {
      if (Status s = internal_->wait(p.state->event); !s.ok()) return fail(d, seq, record, s);
    }
  }
  void* scratch = nullptr;
  if (const size_t bytes = scratch_bytes(d); bytes > 0) {
    if (!scratch_ || scratch_->size() < bytes) {
      scratch_.reset();
      auto buffer = device_->allocate(bytes);
      if (!buffer.ok()) return fail(d, seq, record, buffer.status());
      scratch_.emplace(std::move(*buffer));
    }
    scratch = scratch_->data();
  }
  auto done = new_event();
  if (!done.ok()) return fail(d, seq, record, done.status());
  recorder_->started(record, "native");
  if (Status s = issue(d, *internal_, scratch); !s.ok()) return fail(d, seq, record, s);
  if (Status s = done->record(*internal_); !s.ok()) return fail(d, seq, record, s);
  const auto deadline = Clock::now() + timeout_;
  auto pause = std::chrono::duration_cast<std::chrono::microseconds>(kFirstPause);
  for (;;) {
    Result<bool> finished = done->done();
    if (!finished.ok()) {
      // The stream failed: the library's own account is the better message when it has one.
      Status why = async_error();
      return fail(d, seq, record, why.ok() ? finished.status() : why);
    }
    if (*finished) {
      // A stream runs on past a failed operation (events after it complete): the library says
      // whether it failed.
      if (Status s = async_error(); !s.ok()) return fail(d, seq, record, s);
      break;
    }
    if (Status s = hooks_.stop(); !s.ok()) return fail(d, seq, record, s);
    if (Status s = async_error(); !s.ok()) return fail(d, seq, record, s);
    if (Clock::now() >= deadline) {
      return fail(d, seq, record,
                  deadline_exceeded("timed out after " + std::to_string(timeout_.count()) +
                                    " ms waiting for the library to complete it"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(kLongestPause));
  }
  recorder_->finished(record, Status(), 0);
  return Status();
}

// ---- on a stream --------------------------------------------------------------------------------

Result<Work> NativeComm::enqueue(const OpDesc& d, const hal::Stream& stream) {
  const uint64_t seq = seq_++;
  const uint64_t record = recorder_->record(entry_for(d, seq));
  if (aborted_.load()) return fail(d, seq, record, hooks_.stop());
  Pending p;
  p.desc = d;
  p.seq = seq;
  p.record = record;
  p.state = std::make_shared<WorkState>();
  // Events and scratch first: creating them touches no stream.
  auto ready = new_event();
  if (!ready.ok()) return fail(d, seq, record, ready.status());
  p.ready = std::move(*ready);
  auto done = new_event();
  if (!done.ok()) return fail(d, seq, record, done.status());
  p.state->event = std::move(*done);
  void* scratch = nullptr;
  if (const size_t bytes = scratch_bytes(d); bytes > 0) {
    // One buffer per queued operation that needs one, until it completed; buffers come back to a
    // pool instead of being freed (a free synchronizes the device on CUDA-like runtimes, which
    // would stall the watcher behind the streams' later work).
    {
      std::lock_guard lock(pending_mutex_);
      for (auto it = spare_scratch_.begin(); it != spare_scratch_.end(); ++it) {
        if (it->size() >= bytes) {
          p.scratch.emplace(std::move(*it));
          spare_scratch_.erase(it);
          break;
        }
      }
    }
    if (!p.scratch) {
      auto buffer = device_->allocate(bytes);
      if (!buffer.ok()) return fail(d, seq, record, buffer.status());
      p.scratch.emplace(std::move(*buffer));
    }
    scratch = p.scratch->data();
  }
  if (Status s = p.ready.record(stream); !s.ok()) return fail(d, seq, record, s);
  if (Status s = issue(d, stream, scratch); !s.ok()) return fail(d, seq, record, s);
  // Once issued the operation must be watched to its end; a failed record leaves nothing to
  // watch it by, so the communicator fails (the peers are in the operation).
  if (Status s = p.state->event.record(stream); !s.ok()) return fail(d, seq, record, s);
  Work work(p.state);
  {
    std::lock_guard lock(pending_mutex_);
    pending_.push_back(std::move(p));
    if (!watcher_.joinable()) watcher_ = std::thread([this] { watch(); });
  }
  pending_cv_.notify_all();
  return work;
}

void NativeComm::fail_pending(const Status& why) {
  std::deque<Pending> failed;
  {
    std::lock_guard lock(pending_mutex_);
    failed.swap(pending_);
  }
  for (Pending& p : failed) {
    Status status = why.with_context(what(p.desc, p.seq));
    recorder_->finished(p.record, status, 0);
    p.state->finish(std::move(status));
  }
  // The aborted library may still touch the scratch of failed operations: kept, never reused
  // for anything but scratch, freed with the communicator.
  std::lock_guard lock(pending_mutex_);
  for (Pending& p : failed) {
    if (p.scratch) spare_scratch_.push_back(std::move(*p.scratch));
  }
}

// The watcher: finishes the stream operations in issue order as their events complete, and fails
// them all on the first asynchronous error, abort or timeout.
void NativeComm::watch() {
  auto pause = std::chrono::duration_cast<std::chrono::microseconds>(kFirstPause);
  for (;;) {
    {
      std::unique_lock lock(pending_mutex_);
      pending_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      if (stopping_ && !aborted_.load()) {
        // Destroyed with operations pending: ~NativeComm aborted (or is about to).
        lock.unlock();
        hooks_.abort("communicator destroyed with operations pending");
        abort();
        fail_pending(hooks_.stop());
        continue;
      }
    }
    Status failure;
    bool progressed = false;
    {
      std::unique_lock lock(pending_mutex_);
      // Started: the stream reached it (the timeout counts from there); done: completed.
      const auto now = Clock::now();
      for (Pending& p : pending_) {
        if (p.started) continue;
        Result<bool> reached = p.ready.done();
        if (!reached.ok() || *reached) {
          p.started = now;
          recorder_->started(p.record, "native");
        }
      }
      while (!pending_.empty() && failure.ok()) {
        Pending& front = pending_.front();
        Result<bool> finished = front.state->event.done();
        if (!finished.ok()) {
          Status why = async_error();
          failure = why.ok() ? finished.status() : why;
          break;
        }
        if (!*finished) {
          if (front.started && now - *front.started > timeout_) {
            failure = deadline_exceeded("timed out after " + std::to_string(timeout_.count()) +
                                        " ms waiting for the library to complete it");
          }
          break;
        }
        // The event completes after a failed operation too: the library says whether it failed.
        if (Status why = async_error(); !why.ok()) {
          failure = why;
          break;
        }
        recorder_->finished(front.record, Status(), 0);
        front.state->finish(Status());
        if (front.scratch) spare_scratch_.push_back(std::move(*front.scratch));
        pending_.pop_front();
        progressed = true;
      }
    }
    if (failure.ok()) failure = hooks_.stop();
    if (failure.ok()) failure = async_error();
    if (!failure.ok()) {
      // Names the first pending operation (the one the ranks are stuck in).
      std::string first;
      {
        std::lock_guard lock(pending_mutex_);
        if (!pending_.empty()) first = what(pending_.front().desc, pending_.front().seq);
      }
      hooks_.abort(first.empty() ? failure.message() : first + ": " + failure.message());
      abort();
      if (!first.empty()) {
        TSR_LOG(kError, "coll") << first << ": " << failure.to_string()
                                << "\nflight record of rank " << rank_ << ":\n"
                                << recorder_->dump(rank_);
      }
      fail_pending(failure);
      continue;
    }
    if (progressed) {
      pause = std::chrono::duration_cast<std::chrono::microseconds>(kFirstPause);
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(kLongestPause));
    }
  }
}

// ---- creation -----------------------------------------------------------------------------------

namespace {

// What a participant posts: "-" cannot (or will not) take the route, "!<why>" wanted it but its
// unique id failed, "+" can, "+<hex id>" can and leads its group.
constexpr char kCannot = '-';
constexpr char kBroken = '!';
constexpr char kCan = '+';

}  // namespace

namespace {

// Why this participant cannot take the route ("" when it can).
std::string native_refusal_reason(const NativeSetup& s) {
  if (!s.member) return "not a member";
  if (s.device == nullptr) return "no device";
  if (s.path == DevicePath::kStaged) return "device path staged";
  return native_unavailable_reason(*s.device);
}

// Phase 1's post: kCannot + why, kCan, or (the group's leader) kCan + the library's unique id,
// kBroken + why when making it failed.
std::string native_token(const NativeSetup& s, const std::string& why_not) {
  const bool leader = s.member && !s.members.empty() && s.members[0] == s.my_index;
  if (!why_not.empty()) return kCannot + why_not;
  if (!leader) return std::string(1, kCan);
  tsr_comm_unique_id id{};
  const auto& backend = s.device->backend();
  const tsr_collectives_api_v1* ccl = backend->api().collectives;
  Status made = backend->check(ccl->get_unique_id(&id),
                               std::string(ccl->library) + " get_unique_id on " + s.device->id());
  return made.ok() ? kCan + hex(id.bytes, sizeof id.bytes) : kBroken + made.to_string();
}

// The group takes the route when every member can; the first member that cannot says why ("":
// all can, or this participant is not a member).
std::string group_refusal(const NativeSetup& s, const std::vector<std::string>& tokens) {
  for (size_t r = 0; r < s.members.size() && s.member; ++r) {
    const std::string& t = tokens[size_t(s.members[r])];
    if (t.empty() || t[0] != kCan) {
      return "rank " + std::to_string(r) +
             " cannot: " + (t.empty() ? "(nothing posted)" : t.substr(1));
    }
  }
  return "";
}

// Phase 2: the library's communicator from the unique id the leader posted.
Result<std::unique_ptr<NativeComm>> init_native_group(const NativeSetup& s,
                                                      const std::string& lead_token,
                                                      FlightRecorder& recorder,
                                                      NativeComm::Hooks hooks) {
  tsr_comm_unique_id id{};
  if (!unhex(std::string_view(lead_token).substr(1), id.bytes, sizeof id.bytes)) {
    return internal_error("the unique id rank 0 posted is malformed (" +
                          std::to_string(lead_token.size()) + " characters)");
  }
  return NativeComm::init(*s.device, s.rank, int(s.members.size()), id, s.timeout, recorder,
                          std::move(hooks));
}

}  // namespace

Result<std::unique_ptr<NativeComm>> setup_native(const NativeSetup& s, FlightRecorder& recorder,
                                                 NativeComm::Hooks hooks) {
  const std::string why_not = native_refusal_reason(s);
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> all, s.exchange(native_token(s, why_not)));
  std::string refusal = group_refusal(s, all);
  const bool group_native = s.member && refusal.empty();
  std::unique_ptr<NativeComm> native;
  Status init_status;
  if (group_native) {
    auto made = init_native_group(s, all[size_t(s.members[0])], recorder, std::move(hooks));
    if (made.ok()) {
      native = std::move(*made);
    } else {
      init_status = made.status();
    }
  }
  // Whether anyone could: then every participant takes part in the barrier below (all see the
  // same tokens, so all decide the same).
  const bool any = std::any_of(all.begin(), all.end(),
                               [](const std::string& t) { return !t.empty() && t[0] == kCan; });
  if (any) {
    TSR_ASSIGN_OR_RETURN(auto inits, s.exchange(init_status.ok() ? "" : init_status.to_string()));
    for (size_t r = 0; r < s.members.size() && group_native && refusal.empty(); ++r) {
      if (!inits[size_t(s.members[r])].empty()) {
        refusal = "comm_init_rank failed on rank " + std::to_string(r) + ": " +
                  inits[size_t(s.members[r])];
      }
    }
  }
  if (!refusal.empty() && s.member) {
    native.reset();
    if (s.path == DevicePath::kNative) {
      return failed_precondition("Communicator::create: device path native " +
                                 std::string("(TESSERA_COLL_DEVICE_PATH) on rank ") +
                                 std::to_string(s.rank) + ": " + refusal);
    }
    if (why_not.empty() && !group_native) {
      TSR_LOG(kInfo, "coll") << "communicator " << s.uid << " rank " << s.rank
                             << ": native route off, " << refusal;
    } else if (group_native) {
      // Every member could, yet the library failed: worth a warning; auto falls back to staging.
      TSR_LOG(kWarn, "coll") << "communicator " << s.uid << " rank " << s.rank
                             << ": native route unavailable, staging device memory: " << refusal;
    }
    return std::unique_ptr<NativeComm>();
  }
  if (native) {
    TSR_LOG(kInfo, "coll") << "communicator " << s.uid << " rank " << s.rank
                           << ": native route: " << native->library();
  }
  return native;
}

// ---- the communicator's side
// ---------------------------------------------------------------------

Status CommImpl::init_native(const CreateArgs& args, const std::vector<int>& members, int my_index,
                             bool member) {
  NativeSetup s;
  s.uid = uid_;
  s.device = device_ ? &*device_ : nullptr;
  s.path = device_path_;
  s.member = member;
  s.members = members;
  s.my_index = my_index;
  s.rank = rank_;
  s.timeout = options_.timeout;
  s.exchange = args.exchange;
  NativeComm::Hooks hooks;
  hooks.stop = [this] { return stop_status(); };
  hooks.abort = [this](const std::string& reason) { abort(reason); };
  TSR_ASSIGN_OR_RETURN(native_, setup_native(s, recorder_, std::move(hooks)));
  return Status();
}

}  // namespace tessera::coll
