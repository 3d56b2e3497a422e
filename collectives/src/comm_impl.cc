// Communicator creation (membership, transports, liveness) and the progress loop.
#include "comm_impl.h"

#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "membership.h"
#include "tessera/common/env.h"
#include "tessera/common/log.h"
#include "transport/ucx_transport.h"

namespace tessera::coll {
namespace {

// Single-copy (CMA) is off by default: on the machines measured (docs/PERFORMANCE.md) the FIFO
// with streaming stores moved large messages faster than process_vm_readv's kernel copy.
// TESSERA_SHM_CMA_THRESHOLD=1M turns it on from 1 MiB.
constexpr uint64_t kDefaultSingleCopyThreshold = 0;

// A word every process can read in its peers, to test single-copy (CMA) access.
const uint64_t kSingleCopyProbe = 0x7e55e7a;

std::string fnv_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// Which ranks share a host: TESSERA_HOST_ID when set (emulated hosts, containers sharing a
// kernel), else hostname plus a hash of the kernel's boot id (the boot id itself is a stable
// machine secret that the store must not publish; a 64-bit hash still tells two boots apart).
std::string host_identity() {
  if (auto id = env::get("TESSERA_HOST_ID"); id && !id->empty()) return *id;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + fnv_hex("tessera boot " + boot);
}

// A file-backed mapping of /proc/<pid>/maps: [start, end) holds the bytes at `offset` of the
// file `dev`:`inode`.
struct Mapping {
  uint64_t start = 0, end = 0, offset = 0, inode = 0;
  std::string dev;
};

std::vector<Mapping> file_mappings(const std::string& pid) {
  std::vector<Mapping> out;
  std::ifstream in("/proc/" + pid + "/maps");
  std::string line, perms;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    Mapping m;
    char dash = 0;
    f >> std::hex >> m.start >> dash >> m.end >> perms >> m.offset >> m.dev >> std::dec >> m.inode;
    if (f && dash == '-' && m.inode != 0) out.push_back(std::move(m));
  }
  return out;
}

// Where process `pid` has its kSingleCopyProbe: in its mapping of the same file at the same
// offset as ours (the same build of this library), at the same distance from the mapping's start.
// The cards carry no address (anyone reading the store could undo ASLR with it); a peer that may
// be read with process_vm_readv may have its maps read too. 0 when not found.
uint64_t peer_probe_address(int pid) {
  const auto mine = reinterpret_cast<uint64_t>(&kSingleCopyProbe);
  for (const Mapping& m : file_mappings("self")) {
    if (mine < m.start || mine >= m.end) continue;
    for (const Mapping& p : file_mappings(std::to_string(pid))) {
      if (p.dev == m.dev && p.inode == m.inode && p.offset == m.offset &&
          p.end - p.start == m.end - m.start) {
        return p.start + (mine - m.start);
      }
    }
    return 0;
  }
  return 0;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

// ---- WorkState
// -----------------------------------------------------------------------------------

void WorkState::mark_ready(Status upstream) {
  std::lock_guard lock(mutex_);
  ready_ = true;
  upstream_ = std::move(upstream);
  cv_.notify_all();
}

Status WorkState::wait_ready(std::chrono::milliseconds timeout,
                             const std::function<Status()>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mutex_);
  while (!ready_) {
    lock.unlock();
    if (Status s = stop(); !s.ok()) return s;
    lock.lock();
    if (ready_) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("the stream did not reach the operation within " +
                               std::to_string(timeout.count()) +
                               " ms (work queued before it on the stream is stuck)");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return Status();
}

void WorkState::finish(Status status) {
  std::lock_guard lock(mutex_);
  if (status.ok() && !upstream_.ok()) {
    status = upstream_.with_context("earlier work on the stream failed");
  }
  status_ = std::move(status);
  done_ = true;
  ready_ = true;
  cv_.notify_all();
}

Status WorkState::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return deadline_exceeded("collective still running after " + std::to_string(timeout.count()) +
                             " ms");
  }
  return status_;
}

