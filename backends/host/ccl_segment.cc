#include "ccl_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

namespace tessera::host::ccl {

namespace {

constexpr uint64_t kMagic = 0x31304c4343525354ull;  // "TSRCCL01"
constexpr size_t kPage = 4096;
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(100);

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "the futex word must be a plain 32-bit integer");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "counters shared between processes must be lock-free");

}  // namespace

// Outside the anonymous namespace: SegmentHeader (declared in a header) holds an array of these.
struct alignas(64) PaddedCounter {
  std::atomic<uint64_t> value;
};

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // set last by the creator: the rest is initialised
  int32_t nranks;
  uint64_t total_bytes;
  std::atomic<int32_t> joined;
  alignas(64) std::atomic<uint32_t> wake;        // the futex word: bumped after every advance
  std::atomic<int32_t> sleepers;                 // waiters inside FUTEX_WAIT (skips needless wakes)
  alignas(64) std::atomic<int32_t> abort_state;  // 0 none, 1 being written, 2 posted
  int32_t abort_status;
  char abort_reason[512];
  std::atomic<int32_t> pids[kMaxRanks];  // 0 until the rank joins
  PaddedCounter generation[kMaxRanks];   // barrier counters
};

namespace {

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Sizes depend only on the rank count, so every rank computes the same layout.
struct Layout {
  size_t half_slot = 0;
  size_t channel = 0;
  size_t channels_offset = 0;
  size_t slots_offset = 0;
  size_t channel_buffers_offset = 0;
  size_t total = 0;
};

Layout layout_for(int32_t nranks) {
  Layout l;
  // Larger chunks for few ranks (fewer barriers per byte); the object is sparse on tmpfs, so
  // only the pages an operation touches are ever committed.
  l.half_slot = nranks <= 4 ? (size_t(4) << 20) : nranks <= 16 ? (size_t(1) << 20) : (256 << 10);
  l.channel = nranks <= 8 ? (size_t(1) << 20) : (256 << 10);
  const size_t n = size_t(nranks);
  l.channels_offset = round_up(sizeof(SegmentHeader), kPage);
  l.slots_offset = l.channels_offset + round_up(n * n * sizeof(Channel), kPage);
  l.channel_buffers_offset = l.slots_offset + n * 2 * l.half_slot;
  l.total = l.channel_buffers_offset + n * n * l.channel;
  return l;
}

std::string errno_text(const char* call, const std::string& name) {
  return std::string(call) + "(" + name + "): " + std::strerror(errno);
}

}  // namespace

bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A child that exited but was not yet reaped still answers kill(); its state says it is dead.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) return errno != ENOENT;
  char buffer[512];
  size_t got = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  buffer[got] = '\0';
  const char* close = std::strrchr(buffer, ')');  // the command name may contain anything
  if (close == nullptr || close[1] == '\0' || close[2] == '\0') return true;
  return close[2] != 'Z' && close[2] != 'X';
}

