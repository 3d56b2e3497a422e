// Shared-memory FIFOs between the local ranks of a communicator. See shm_transport.h.
#include "transport/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "reduce.h"
#include "tessera/common/log.h"

namespace tessera::coll {

namespace {

// Chunks at least this large are written with streaming stores.
constexpr size_t kStreamingChunk = 16 << 10;
// Received messages at least this large are written to their destination with streaming stores.
constexpr size_t kStreamingMessage = size_t(4) << 20;
constexpr uint64_t kMagic = 0x54455353'53484d31ull;  // "TESSSHM1"
constexpr size_t kLine = 64;

struct alignas(kLine) SegmentHeader {
  uint64_t magic;
  uint64_t slot_bytes;
  uint32_t slots;
  uint32_t local_size;
  std::atomic<uint32_t> abort_posted;  // 0, then 1 while writing, then 2 when readable
  int32_t abort_rank;
  char abort_reason[480];
};

constexpr uint32_t kSingleCopy = 1;  // SlotHeader::flags: the data stays in the sender

// One chunk slot. The receiver polls `stamp` (chunk number + 1, written last with release
// semantics) instead of a shared head counter. Messages of at most kInlineBytes travel inside
// the first line, so a small message costs one cache line from sender to receiver; larger chunks
// use the data area after the header, and the second line's fields.
constexpr size_t kInlineBytes = 16;

struct alignas(kLine) SlotHeader {
  // First line: all a small message needs.
  std::atomic<uint64_t> stamp;
  WireHeader wire;
  uint64_t bytes;  // of this chunk (the whole message for a single-copy slot)
  unsigned char inline_data[kInlineBytes];
  // Second line: larger chunks.
  alignas(kLine) uint64_t offset;  // of this chunk in the message
  uint32_t flags;
  int32_t sender_pid;       // single-copy: who holds the data
  uint64_t sender_address;  // single-copy: where
};
static_assert(sizeof(SlotHeader) == 2 * kLine);

struct alignas(kLine) FifoCounters {
  alignas(kLine) std::atomic<uint64_t> head;  // chunks published (only the sender touches it)
  alignas(kLine) std::atomic<uint64_t> tail;  // chunks consumed (sender reads it when full)
  // Single-copy messages the receiver finished reading: the sender's buffer is free again.
  alignas(kLine) std::atomic<uint64_t> single_copies_done;
};

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

size_t slot_stride(size_t slot_bytes) {
  return sizeof(SlotHeader) + round_up(slot_bytes, kLine);
}
size_t fifo_stride(const ShmConfig& c) {
  return round_up(sizeof(FifoCounters) + size_t(c.slots) * slot_stride(c.slot_bytes), 4096);
}
size_t segment_bytes(const ShmConfig& c) {
  const size_t n = c.local_ranks.size();
  return round_up(sizeof(SegmentHeader), 4096) + n * n * fifo_stride(c);
}

// Huge pages are 2 MiB: map the segment in multiples of it when trying them.
constexpr size_t kHugePage = size_t(2) << 20;

Status errno_error(const std::string& what, const std::string& name) {
  return unavailable("shared memory " + what + " '" + name + "': " + std::strerror(errno));
}

// The chunk size for a message of `bytes`: about an eighth of it, so that even a mid-sized
// message is cut into enough chunks for the sender's copy and the receiver's copy or reduction
// to overlap, within [16 KiB, slot size], in whole 4 KiB pages. Both sides compute it from the
// message size, which they agree on.
size_t chunk_bytes(size_t bytes, size_t slot_bytes) {
  const size_t eighth = (bytes / 8 + 4095) / 4096 * 4096;
  return std::min(slot_bytes, std::max<size_t>(eighth, 16 << 10));
}

// Chunks of a message of `bytes` bytes; a 0-byte message is one empty chunk.
size_t num_chunks(size_t bytes, size_t chunk) {
  return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
}

// The kernel's shmem THP policy: "[never]" and "[deny]" ignore madvise(MADV_HUGEPAGE).
bool shmem_huge_pages_allowed() {
  char policy[128] = {};
  FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (f == nullptr) return false;
  const size_t n = std::fread(policy, 1, sizeof policy - 1, f);
  std::fclose(f);
  const std::string text(policy, n);
  return text.find("[never]") == std::string::npos && text.find("[deny]") == std::string::npos;
}

}  // namespace

Status ShmTransport::create_segment(const ShmConfig& config) {
  int fd = shm_open(config.segment_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // The name hashes the communicator id, the host and the creator's pid, which is this
    // process: an existing segment was left by a job that crashed between creating and unlinking
    // it, in a process that had this pid. Its ranks (if any live) keep their mapping.
    TSR_LOG(kWarn, "coll") << "removing the stale shared-memory segment '" << config.segment_name
                           << "' (left by a crashed job whose creator had this pid)";
    shm_unlink(config.segment_name.c_str());
    fd = shm_open(config.segment_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) return errno_error("create", config.segment_name);
  const size_t bytes = round_up(segment_bytes(config), kHugePage);
  if (ftruncate(fd, off_t(bytes)) != 0) {
    Status s = errno_error("resize to " + std::to_string(bytes) + " bytes", config.segment_name);
    close(fd);
    shm_unlink(config.segment_name.c_str());
    return s;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(config.segment_name.c_str());
    return errno_error("map", config.segment_name);
  }
  auto* header = new (base) SegmentHeader{};
  header->slot_bytes = config.slot_bytes;
  header->slots = uint32_t(config.slots);
  header->local_size = uint32_t(config.local_ranks.size());
  header->abort_rank = -1;
  header->abort_posted.store(0);
  header->magic = kMagic;
  munmap(base, bytes);
  return Status();
}

void ShmTransport::unlink_segment(const ShmConfig& config) {
  shm_unlink(config.segment_name.c_str());
}

Result<std::unique_ptr<ShmTransport>> ShmTransport::attach(const ShmConfig& config) {
  if (config.slot_bytes == 0 || config.slot_bytes % 8 != 0 || config.slots < 2) {
    return invalid_argument("shared memory transport: chunk size " +
                            std::to_string(config.slot_bytes) +
                            " must be a positive multiple of 8 "
                            "and slots " +
                            std::to_string(config.slots) + " at least 2");
  }
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->config_ = config;
  const int max_rank = *std::max_element(config.local_ranks.begin(), config.local_ranks.end());
  t->index_of_rank_.assign(size_t(max_rank) + 1, -1);
  for (size_t i = 0; i < config.local_ranks.size(); ++i) {
    t->index_of_rank_[size_t(config.local_ranks[i])] = int(i);
  }
  t->my_index_ = t->local_index(config.rank);
  t->single_copies_sent_.assign(config.local_ranks.size(), 0);
  t->tail_cache_.assign(config.local_ranks.size(), 0);
  t->enable_single_copy(config.single_copy_threshold);
  if (t->my_index_ < 0)
    return internal_error("shared memory transport: rank not among local ranks");

  const int fd = shm_open(config.segment_name.c_str(), O_RDWR, 0600);
  if (fd < 0) return errno_error("open", config.segment_name);
  const size_t bytes = round_up(segment_bytes(config), kHugePage);
  // Reserved huge pages (MAP_HUGETLB) cannot back a POSIX shm file; ask for transparent huge
  // pages instead, which the kernel grants when shmem THP is enabled ("advise" or "always").
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return errno_error("map", config.segment_name);
  t->base_ = base;
  t->mapped_bytes_ = bytes;
  t->huge_pages_ = madvise(base, bytes, MADV_HUGEPAGE) == 0 && shmem_huge_pages_allowed();
  const auto* header = static_cast<const SegmentHeader*>(base);
  if (header->magic != kMagic || header->slot_bytes != config.slot_bytes ||
      header->slots != uint32_t(config.slots) ||
      header->local_size != uint32_t(config.local_ranks.size())) {
    return internal_error("shared memory segment '" + config.segment_name +
                          "' has another layout (ranks disagree on TESSERA_SHM_CHUNK or "
                          "TESSERA_SHM_SLOTS?)");
  }
  return t;
}

void ShmTransport::enable_single_copy(size_t threshold) {
  config_.single_copy_threshold = threshold;
  if (threshold > 0 && !bounce_) bounce_.reset(new char[config_.slot_bytes]);
}

ShmTransport::~ShmTransport() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

int ShmTransport::local_index(int rank) const {
  if (rank < 0 || size_t(rank) >= index_of_rank_.size()) return -1;
  return index_of_rank_[size_t(rank)];
}

struct FifoView {
  FifoCounters* counters;
  char* slots;
  size_t stride;
  uint32_t count;
  SlotHeader* slot_header(uint64_t k) const {
    return reinterpret_cast<SlotHeader*>(slots + (k % count) * stride);
  }
  char* slot_data(uint64_t k) const { return slots + (k % count) * stride + sizeof(SlotHeader); }
};

static FifoView fifo(void* base, const ShmConfig& c, int from, int to) {
  const size_t n = c.local_ranks.size();
  char* fifo_base = static_cast<char*>(base) + round_up(sizeof(SegmentHeader), 4096) +
                    (size_t(from) * n + size_t(to)) * fifo_stride(c);
  return FifoView{reinterpret_cast<FifoCounters*>(fifo_base), fifo_base + sizeof(FifoCounters),
                  slot_stride(c.slot_bytes), uint32_t(c.slots)};
}

namespace {

// Reads the next piece of a single-copy message straight from the sender's memory into dst (or
// through the bounce buffer, reducing into dst). One piece per call keeps the other operations
// of the step moving.
Status read_single_copy(P2P& op, const SlotHeader& slot, size_t piece_bytes, char* bounce) {
  const size_t piece = std::min(piece_bytes, op.bytes - op.moved);
  const uint64_t remote = slot.sender_address + op.moved;
  char* dst = static_cast<char*>(op.dst) + op.moved;
  char* into = op.kind == P2P::Kind::kRecv ? dst : bounce;
  iovec local{into, piece};
  iovec from{reinterpret_cast<void*>(remote), piece};
  const ssize_t got = process_vm_readv(slot.sender_pid, &local, 1, &from, 1, 0);
  if (got != ssize_t(piece)) {
    return unavailable("single-copy read of " + std::to_string(piece) + " bytes from rank " +
                       std::to_string(op.peer) + " (pid " + std::to_string(slot.sender_pid) +
                       ") failed: " + (got < 0 ? std::strerror(errno) : "short read"));
  }
  if (op.kind == P2P::Kind::kRecvReduce) {
    reduce_pair(dst, static_cast<const char*>(op.src) + op.moved, into,
                piece / dtype_bytes(op.dtype), op.dtype, op.op);
  }
  op.moved += piece;
  return Status();
}

// What this transport keeps in an operation's scratch words (P2P::private_), by name.
uint64_t& chunks_done(P2P& op) {  // chunks sent or received (a single-copy message is all of them)
  return op.private_[0];
}
uint64_t& single_copy_ticket(P2P& op) {  // single-copy send: the completion count that means
  return op.private_[1];                 // "read"; 0 before the address is posted
}

Status size_mismatch(const P2P& op, const SlotHeader& slot, size_t expected, int my_rank) {
  return Status(StatusCode::kInvalidArgument,
                "collective mismatch: rank " + std::to_string(op.peer) + " sent " +
                    std::to_string(slot.bytes) + " bytes at offset " + std::to_string(slot.offset) +
                    " but rank " + std::to_string(my_rank) + " expected " +
                    std::to_string(expected) + " at offset " + std::to_string(op.moved) +
                    " (step " + std::to_string(op.header.step) + ")");
}

// Inline: the whole message is in the slot's first line.
void receive_inline(P2P& op, const SlotHeader& slot, size_t bytes) {
  if (bytes > 0) {
    char* dst = static_cast<char*>(op.dst);
    if (op.kind == P2P::Kind::kRecv) {
      std::memcpy(dst, slot.inline_data, bytes);
    } else {
      reduce_pair(dst, op.src, slot.inline_data, bytes / dtype_bytes(op.dtype), op.dtype, op.op);
    }
  }
  op.moved = bytes;
  ++chunks_done(op);
}

// Single copy: one piece of the sender's buffer per call (the slot stays until the last).
Status receive_single_copy(P2P& op, const SlotHeader& slot, int my_rank, size_t slot_bytes,
                           char* bounce) {
  if (slot.bytes != op.bytes) {
    return Status(StatusCode::kInvalidArgument,
                  "collective mismatch: rank " + std::to_string(op.peer) + " sent " +
                      std::to_string(slot.bytes) + " bytes but rank " + std::to_string(my_rank) +
                      " expected " + std::to_string(op.bytes));
  }
  // Plain receives read big pieces straight into place; reductions go through the cache-sized
  // bounce buffer.
  const size_t piece = op.kind == P2P::Kind::kRecv ? size_t(4) << 20 : slot_bytes;
  return read_single_copy(op, slot, piece, bounce);
}

// One chunk of `bytes` from a FIFO slot into place (or reduced into place).
void receive_chunk(P2P& op, const char* data, size_t bytes) {
  if (bytes > 0) {
    char* dst = static_cast<char*>(op.dst) + op.moved;
    // A plain receive has no source (null): no arithmetic on it.
    const char* local = op.src ? static_cast<const char*>(op.src) + op.moved : nullptr;
    // Large chunks go out with streaming stores, which skip reading the destination lines
    // first; an in-place reduction's destination is already in cache, so it stays ordinary.
    // (Messages that fit in cache keep their result there: the next step, the allgather of a
    // ring, sends it from this core.)
    const bool streaming = bytes >= kStreamingChunk && op.bytes >= kStreamingMessage &&
                           (op.kind == P2P::Kind::kRecv || local != dst);
    if (op.kind == P2P::Kind::kRecv) {
      copy_block(dst, data, bytes, streaming);
    } else {
      reduce_pair(dst, local, data, bytes / dtype_bytes(op.dtype), op.dtype, op.op, streaming);
    }
    if (streaming) streaming_fence();
  }
  op.moved += bytes;
  ++chunks_done(op);
}

}  // namespace

Status ShmTransport::start(P2P& op) {
  if (local_index(op.peer) < 0 || op.peer == config_.rank) {
    return internal_error("shared memory transport: rank " + std::to_string(op.peer) +
                          " is not another rank on this host");
  }
  op.done = false;
  op.moved = 0;
  chunks_done(op) = 0;
  single_copy_ticket(op) = 0;
  return Status();
}

bool ShmTransport::slot_free(const FifoView& f, int peer_index, uint64_t head) {
  // The receiver's tail is read only when the cached value says the FIFO is full.
  uint64_t& tail = tail_cache_[size_t(peer_index)];
  if (head - tail < uint64_t(config_.slots)) return true;
  tail = f.counters->tail.load(std::memory_order_acquire);
  return head - tail < uint64_t(config_.slots);
}

Status ShmTransport::progress(P2P& op) {
  if (op.done) return Status();
  return op.kind == P2P::Kind::kSend ? progress_send(op) : progress_recv(op);
}

Status ShmTransport::progress_send(P2P& op) {
  const int peer_index = local_index(op.peer);
  const FifoView f = fifo(base_, config_, my_index_, peer_index);
  // (Messages that fit inline never go single-copy: the receiver reads those from the slot.)
  if (config_.single_copy_threshold > 0 && op.bytes >= config_.single_copy_threshold &&
      op.bytes > kInlineBytes) {
    // Single copy: post the address once, then wait until the receiver says it has read it.
    if (single_copy_ticket(op) == 0) {
      const uint64_t head = f.counters->head.load(std::memory_order_relaxed);
      if (!slot_free(f, peer_index, head)) return Status();
      SlotHeader* slot = f.slot_header(head);
      slot->wire = op.header;
      slot->offset = 0;
      slot->bytes = op.bytes;
      slot->sender_address = reinterpret_cast<uint64_t>(op.src);
      slot->sender_pid = int32_t(getpid());
      slot->flags = kSingleCopy;
      slot->stamp.store(head + 1, std::memory_order_release);
      f.counters->head.store(head + 1, std::memory_order_relaxed);
      single_copy_ticket(op) = ++single_copies_sent_[size_t(peer_index)];
    }
    if (f.counters->single_copies_done.load(std::memory_order_acquire) >= single_copy_ticket(op)) {
      op.moved = op.bytes;
      op.done = true;
    }
    return Status();
  }
  const size_t chunk = chunk_bytes(op.bytes, config_.slot_bytes);
  const uint64_t chunks = num_chunks(op.bytes, chunk);
  uint64_t head = f.counters->head.load(std::memory_order_relaxed);
  while (chunks_done(op) < chunks && slot_free(f, peer_index, head)) {
    SlotHeader* slot = f.slot_header(head);
    const size_t n = std::min(chunk, op.bytes - op.moved);
    slot->wire = op.header;
    slot->bytes = n;
    if (op.bytes <= kInlineBytes) {
      if (n > 0) std::memcpy(slot->inline_data, op.src, n);
      slot->stamp.store(head + 1, std::memory_order_release);
      f.counters->head.store(++head, std::memory_order_relaxed);
      op.moved = n;
      ++chunks_done(op);
      continue;
    }
    slot->offset = op.moved;
    slot->flags = 0;
    // Streaming stores: the chunk goes to memory instead of staying dirty in this core's cache,
    // so the receiver reads it at memory bandwidth rather than line by line from this core
    // (cache-to-cache transfers are the slow path, badly so between vCPUs of a VM).
    if (n > 0) {
      copy_block(f.slot_data(head), static_cast<const char*>(op.src) + op.moved, n,
                 n >= kStreamingChunk);
      if (n >= kStreamingChunk) streaming_fence();
    }
    slot->stamp.store(head + 1, std::memory_order_release);
    ++head;
    f.counters->head.store(head, std::memory_order_relaxed);
    op.moved += n;
    ++chunks_done(op);
  }
  op.done = chunks_done(op) == chunks;
  return Status();
}

// A receive runs one of three protocols, chosen by the sender per message: inline (a message of
// at most kInlineBytes in the slot's first line), single copy (the slot carries the sender's
// address, read with process_vm_readv), or chunks through the FIFO's slots.
Status ShmTransport::progress_recv(P2P& op) {
  const FifoView f = fifo(base_, config_, local_index(op.peer), my_index_);
  const size_t chunk = chunk_bytes(op.bytes, config_.slot_bytes);
  const uint64_t chunks = num_chunks(op.bytes, chunk);
  uint64_t tail = f.counters->tail.load(std::memory_order_relaxed);
  while (chunks_done(op) < chunks &&
         f.slot_header(tail)->stamp.load(std::memory_order_acquire) == tail + 1) {
    const SlotHeader& slot = *f.slot_header(tail);
    if (!header_matches(slot.wire, op.header)) {
      return header_mismatch(slot.wire, op.header, config_.rank);
    }
    const size_t expected = std::min(chunk, op.bytes - op.moved);
    if (op.bytes <= kInlineBytes && slot.bytes == op.bytes) {
      receive_inline(op, slot, expected);
    } else if (slot.flags & kSingleCopy) {
      TSR_RETURN_IF_ERROR(
          receive_single_copy(op, slot, config_.rank, config_.slot_bytes, bounce_.get()));
      if (op.moved < op.bytes) return Status();  // one piece per call
      // A sender that failed meanwhile may have handed its buffer back to its caller: what was
      // read from it cannot be trusted.
      if (Status aborted = posted_abort_status(); !aborted.ok()) {
        return aborted.with_context("during a single-copy read");
      }
      f.counters->single_copies_done.fetch_add(1, std::memory_order_release);
      chunks_done(op) = chunks;
    } else {
      if (slot.offset != op.moved || slot.bytes != expected) {
        return size_mismatch(op, slot, expected, config_.rank);
      }
      receive_chunk(op, f.slot_data(tail), expected);
    }
    f.counters->tail.store(++tail, std::memory_order_release);
  }
  op.done = chunks_done(op) == chunks;
  return Status();
}

bool can_read_peer_memory(int pid, uint64_t address, const void* expected, size_t bytes) {
  std::unique_ptr<char[]> buffer(new char[bytes]);
  iovec local{buffer.get(), bytes};
  iovec from{reinterpret_cast<void*>(address), bytes};
  // The bytes must be the peer's probe: a pid that names another process (another PID
  // namespace, a reused pid) may well be readable too.
  return process_vm_readv(pid, &local, 1, &from, 1, 0) == ssize_t(bytes) &&
         std::memcmp(buffer.get(), expected, bytes) == 0;
}

void ShmTransport::post_abort(int rank, std::string_view reason) {
  auto* header = static_cast<SegmentHeader*>(base_);
  uint32_t expected = 0;
  if (!header->abort_posted.compare_exchange_strong(expected, 1)) return;
  header->abort_rank = rank;
  const size_t n = std::min(reason.size(), sizeof header->abort_reason - 1);
  std::memcpy(header->abort_reason, reason.data(), n);
  header->abort_reason[n] = '\0';
  header->abort_posted.store(2, std::memory_order_release);
}

Status ShmTransport::posted_abort_status(int except) const {
  auto posted = posted_abort();
  if (!posted || posted->first == except) return Status();
  return Status(StatusCode::kAborted,
                "aborted by rank " + std::to_string(posted->first) + ": " + posted->second);
}

std::optional<std::pair<int, std::string>> ShmTransport::posted_abort() const {
  const auto* header = static_cast<const SegmentHeader*>(base_);
  if (header->abort_posted.load(std::memory_order_acquire) != 2) return std::nullopt;
  return std::make_pair(int(header->abort_rank), std::string(header->abort_reason));
}

}  // namespace tessera::coll