bool WorkState::done() {
  std::lock_guard lock(mutex_);
  return done_;
}

// ---- creation
// ------------------------------------------------------------------------------------

Result<std::unique_ptr<CommImpl>> CommImpl::create(CreateArgs args) {
  Card mine;
  mine.world_rank = args.world_rank;
  mine.process = this_process();
  mine.color = args.color;
  mine.key = args.key;
  mine.host = host_identity();
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> cards, args.exchange(encode_card(mine)));
  // Every participant runs setup() so that the exchanges inside stay in lockstep; non-members
  // just take part and get nullptr.
  std::unique_ptr<CommImpl> impl(new CommImpl());
  int my_index = -1;
  for (size_t i = 0; i < cards.size(); ++i) {
    if (cards[i] == encode_card(mine)) my_index = int(i);
  }
  if (my_index < 0) return internal_error("communicator creation: own card missing");
  TSR_RETURN_IF_ERROR(impl->setup(args, cards, my_index));
  if (args.color < 0) return std::unique_ptr<CommImpl>();
  return impl;
}

// The creation after the cards' exchange. Every participant, member or not, runs the same
// exchanges in the same order (CreateArgs::exchange is an allgather over all of them):
//   A. shared memory: a barrier after the segment's creation, another after every attach;
//   B. single copy: every participant's probe result;
//   C. UCX: the transport's address exchange (or one empty exchange in its place), a barrier;
//   D. the native route (native_route.cc);
// then, members only, E. the hierarchy: two splits of the new communicator.
// A phase that fails on one participant still takes part in its exchanges, so nobody waits.
Status CommImpl::setup(const CreateArgs& args, const std::vector<std::string>& raw_cards,
                       int my_index) {
  TSR_RETURN_IF_ERROR(adopt_options(args));
  std::vector<Card> cards;
  for (size_t i = 0; i < raw_cards.size(); ++i) {
    TSR_ASSIGN_OR_RETURN(Card c, decode_card(raw_cards[i], i));
    cards.push_back(std::move(c));
  }
  TSR_ASSIGN_OR_RETURN(const Membership m, compute_membership(cards, my_index));
  adopt_membership(m);
  TSR_RETURN_IF_ERROR(setup_shared_memory(args, m));
  TSR_RETURN_IF_ERROR(setup_single_copy(args, m));
  TSR_RETURN_IF_ERROR(setup_ucx(args, m));
  TSR_RETURN_IF_ERROR(init_native(args, m.members, my_index, m.member));
  if (!m.member) return Status();
  watch_local_peers(m);
  TSR_RETURN_IF_ERROR(setup_tuner_and_hierarchy(m));
  log_creation();
  return Status();
}

Status CommImpl::adopt_options(const CreateArgs& args) {
  uid_ = args.uid;
  bootstrap_ = args.bootstrap;
  device_ = args.device;
  options_ = args.options;
  force_ucx_ = options_.transport == "ucx";
  // Validated by resolve() (communicator.cc); the fallbacks only guard a direct caller.
  memory_mode_ = parse_memory_mode(options_.memory).value_or(MemoryMode::kAuto);
  device_path_ = parse_device_path(options_.device_path).value_or(DevicePath::kAuto);
  if (options_.stage_chunk_bytes > 0) stage_chunk_ = options_.stage_chunk_bytes;
  chunk_all_ =
      device_ && (device_path_ == DevicePath::kStaged || !device_->has(TSR_CAP_HOST_ACCESSIBLE));
  TSR_ASSIGN_OR_RETURN(stream_callbacks_, env::get_bool("TESSERA_COLL_STREAM_CALLBACKS", false));
  return Status();
}

void CommImpl::adopt_membership(const Membership& m) {
  size_ = m.size();
  rank_ = m.rank;
  world_ranks_ = m.world_ranks;
  processes_ = m.processes;
  hosts_ = m.hosts;
  host_of_ = m.host_of;
  num_hosts_ = m.num_hosts();
  local_size_ = m.local_size();
  local_rank_ = m.local_rank;
}

