// The collective algorithms, written once over the P2P layer (transport/transport.h). Each is a
// function of an AlgoContext (who am I, run a step, scratch memory) and the operation's OpDesc.
// They never block except inside AlgoContext::run, which bounds every wait.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/coll/communicator.h"
#include "transport/transport.h"

namespace tessera::coll {

// One operation with everything the algorithms need; the vectors are copies of the caller's spans
// so a queued operation does not depend on the caller's arrays staying alive. Build one with the
// named constructors below, which set exactly the fields each kind reads.
struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // allreduce/reduce/broadcast: total; allgather/alltoall: per rank;
                     // reduce_scatter: per rank (recv_count); allgatherv: total; send/recv: message
  DType dtype = DType::kU8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                                  // reduce, broadcast
  int peer = -1;                                 // send, recv: the other rank
  std::vector<size_t> counts, displs;            // allgatherv (elements), alltoallv send side
  std::vector<size_t> recv_counts, recv_displs;  // alltoallv receive side
  // The buffers are device memory of the communicator's device (set by the argument checks,
  // memory_kind.h); the route (host, staged, native) follows from it.
  bool device_memory = false;

  // The named constructors (the parameters are not called send/recv: those are the fields).
  static OpDesc allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
    return with_buffers(OpKind::kAllReduce, in, out, count, dtype, op);
  }
  static OpDesc reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                       int root_rank) {
    OpDesc d = with_buffers(OpKind::kReduce, in, out, count, dtype, op);
    d.root = root_rank;
    return d;
  }
  static OpDesc broadcast(const void* in, void* out, size_t count, DType dtype, int root_rank) {
    OpDesc d = with_buffers(OpKind::kBroadcast, in, out, count, dtype);
    d.root = root_rank;
    return d;
  }
  static OpDesc allgather(const void* in, void* out, size_t count, DType dtype) {
    return with_buffers(OpKind::kAllGather, in, out, count, dtype);
  }
  // count = the sum of `rank_counts`.
  static OpDesc allgatherv(const void* in, void* out, std::vector<size_t> rank_counts,
                           std::vector<size_t> rank_displs, DType dtype) {
    size_t total = 0;
    for (size_t c : rank_counts) total += c;
    OpDesc d = with_buffers(OpKind::kAllGatherV, in, out, total, dtype);
    d.counts = std::move(rank_counts);
    d.displs = std::move(rank_displs);
    return d;
  }
  static OpDesc reduce_scatter(const void* in, void* out, size_t recv_count, DType dtype,
                               ReduceOp op) {
    return with_buffers(OpKind::kReduceScatter, in, out, recv_count, dtype, op);
  }
  static OpDesc alltoall(const void* in, void* out, size_t count, DType dtype) {
    return with_buffers(OpKind::kAllToAll, in, out, count, dtype);
  }
  // count = 0: the total moved is not known locally and the header's count must agree on every
  // rank, so each pairwise message is checked by its size instead.
  static OpDesc alltoallv(const void* in, std::vector<size_t> send_counts,
                          std::vector<size_t> send_displs, void* out, std::vector<size_t> in_counts,
                          std::vector<size_t> in_displs, DType dtype) {
    OpDesc d = with_buffers(OpKind::kAllToAllV, in, out, 0, dtype);
    d.counts = std::move(send_counts);
    d.displs = std::move(send_displs);
    d.recv_counts = std::move(in_counts);
    d.recv_displs = std::move(in_displs);
    return d;
  }
  static OpDesc barrier() { return OpDesc{}; }
  static OpDesc send_to(const void* buf, size_t count, DType dtype, int peer_rank) {
    OpDesc d = with_buffers(OpKind::kSend, buf, nullptr, count, dtype);
    d.peer = peer_rank;
    return d;
  }
  static OpDesc recv_from(void* buf, size_t count, DType dtype, int peer_rank) {
    OpDesc d = with_buffers(OpKind::kRecv, nullptr, buf, count, dtype);
    d.peer = peer_rank;
    return d;
  }

  // Operations whose `op` means something (checked, and carried in the wire header).
  bool reduces() const {
    return kind == OpKind::kAllReduce || kind == OpKind::kReduce || kind == OpKind::kReduceScatter;
  }
  bool rooted() const { return kind == OpKind::kReduce || kind == OpKind::kBroadcast; }
  bool point_to_point() const { return kind == OpKind::kSend || kind == OpKind::kRecv; }
  // The one other rank the operation names (the root, or the send/recv peer); -1 for the others.
  // What the flight recorder shows.
  int named_rank() const { return rooted() ? root : point_to_point() ? peer : -1; }

 private:
  static OpDesc with_buffers(OpKind k, const void* in, void* out, size_t n, DType t,
                             ReduceOp r = ReduceOp::kSum) {
    OpDesc d;
    d.kind = k;
    d.send = in;
    d.recv = out;
    d.count = n;
    d.dtype = t;
    d.op = r;
    return d;
  }
};

