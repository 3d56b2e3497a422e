// The shared-memory segment behind one communicator of the host reference CCL (ccl.cc): every
// rank of the communicator, in this process or another on the host, maps the same POSIX
// shared-memory object, named from the unique id. It holds
//   - a header: the rank count, each rank's pid (to notice a dead peer), the abort flag and its
//     reason (one for the whole communicator: an abort or a failure on any rank fails them all);
//   - one barrier counter per rank (a generation: rank r has passed barrier g when its counter is
//     at least g) and one futex word that every waiter sleeps on and every advance bumps;
//   - one slot per rank for collectives, split in two halves used alternately, so a rank can fill
//     one half while slower peers still read the other;
//   - one single-chunk channel per ordered pair of ranks for send/recv.
// Every wait checks the abort flag and, every 100 ms, whether a peer process has died; none is
// unbounded without those checks.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessera/hal/backend_abi.h"

namespace tessera::host::ccl {

inline constexpr int32_t kMaxRanks = 64;

struct SegmentHeader;
struct Channel;

class Segment {
 public:
  // Creates (first arrival) or opens the object `name` ("/tessera-ccl-<hex>") for `rank` of
  // `nranks`, records this process's pid for the rank, and waits until every rank has joined, at
  // most `timeout`. The last rank to join unlinks the name (the mappings stay). On failure
  // *message names the missing ranks or the mismatch, and the abort flag is set so ranks already
  // waiting fail too. Thread-safe (different ranks may join from different threads).
  static tsr_status join(const std::string& name, int32_t nranks, int32_t rank,
                         std::chrono::milliseconds timeout, std::unique_ptr<Segment>* out,
                         std::string* message);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  int32_t nranks() const { return nranks_; }
  int32_t rank() const { return rank_; }
  // Bytes of one half of a rank's collective slot.
  size_t half_slot_bytes() const { return half_slot_bytes_; }
  // Bytes of one send/recv channel's buffer.
  size_t channel_bytes() const { return channel_bytes_; }

  // Half `half` (0 or 1) of rank `r`'s collective slot.
  char* slot(int32_t r, int half) const;

  // Advances this rank's barrier counter to `generation` and waits until every rank's is at
  // least that. Fails (ABORTED, UNAVAILABLE) when the communicator is aborted or a peer dies.
  tsr_status barrier(uint64_t generation, const char* operation, std::string* message);

  // Waits until `ready()` is true, checking abort and peer death. `what` completes the message
  // "rank R waited in <operation> for <what>". `ready` is re-evaluated after every wake.
  tsr_status wait(const std::function<bool()>& ready, const char* operation, const char* what,
                  std::string* message);

  // Wakes every waiter of the segment (after any counter changed). Thread-safe.
  void wake();

  // The channel from rank `src` to rank `dst`, and its buffer.
  Channel& channel(int32_t src, int32_t dst) const;
  char* channel_buffer(int32_t src, int32_t dst) const;

  // Sets the abort flag (the first caller's status and reason win) and wakes every waiter on
  // every rank. Thread-safe, never blocks.
  void post_abort(tsr_status status, const std::string& reason);

  // TSR_OK, or the posted abort's status with its reason in *message. Thread-safe.
  tsr_status aborted(std::string* message) const;

  // TSR_OK, or TSR_UNAVAILABLE naming the first peer whose process has exited. Thread-safe.
  tsr_status check_peers(std::string* message) const;

 private:
  Segment() = default;

  void* base_ = nullptr;
  size_t bytes_ = 0;
  SegmentHeader* header_ = nullptr;
  int32_t nranks_ = 0;
  int32_t rank_ = 0;
  size_t half_slot_bytes_ = 0;
  size_t channel_bytes_ = 0;
  size_t slots_offset_ = 0;
  size_t channels_offset_ = 0;
  size_t channel_buffers_offset_ = 0;
};

// One send/recv channel (src -> dst): the sender fills the buffer when `posted == taken`, then
// raises `posted`; the receiver copies out when `posted > taken`, then raises `taken`. `total` is
// the sender's message size in bytes, so a receiver expecting another size fails clearly.
struct alignas(64) Channel {
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> taken;
  std::atomic<uint64_t> bytes;  // bytes in the buffer now
  std::atomic<uint64_t> total;  // the whole message being sent
};

// True while the process `pid` exists and is not a zombie. Thread-safe.
bool process_alive(pid_t pid);

}  // namespace tessera::host::ccl