// One allgather of this participant's status: the first failure anywhere, named by participant
// and by `what`, fails the phase on every participant alike.
Status CommImpl::creation_barrier(const CreateArgs& args, const Status& mine, const char* what) {
  TSR_ASSIGN_OR_RETURN(auto all, args.exchange(mine.ok() ? "" : mine.to_string()));
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].empty()) {
      return unavailable(std::string("communicator creation (") + what +
                         ") failed on participant " + std::to_string(i) + ": " + all[i]);
    }
  }
  return Status();
}

bool CommImpl::uses_shared_memory(const Membership& m) const {
  return m.member && m.local_ranks.size() > 1 && !force_ucx_;
}

// Phase A: the lowest local rank creates the segment; everyone attaches; it unlinks. Failures
// still take part in both barriers so nobody waits for them.
Status CommImpl::setup_shared_memory(const CreateArgs& args, const Membership& m) {
  ShmConfig shm;
  // Bounded so that the segment (slots x chunk per pair of local ranks) stays a sane size.
  TSR_ASSIGN_OR_RETURN(const uint64_t chunk,
                       env::get_bytes("TESSERA_SHM_CHUNK", 256 << 10, 8, uint64_t(64) << 20));
  TSR_ASSIGN_OR_RETURN(const int64_t slots, env::get_int("TESSERA_SHM_SLOTS", 8, 2, 1024));
  shm.rank = rank_;
  shm.local_ranks = m.local_ranks;
  shm.slot_bytes = size_t(chunk);
  shm.slots = int(slots);
  const bool use_shm = uses_shared_memory(m);
  if (use_shm) {
    shm.segment_name =
        "/tessera-" + fnv_hex(uid_ + "|" + hosts_[size_t(rank_)] + "|" +
                              std::to_string(processes_[size_t(m.local_ranks[0])].pid));
  }
  const bool creator = use_shm && m.local_ranks[0] == rank_;
  Status created = creator ? ShmTransport::create_segment(shm) : Status();
  if (Status all_created = creation_barrier(args, created, "shared memory segment");
      !all_created.ok()) {
    // Another participant failed (or never came): the segment this rank made must not outlive
    // the attempt.
    if (creator && created.ok()) ShmTransport::unlink_segment(shm);
    return all_created;
  }
  Status attached;
  if (use_shm) {
    auto t = ShmTransport::attach(shm);
    if (t.ok()) {
      shm_ = std::move(t.value());
    } else {
      attached = t.status();
    }
  }
  Status all_attached = creation_barrier(args, attached, "shared memory attach");
  if (creator) ShmTransport::unlink_segment(shm);
  return all_attached;
}

// Phase B: single copy (CMA) for large messages, when every local rank can read the next one's
// memory. Each participant probes its next local rank; one exchange shares the answers.
Status CommImpl::setup_single_copy(const CreateArgs& args, const Membership& m) {
  TSR_ASSIGN_OR_RETURN(const uint64_t threshold,
                       env::get_bytes("TESSERA_SHM_CMA_THRESHOLD", kDefaultSingleCopyThreshold));
  const bool wanted = uses_shared_memory(m) && threshold > 0;
  std::string can_read = "no";
  if (wanted) {
    const size_t next_local = (size_t(local_rank_) + 1) % m.local_ranks.size();
    const ProcessIdentity& next = processes_[size_t(m.local_ranks[next_local])];
    const ProcessIdentity& mine = processes_[size_t(rank_)];
    if (next.pid_namespace == mine.pid_namespace &&
        can_read_peer_memory(next.pid, peer_probe_address(next.pid), &kSingleCopyProbe,
                             sizeof kSingleCopyProbe)) {
      can_read = "yes";
    }
  }
  TSR_ASSIGN_OR_RETURN(auto readable, args.exchange(can_read));
  bool all_local_can_read = wanted;
  for (int r : m.local_ranks) {
    all_local_can_read &= readable[size_t(m.members[size_t(r)])] == "yes";
  }
  if (all_local_can_read) shm_->enable_single_copy(size_t(threshold));
  return Status();
}