class CommImpl;

class AlgoContext {
 public:
  virtual ~AlgoContext() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Runs one step: starts every op and drives them to completion (bounded by the timeout; fails on
  // abort, a dead peer or a header mismatch).
  virtual Status run(std::span<P2P> ops) = 0;
  // Scratch memory of at least `bytes`, valid until the operation ends; `slot` 0 or 1.
  virtual void* scratch(size_t bytes, int slot = 0) = 0;
  // For the hierarchical algorithms: the ranks on this host, and the ranks with the same local
  // rank on the other hosts (nullptr when the layout is not uniform).
  virtual CommImpl* local_comm() = 0;
  virtual CommImpl* cross_comm() = 0;

  // P2P operations stamped with the current operation's header and step.
  P2P send(int peer, const void* src, size_t bytes) const;
  P2P recv(int peer, void* dst, size_t bytes) const;
  P2P recv_reduce(int peer, const void* local, void* dst, size_t bytes) const;

  WireHeader header;  // set per operation by the communicator; header.step counts steps
  DType dtype = DType::kU8;
  ReduceOp reduce_op = ReduceOp::kSum;
};

// Element range [begin, begin + count) of block `i` when `count` elements are cut into `n`
// nearly equal blocks (the first count % n blocks get one more).
struct Block {
  size_t begin;
  size_t count;
};
inline Block block_of(size_t count, int n, int i) {
  const size_t base = count / size_t(n), extra = count % size_t(n);
  const size_t idx = size_t(i);
  return Block{base * idx + (idx < extra ? idx : extra), base + (idx < extra ? 1 : 0)};
}

// ---- the algorithms (algo/*.cc) -----------------------------------------------------------------
Status allreduce_ring(AlgoContext& c, const OpDesc& d);
Status allreduce_recursive_doubling(AlgoContext& c, const OpDesc& d);
Status allreduce_halving_doubling(AlgoContext& c, const OpDesc& d);
Status allreduce_tree(AlgoContext& c, const OpDesc& d);
Status allreduce_hierarchical(AlgoContext& c, const OpDesc& d);
Status reduce_tree(AlgoContext& c, const OpDesc& d);
Status broadcast_tree(AlgoContext& c, const OpDesc& d);
Status broadcast_chain(AlgoContext& c, const OpDesc& d);
Status allgather_ring(AlgoContext& c, const OpDesc& d);  // also allgatherv
Status allgather_direct(AlgoContext& c, const OpDesc& d);
Status reduce_scatter_ring(AlgoContext& c, const OpDesc& d);
Status alltoall_pairwise(AlgoContext& c, const OpDesc& d);  // also alltoallv
Status barrier_dissemination(AlgoContext& c, const OpDesc& d);
Status send_recv(AlgoContext& c, const OpDesc& d);

}  // namespace tessera::coll