tsr_status Segment::join(const std::string& name, int32_t nranks, int32_t rank,
                         std::chrono::milliseconds timeout, std::unique_ptr<Segment>* out,
                         std::string* message) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const Layout l = layout_for(nranks);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  const bool creator = fd >= 0;
  if (!creator) {
    if (errno != EEXIST) {
      *message = errno_text("shm_open", name);
      return errno == ENOSPC || errno == EMFILE || errno == ENFILE ? TSR_RESOURCE_EXHAUSTED
                                                                   : TSR_INTERNAL;
    }
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      *message = errno == ENOENT ? "the rendezvous object " + name +
                                       " is gone: every rank of this id already joined, or the "
                                       "communicator failed to form (a unique id serves one "
                                       "communicator)"
                                 : errno_text("shm_open", name);
      return errno == ENOENT ? TSR_FAILED_PRECONDITION : TSR_INTERNAL;
    }
  } else if (ftruncate(fd, off_t(l.total)) != 0) {
    *message = errno_text("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    return TSR_RESOURCE_EXHAUSTED;
  }
  // A joiner may arrive between the creator's shm_open and its ftruncate: wait for the size.
  struct stat st {};
  for (;;) {
    if (fstat(fd, &st) != 0) {
      *message = errno_text("fstat", name);
      close(fd);
      return TSR_INTERNAL;
    }
    if (st.st_size > 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      *message = "the creator of " + name + " never sized it";
      close(fd);
      return TSR_DEADLINE_EXCEEDED;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const size_t mapped = size_t(st.st_size);
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *message = errno_text("mmap", name);
    return TSR_RESOURCE_EXHAUSTED;
  }
  std::unique_ptr<Segment> segment(new Segment());
  segment->base_ = base;
  segment->bytes_ = mapped;
  segment->header_ = static_cast<SegmentHeader*>(base);
  segment->nranks_ = nranks;
  segment->rank_ = rank;
  segment->half_slot_bytes_ = l.half_slot;
  segment->channel_bytes_ = l.channel;
  segment->slots_offset_ = l.slots_offset;
  segment->channels_offset_ = l.channels_offset;
  segment->channel_buffers_offset_ = l.channel_buffers_offset;
  SegmentHeader* header = segment->header_;
  if (creator) {
    new (header) SegmentHeader();
    header->nranks = nranks;
    header->total_bytes = l.total;
    new (static_cast<char*>(base) + l.channels_offset) Channel[size_t(nranks) * size_t(nranks)]();
    header->magic.store(kMagic);
  } else {
    while (header->magic.load() != kMagic) {
      if (std::chrono::steady_clock::now() > deadline) {
        *message = "the creator of " + name + " never initialised it";
        return TSR_DEADLINE_EXCEEDED;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (header->nranks != nranks || header->total_bytes != mapped || mapped != l.total) {
      char text[256];
      std::snprintf(text, sizeof text,
                    "rank %d was given nranks=%d but the communicator was created for %d ranks "
                    "(every rank must pass the same nranks)",
                    rank, nranks, header->nranks);
      *message = text;
      segment->post_abort(TSR_INVALID_ARGUMENT, text);
      return TSR_INVALID_ARGUMENT;
    }
  }
  int32_t none = 0;
  if (!header->pids[rank].compare_exchange_strong(none, int32_t(getpid()))) {
    char text[160];
    std::snprintf(text, sizeof text, "rank %d joined twice (first by pid %d)", rank, int(none));
    *message = text;
    segment->post_abort(TSR_INVALID_ARGUMENT, text);
    return TSR_INVALID_ARGUMENT;
  }
  if (header->joined.fetch_add(1) + 1 == nranks) shm_unlink(name.c_str());  // mappings stay
  segment->wake();

  // Every wait in this loop is bounded by the deadline.
  while (header->joined.load() < nranks) {
    if (tsr_status s = segment->aborted(message); s != TSR_OK) return s;
    if (tsr_status s = segment->check_peers(message); s != TSR_OK) {
      segment->post_abort(s, *message);
      return s;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (int32_t r = 0; r < nranks; ++r) {
        if (header->pids[r].load() == 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      char text[128];
      std::snprintf(text, sizeof text, "rank %d of %d waited %.1f s for rank(s) ", rank, nranks,
                    double(timeout.count()) / 1000.0);
      *message = text + missing + " to join (TESSERA_HOST_CCL_INIT_TIMEOUT)";
      segment->post_abort(TSR_DEADLINE_EXCEEDED, *message);
      shm_unlink(name.c_str());  // nobody else may join a communicator that failed to form
      return TSR_DEADLINE_EXCEEDED;
    }
    const uint32_t seen = header->wake.load();
    if (header->joined.load() >= nranks) break;
    timespec ts{0, 20'000'000};
    header->sleepers.fetch_add(1);
    futex(&header->wake, FUTEX_WAIT, seen, &ts);
    header->sleepers.fetch_sub(1);
  }
  *out = std::move(segment);
  return TSR_OK;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

char* Segment::slot(int32_t r, int half) const {
  return static_cast<char*>(base_) + slots_offset_ +
         (size_t(r) * 2 + size_t(half)) * half_slot_bytes_;
}

Channel& Segment::channel(int32_t src, int32_t dst) const {
  auto* channels = reinterpret_cast<Channel*>(static_cast<char*>(base_) + channels_offset_);
  return channels[size_t(src) * size_t(nranks_) + size_t(dst)];
}

char* Segment::channel_buffer(int32_t src, int32_t dst) const {
  return static_cast<char*>(base_) + channel_buffers_offset_ +
         (size_t(src) * size_t(nranks_) + size_t(dst)) * channel_bytes_;
}

void Segment::wake() {
  header_->wake.fetch_add(1);
  if (header_->sleepers.load() > 0) futex(&header_->wake, FUTEX_WAKE, INT_MAX, nullptr);
}

tsr_status Segment::wait(const std::function<bool()>& ready, const char* operation,
                         const char* what, std::string* message) {
  auto next_check = std::chrono::steady_clock::now() + kPeerCheckInterval;
  int spins = 0;
  auto failed = [&](tsr_status status, const std::string& why) {
    *message =
        "rank " + std::to_string(rank_) + " waited in " + operation + " for " + what + ": " + why;
    return status;
  };
  for (;;) {
    if (ready()) return TSR_OK;
    std::string why;
    if (tsr_status s = aborted(&why); s != TSR_OK) return failed(s, why);
    const uint32_t seen = header_->wake.load();
    if (ready()) return TSR_OK;
    // A short spin catches a peer that is a few microseconds behind; then sleep on the futex
    // (20 ms at most, so the abort flag and peer deaths are noticed even without a wake).
    if (spins < 100) {
      ++spins;
      cpu_relax();
      continue;
    }
    if (spins < 110) {
      ++spins;
      sched_yield();
      continue;
    }
    timespec ts{0, 20'000'000};
    header_->sleepers.fetch_add(1);
    futex(&header_->wake, FUTEX_WAIT, seen, &ts);
    header_->sleepers.fetch_sub(1);
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check) {
      next_check = now + kPeerCheckInterval;
      if (tsr_status s = check_peers(&why); s != TSR_OK) {
        post_abort(s, why);  // every other rank fails at once instead of at its own check
        return failed(s, why);
      }
    }
  }
}

tsr_status Segment::barrier(uint64_t generation, const char* operation, std::string* message) {
  header_->generation[rank_].value.store(generation);
  wake();
  char what[96];
  std::snprintf(what, sizeof what, "every rank to reach step %llu",
                static_cast<unsigned long long>(generation));
  return wait(
      [&] {
        for (int32_t r = 0; r < nranks_; ++r) {
          if (header_->generation[r].value.load() < generation) return false;
        }
        return true;
      },
      operation, what, message);
}

void Segment::post_abort(tsr_status status, const std::string& reason) {
  int32_t expected = 0;
  if (header_->abort_state.compare_exchange_strong(expected, 1)) {
    header_->abort_status = int32_t(status);
    std::snprintf(header_->abort_reason, sizeof header_->abort_reason, "%s", reason.c_str());
    header_->abort_state.store(2);
  }
  wake();
}

tsr_status Segment::aborted(std::string* message) const {
  int32_t state = header_->abort_state.load();
  if (state == 0) return TSR_OK;
  // The poster writes the reason between states 1 and 2 (a snprintf): wait that out, boundedly.
  for (int i = 0; state == 1 && i < 100000; ++i) {
    cpu_relax();
    state = header_->abort_state.load();
  }
  if (state != 2) {
    *message = "the communicator was aborted";
    return TSR_ABORTED;
  }
  *message = header_->abort_reason;
  return static_cast<tsr_status>(header_->abort_status);
}

tsr_status Segment::check_peers(std::string* message) const {
  const pid_t self = getpid();
  for (int32_t r = 0; r < nranks_; ++r) {
    const pid_t pid = header_->pids[r].load();
    if (r == rank_ || pid == 0 || pid == self) continue;
    if (!process_alive(pid)) {
      *message = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") exited";
      return TSR_UNAVAILABLE;
    }
  }
  return TSR_OK;
}

}  // namespace tessera::host::ccl