// Phase C: every group that spans hosts (or all groups when forced) creates a transport; the
// others still take part in the one exchange it makes, and in the barrier after it.
Status CommImpl::setup_ucx(const CreateArgs& args, const Membership& m) {
  const bool any_needs_ucx = force_ucx_ ? m.some_group_has_peers : m.some_group_spans_hosts;
  if (!any_needs_ucx) return Status();
  const bool need_ucx = m.member && size_ > 1 && (num_hosts_ > 1 || force_ucx_);
  int calls = 0;
  Status ucx_status;
  if (need_ucx) {
    UcxTransportConfig config;
    config.rank = rank_;
    config.size = size_;
    config.comm_id = uint32_t(std::hash<std::string>{}(uid_)&0xffff);
    config.timeout = options_.timeout;
    config.allgather = [&](std::string_view bytes) -> Result<std::vector<std::string>> {
      ++calls;
      TSR_ASSIGN_OR_RETURN(auto all, args.exchange(bytes));
      std::vector<std::string> out;
      for (int i : m.members) out.push_back(all[size_t(i)]);
      return out;
    };
    auto t = create_ucx_transport(config);
    if (t.ok()) {
      ucx_ = std::move(t.value());
    } else {
      ucx_status = t.status();
    }
  }
  if (calls == 0) TSR_RETURN_IF_ERROR(args.exchange("").status());
  return creation_barrier(args, ucx_status, "UCX transport");
}

// Liveness of local peers (a pidfd, or /proc where the kernel has none), and how long the
// progress loop spins. No exchange.
void CommImpl::watch_local_peers(const Membership& m) {
  dead_.assign(size_t(size_), false);
  liveness_ = std::make_unique<PeerLiveness>();
  notice_ = JobAbortNotice::from_environment();
  for (int r : m.local_ranks) {
    if (r != rank_) liveness_->watch(r, processes_[size_t(r)], processes_[size_t(rank_)]);
  }
  // Online CPUs, not this process's affinity: a launcher that binds each rank to one core gives
  // every rank a core of its own, which is exactly when spinning pays.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  spin_limit_ = local_size_ <= cores ? (uint64_t(1) << 17) : 64;
  send_seq_.assign(size_t(size_), 0);
  recv_seq_.assign(size_t(size_), 0);
}

// Phase E (members only): the tuner, from the topology's figures; with the hierarchical variant
// (the same number of ranks on every host), the local and cross sub-communicators, two splits.
Status CommImpl::setup_tuner_and_hierarchy(const Membership& m) {
  TSR_ASSIGN_OR_RETURN(auto costs, link_costs_from_environment());
  TSR_ASSIGN_OR_RETURN(tuner_, Tuner::create(size_, num_hosts_, m.hierarchical(), costs.first,
                                             costs.second, options_.algorithms));
  if (m.hierarchical()) {
    TSR_ASSIGN_OR_RETURN(local_, split(host_of_[size_t(rank_)], rank_));
    TSR_ASSIGN_OR_RETURN(cross_, split(local_rank_, rank_));
  }
  return Status();
}

void CommImpl::log_creation() const {
  TSR_LOG(kInfo, "coll") << "communicator " << uid_ << ": rank " << rank_ << " of " << size_ << ", "
                         << num_hosts_ << " host(s), local rank " << local_rank_ << " of "
                         << local_size_ << (shm_ ? ", shared memory" : "")
                         << (shm_ && shm_->huge_pages() ? " (huge pages)" : "")
                         << (shm_ && shm_->single_copy_threshold() > 0 ? ", single-copy" : "")
                         << (ucx_ ? ", UCX" : "") << ", local peers watched by "
                         << liveness_->method() << ", device "
                         << (device_ ? device_->id() : std::string("none")) << " (memory "
                         << memory_mode_name(memory_mode_) << ", device path "
                         << device_path_name(device_path_) << ")";
}

