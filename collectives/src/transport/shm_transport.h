// Shared-memory transport between the ranks of a communicator on one host.
//
// One segment per communicator (POSIX shm, created by the lowest local rank, unlinked as soon as
// everyone mapped it, so nothing outlives the processes). It holds a single-producer /
// single-consumer FIFO of chunk slots for every ordered pair of local ranks; a message is cut into
// slot-sized chunks, so the receiver copies (or reduces) chunk k while the sender fills chunk k+1
// and the data crosses the cache, not DRAM, when the FIFO is small. Pages are touched only by the
// pairs that talk, so the ring algorithms cost two FIFOs per rank. The segment is mapped with huge
// pages where the system has them reserved, else transparent huge pages are asked for.
//
// The segment's header also carries an abort word: a rank that fails an operation writes its rank
// and reason there, and every local rank's next wait sees it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace tessera::coll {

struct ShmConfig {
  int rank = 0;                   // in the communicator
  std::vector<int> local_ranks;   // communicator ranks on this host, ascending (includes rank)
  std::string segment_name;       // "/tessera-...", the same on every local rank
  size_t slot_bytes = 256 << 10;  // TESSERA_SHM_CHUNK
  int slots = 8;                  // TESSERA_SHM_SLOTS
  // Messages of at least this many bytes go single-copy: the FIFO carries only the sender's
  // address, and the receiver reads the data straight from the sender's memory with
  // process_vm_readv (CMA). 0 disables it. Enabled only when every local rank could read a peer.
  size_t single_copy_threshold = 0;  // TESSERA_SHM_CMA_THRESHOLD
};

// Whether this process can read `bytes` at `address` of process `pid` with process_vm_readv, and
// finds there the `expected` bytes (the peer's probe, so a pid naming another process fails)
// (the kernel's ptrace access check; seccomp profiles of some containers forbid it).
bool can_read_peer_memory(int pid, uint64_t address, const void* expected, size_t bytes);

struct ShmSegment;  // shm_transport.cc

class ShmTransport final : public Transport {
 public:
  // Creating is three steps so that the caller can put a barrier between them: the lowest local
  // rank creates (create_segment), everyone attaches (attach), then the creator unlinks the name.
  static Status create_segment(const ShmConfig& config);
  static Result<std::unique_ptr<ShmTransport>> attach(const ShmConfig& config);
  static void unlink_segment(const ShmConfig& config);
  ~ShmTransport() override;

  std::string_view name() const override { return "shm"; }
  bool reaches(int peer) const { return local_index(peer) >= 0; }
  Status start(P2P& op) override;
  Status progress(P2P& op) override;

  // The shared abort word: post once (first poster wins), read by everyone.
  void post_abort(int rank, std::string_view reason);
  std::optional<std::pair<int, std::string>> posted_abort() const;
  // OK, or ABORTED "aborted by rank R: <reason>" when a rank other than `except` posted an abort
  // (-1: any rank).
  Status posted_abort_status(int except = -1) const;
  bool huge_pages() const { return huge_pages_; }
  size_t single_copy_threshold() const { return config_.single_copy_threshold; }
  // Turns the single-copy path on for messages of at least `threshold` bytes (0: off). Every
  // local rank must be able to read the others' memory (can_read_peer_memory).
  void enable_single_copy(size_t threshold);

 private:
  ShmTransport() = default;
  int local_index(int rank) const;
  Status progress_send(P2P& op);
  Status progress_recv(P2P& op);
  bool slot_free(const struct FifoView& f, int peer_index, uint64_t head);

  ShmConfig config_;
  int my_index_ = -1;
  std::vector<int> index_of_rank_;            // communicator rank -> local index or -1
  std::vector<uint64_t> single_copies_sent_;  // per local index: single-copy messages posted
  std::vector<uint64_t> tail_cache_;          // per local index: the receiver's last seen tail
  std::unique_ptr<char[]> bounce_;            // receive-and-reduce staging for single-copy
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  bool huge_pages_ = false;
};

}  // namespace tessera::coll
