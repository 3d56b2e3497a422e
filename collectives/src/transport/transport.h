// The point-to-point layer under the algorithms. An algorithm step is a batch of P2P operations
// (sends, receives, receive-and-reduce) that CommImpl::run (comm_impl.cc) drives to completion by
// calling progress() on each until all are done, checking the deadline, aborts and dead peers in
// between.
//
// Contract for every transport:
//   - Messages between two ranks arrive in the order they were started, per direction; a batch has
//     at most one send and one receive per peer.
//   - start() and progress() never block: progress() moves as much as it can and returns; the
//     caller (CommImpl::run) spins, yields and sleeps around it.
//   - Every message carries a WireHeader; the receiver compares it with the header it expects and
//     fails with a mismatch error naming both ranks when operation, dtype, count or sequence
//     differ (the wrong data is never delivered).
//   - kRecvReduce: dst[i] = op(src[i], incoming[i]) elementwise, with the HAL's reduction
//     semantics (collectives/src/reduce.h); src may equal dst. Buffers may be unaligned.
//   - Errors name the peer rank and what failed; the transport does not log them itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"

namespace tessera::coll {

// Sent with every message (every chunk, for chunked transports); 32 bytes. Everything every rank
// must agree on is here, so a rank that disagrees fails the first message it receives instead of
// computing a wrong result: a reduction with another operator, a broadcast from another root, or
// another algorithm (ranks whose tuners were configured differently exchange the same bytes in
// other patterns).
struct WireHeader {
  uint64_t seq = 0;     // operation sequence number on this communicator
  uint64_t count = 0;   // the operation's element count as the caller passed it
  uint8_t op = 0;       // OpKind
  uint8_t dtype = 0;    // hal::DType
  uint8_t reduce = 0;   // hal::ReduceOp + 1 for reductions; 0 otherwise
  uint8_t algo = 0;     // the algorithm's index in the tuner's table for `op` (algorithm_name)
  uint32_t root = 0;    // root + 1 for reduce and broadcast; 0 otherwise
  uint32_t sender = 0;  // the sending rank in the communicator
  uint32_t step = 0;    // algorithm step, for diagnostics
};
static_assert(sizeof(WireHeader) == 32);

// "rank 1 sent allreduce #12 (f32 x 1000, sum, ring) but rank 0 expected allreduce #12 (f32 x
// 999, sum, ring)"
Status header_mismatch(const WireHeader& got, const WireHeader& expected, int receiver);
// True when `got` is the message `expected` describes (sender and step are not compared).
bool header_matches(const WireHeader& got, const WireHeader& expected);

struct P2P {
  enum class Kind : uint8_t { kSend, kRecv, kRecvReduce };
  Kind kind = Kind::kSend;
  int peer = -1;
  const void* src = nullptr;  // kSend: the data; kRecvReduce: the local operand
  void* dst = nullptr;        // kRecv, kRecvReduce
  size_t bytes = 0;
  hal::DType dtype = hal::DType::kU8;      // kRecvReduce: element type
  hal::ReduceOp op = hal::ReduceOp::kSum;  // kRecvReduce: never kAvg (the algorithm divides)
  WireHeader header;                       // kSend: sent; kRecv/kRecvReduce: expected

  // Progress, owned by the transport that started the operation.
  bool done = false;
  size_t moved = 0;           // bytes fully handled so far
  uint64_t private_[4] = {};  // transport scratch (request handles, slot cursors)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;

  virtual Status start(P2P& op) = 0;
  // Advances `op` without blocking; sets op.done when it completed.
  virtual Status progress(P2P& op) = 0;
  // Called once per CommImpl::run loop iteration before progress() calls (e.g.
  // ucp_worker_progress).
  virtual void poll() {}
  // Releases what an unfinished operation holds after a failure; the buffers may be freed next.
  virtual void cancel(P2P& op) {}
  // A peer this transport has found dead or unreachable (UCX endpoint error), with why.
  virtual std::optional<std::pair<int, std::string>> failed_peer() const { return std::nullopt; }
};

}  // namespace tessera::coll