CommImpl::~CommImpl() {
  bool pending;
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
    pending = !queue_.empty() || proxy_at_gate_;
  }
  // Operations not yet started may wait for streams that will never reach them: release them.
  // (The one the proxy is running, if any, finishes normally before the join below.)
  if (pending) abort("communicator destroyed with operations pending");
  queue_cv_.notify_all();
  if (proxy_.joinable()) proxy_.join();
  // The proxy raised each operation's signal; this covers anything it never saw.
  release_signals();
}

Result<std::unique_ptr<CommImpl>> CommImpl::split(int64_t color, int64_t key) {
  CreateArgs args;
  args.uid = uid_ + "/" + std::to_string(split_count_++);
  args.bootstrap = bootstrap_;
  args.device = device_;
  args.options = options_;
  args.exchange = [this](std::string_view mine) { return allgather_bytes(mine); };
  args.color = color;
  args.key = key;
  args.world_rank = world_ranks_[size_t(rank_)];
  auto child = create(std::move(args));
  if (child.ok() && child.value()) child.value()->uid_ += "c" + std::to_string(color);
  return child;
}

// ---- abort and liveness
// --------------------------------------------------------------------------

void CommImpl::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  if (shm_) shm_->post_abort(rank_, reason);
  if (native_) native_->abort();  // releases the library's pending operations
  if (local_) local_->abort(reason);
  if (cross_) cross_->abort(reason);
  queue_cv_.notify_all();
}

Status CommImpl::abort_status() const {
  std::lock_guard lock(abort_mutex_);
  return Status(StatusCode::kAborted, "communicator aborted: " + abort_reason_);
}

void CommImpl::update_dead_peers() {
  if (liveness_) liveness_->update(dead_);
}

std::string CommImpl::peer_name(int peer) const {
  std::string name = "rank " + std::to_string(peer);
  // In a split (or a hierarchical algorithm's per-host and cross-host communicators) the rank
  // numbers are the group's: say which process of the job it is.
  const int world = world_ranks_[size_t(peer)];
  if (world != peer) name += " (world rank " + std::to_string(world) + ")";
  return name;
}

Status CommImpl::job_failed(const std::string& why, const Status& seen_here) const {
  std::string message = "the job failed: " + why + " (tessera launch's notice)";
  if (!seen_here.ok()) message += "; here: " + seen_here.message();
  return Status(StatusCode::kAborted, std::move(message));
}

// ---- the progress loop
// -----------------------------------------------------------------------------

Transport* CommImpl::transport_for(int peer) {
  if (shm_ && shm_->reaches(peer)) return shm_.get();
  return ucx_.get();
}

Status CommImpl::fail(std::span<P2P> ops, Status status) {
  // A transfer error caused by another rank's failure (its buffers gone after it aborted) is
  // reported as that failure, which names the rank that started it.
  if (shm_ && status.code() != StatusCode::kAborted) {
    if (Status by_peer = shm_->posted_abort_status(rank_); !by_peer.ok()) status = by_peer;
  }
  // A peer on another host lost mid-transfer is often a victim, not the cause: a rank there died
  // and its launcher stopped the rest. That launcher's notice (here within a few hundred ms)
  // names the rank that died; wait for it briefly rather than blame the peer this rank waited on.
  if (status.code() == StatusCode::kUnavailable) {
    const bool remote = std::any_of(ops.begin(), ops.end(), [&](const P2P& op) {
      return !op.done && host_of_[size_t(op.peer)] != host_of_[size_t(rank_)];
    });
    constexpr auto kNoticeWait = std::chrono::milliseconds(1500);
    if (auto why = notice_.await(remote ? kNoticeWait : std::chrono::milliseconds(0))) {
      status = job_failed(*why, status);
    }
  }
  for (P2P& op : ops) {
    if (op.done) continue;
    if (Transport* t = transport_for(op.peer)) t->cancel(op);
  }
  abort(status.message());
  return status;
}

Status CommImpl::run(std::span<P2P> ops, uint32_t step) {
  for (P2P& op : ops) {
    Transport* t = transport_for(op.peer);
    if (t == nullptr) {
      return fail(ops, internal_error("no transport reaches rank " + std::to_string(op.peer)));
    }
    op.header.step = step;
    if (Status s = t->start(op); !s.ok()) return fail(ops, s);
  }
  if (aborted()) return fail(ops, abort_status());
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_progress{};
  uint64_t idle = 0;
  for (;;) {
    if (ucx_) ucx_->poll();
    bool all_done = true, progressed = false;
    for (P2P& op : ops) {
      if (op.done) continue;
      const size_t before = op.moved;
      if (Status s = transport_for(op.peer)->progress(op); !s.ok()) return fail(ops, s);
      progressed |= op.done || op.moved != before;
      all_done &= op.done;
    }
    if (all_done) return Status();
    if (progressed) {
      idle = 0;
      last_progress = Clock::time_point{};
      continue;
    }
    ++idle;
    // Spin while the peers have cores of their own (a yield hands the core to whatever else is
    // runnable for a whole time slice, which costs tens of microseconds per message); yield at
    // once when the local ranks outnumber the cores, where spinning would starve the peer.
    if (idle < spin_limit_) {
      cpu_relax();
      if (idle % 1024 != 0) continue;
    } else {
      sched_yield();
      if (idle % 64 != 0) continue;
    }
    // Every 64 yields: aborts, the launcher's notice, dead peers, the deadline.
    if (aborted()) return fail(ops, abort_status());
    if (auto why = notice_.check()) return fail(ops, job_failed(*why, Status()));
    if (shm_) {
      if (Status by_peer = shm_->posted_abort_status(rank_); !by_peer.ok()) {
        return fail(ops, by_peer);
      }
    }
    // Dead local peers matter only when an operation of this step waits for them (a peer that
    // finished its part may exit; its messages stay in the FIFOs and are drained first). A
    // survivor waiting on another survivor learns of the death through the posted abort.
    update_dead_peers();
    for (P2P& op : ops) {
      if (op.done || !dead_[size_t(op.peer)]) continue;
      if (Status s = transport_for(op.peer)->progress(op); !s.ok()) return fail(ops, s);
      if (op.done) continue;
      return fail(ops, unavailable(peer_name(op.peer) + " (pid " +
                                   std::to_string(processes_[size_t(op.peer)].pid) + ") died"));
    }
    if (ucx_) {
      if (auto failed = ucx_->failed_peer()) {
        return fail(ops,
                    unavailable(peer_name(failed->first) + " is unreachable: " + failed->second));
      }
    }
    const auto now = Clock::now();
    if (last_progress == Clock::time_point{}) last_progress = now;
    if (now - last_progress > options_.timeout) {
      std::string waiting;
      for (const P2P& op : ops) {
        if (op.done) continue;
        waiting += (waiting.empty() ? "" : ", ") +
                   std::string(op.kind == P2P::Kind::kSend ? "send to" : "receive from") + " " +
                   peer_name(op.peer) + " (" + std::to_string(op.moved) + " of " +
                   std::to_string(op.bytes) + " bytes)";
      }
      return fail(ops,
                  deadline_exceeded("timed out after " + std::to_string(options_.timeout.count()) +
                                    " ms waiting for " + waiting));
    }
    if (idle > spin_limit_ + 64 * 1024) {
      // Long waits (a peer computing): stop burning the core the peer may need.
      timespec pause{0, 50000};
      nanosleep(&pause, nullptr);
    }
  }
}

void* CommImpl::scratch(size_t bytes, int slot) {
  auto& buffer = scratch_[size_t(slot)];
  if (scratch_bytes_[size_t(slot)] < bytes) {
    buffer.reset(new char[bytes]);
    scratch_bytes_[size_t(slot)] = bytes;
  }
  return buffer.get();
}

}  // namespace tessera::coll
