// Reduce (binomial tree), broadcast (binomial tree; pipelined chain for large messages),
// allgather(v) (ring; direct for small), reduce-scatter (ring), all-to-all(v) (pairwise exchange),
// barrier (dissemination) and send/recv.
#include <algorithm>
#include <cstring>

#include "algo/algo.h"
#include "reduce.h"

namespace tessera::coll {
namespace {

char* at(void* base, size_t elements, size_t e) {
  return static_cast<char*>(base) + elements * e;
}
const char* at(const void* base, size_t elements, size_t e) {
  return static_cast<const char*>(base) + elements * e;
}
int wrap(int i, int n) {
  return ((i % n) + n) % n;
}

}  // namespace

Status reduce_tree(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype), bytes = d.count * e;
  const int vr = wrap(r - d.root, n);
  // The accumulator: recv at the root, scratch elsewhere. It starts as this rank's input; the
  // first reduction reads the input directly instead of copying it first.
  void* acc = r == d.root ? d.recv : c.scratch(bytes);
  const void* current = d.send;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      P2P op = c.send(wrap(vr - mask + d.root, n), current, bytes);
      TSR_RETURN_IF_ERROR(c.run({&op, 1}));
      return Status();
    }
    if (vr + mask < n) {
      P2P op = c.recv_reduce(wrap(vr + mask + d.root, n), current, acc, bytes);
      TSR_RETURN_IF_ERROR(c.run({&op, 1}));
      current = acc;
    }
    ++c.header.step;
  }
  // Only the root gets here.
  if (current != d.recv && bytes > 0) std::memcpy(d.recv, current, bytes);
  if (d.op == ReduceOp::kAvg) finish_average(d.recv, d.count, d.dtype, n);
  return Status();
}

Status broadcast_tree(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = d.count * dtype_bytes(d.dtype);
  if (r == d.root && d.send != d.recv && bytes > 0) std::memcpy(d.recv, d.send, bytes);
  const int vr = wrap(r - d.root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      P2P op = c.recv(wrap(vr - mask + d.root, n), d.recv, bytes);
      TSR_RETURN_IF_ERROR(c.run({&op, 1}));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) {
      P2P op = c.send(wrap(vr + mask + d.root, n), d.recv, bytes);
      TSR_RETURN_IF_ERROR(c.run({&op, 1}));
    }
  }
  return Status();
}

Status broadcast_chain(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = d.count * dtype_bytes(d.dtype);
  if (r == d.root && d.send != d.recv && bytes > 0) std::memcpy(d.recv, d.send, bytes);
  const int vr = wrap(r - d.root, n);
  const int prev = wrap(r - 1, n), next = wrap(r + 1, n);
  // Pieces move down the chain root -> root+1 -> ...; piece k is forwarded while k+1 arrives.
  constexpr size_t kPiece = size_t(1) << 20;
  const size_t pieces = std::max<size_t>(1, (bytes + kPiece - 1) / kPiece);
  auto piece = [&](size_t k) {
    const size_t begin = k * kPiece;
    return std::make_pair(begin, std::min(kPiece, bytes - std::min(bytes, begin)));
  };
  for (size_t k = 0; k <= pieces; ++k) {
    P2P ops[2];
    int count = 0;
    if (vr > 0 && k < pieces) {
      auto [begin, len] = piece(k);
      ops[count++] = c.recv(prev, static_cast<char*>(d.recv) + begin, len);
    }
    if (vr < n - 1 && k >= 1) {
      auto [begin, len] = piece(k - 1);
      ops[count++] = c.send(next, static_cast<char*>(d.recv) + begin, len);
    }
    if (count > 0) TSR_RETURN_IF_ERROR(c.run({ops, size_t(count)}));
  }
  return Status();
}

// Shared by allgather and allgatherv: block i has counts[i] elements at displs[i] of recv.
static Status allgather_blocks_ring(AlgoContext& c, const OpDesc& d,
                                    const std::vector<size_t>& counts,
                                    const std::vector<size_t>& displs) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype);
  char* own = at(d.recv, displs[size_t(r)], e);
  if (d.send != nullptr && d.send != own && counts[size_t(r)] > 0) {
    std::memcpy(own, d.send, counts[size_t(r)] * e);
  }
  const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const size_t out = size_t(wrap(r - s, n)), in = size_t(wrap(r - s - 1, n));
    P2P ops[2] = {c.send(next, at(d.recv, displs[out], e), counts[out] * e),
                  c.recv(prev, at(d.recv, displs[in], e), counts[in] * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  return Status();
}

static void uniform_blocks(size_t count, int n, std::vector<size_t>& counts,
                           std::vector<size_t>& displs) {
  counts.assign(size_t(n), count);
  displs.resize(size_t(n));
  for (int i = 0; i < n; ++i) displs[size_t(i)] = size_t(i) * count;
}

Status allgather_ring(AlgoContext& c, const OpDesc& d) {
  if (d.kind == OpKind::kAllGatherV) return allgather_blocks_ring(c, d, d.counts, d.displs);
  std::vector<size_t> counts, displs;
  uniform_blocks(d.count, c.size(), counts, displs);
  return allgather_blocks_ring(c, d, counts, displs);
}

Status allgather_direct(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype);
  std::vector<size_t> counts = d.counts, displs = d.displs;
  if (d.kind != OpKind::kAllGatherV) uniform_blocks(d.count, n, counts, displs);
  char* own = at(d.recv, displs[size_t(r)], e);
  if (d.send != nullptr && d.send != own && counts[size_t(r)] > 0) {
    std::memcpy(own, d.send, counts[size_t(r)] * e);
  }
  std::vector<P2P> ops;
  ops.reserve(size_t(2 * (n - 1)));
  for (int s = 1; s < n; ++s) {
    const int to = wrap(r + s, n), from = wrap(r - s, n);
    ops.push_back(c.send(to, own, counts[size_t(r)] * e));
    ops.push_back(c.recv(from, at(d.recv, displs[size_t(from)], e), counts[size_t(from)] * e));
  }
  return c.run(ops);
}

Status reduce_scatter_ring(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype), block = d.count;  // d.count = elements per rank
  if (n == 1) {
    if (d.recv != d.send && block > 0) std::memcpy(d.recv, d.send, block * e);
    return Status();
  }
  // Partial sums travel around the ring in scratch; the last step lands in recv. At step s this
  // rank sends block r-s-1 and reduces block r-s-2 (its own input as the local operand).
  char* work = static_cast<char*>(c.scratch(size_t(n) * block * e));
  const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const size_t out = size_t(wrap(r - s - 1, n)), in = size_t(wrap(r - s - 2, n));
    const void* out_src = s == 0 ? at(d.send, out * block, e) : work + out * block * e;
    void* in_dst = s == n - 2 ? d.recv : work + in * block * e;
    P2P ops[2] = {c.send(next, out_src, block * e),
                  c.recv_reduce(prev, at(d.send, in * block, e), in_dst, block * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  if (d.op == ReduceOp::kAvg) finish_average(d.recv, block, d.dtype, n);
  return Status();
}

Status alltoall_pairwise(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype);
  std::vector<size_t> sc = d.counts, sd = d.displs, rc = d.recv_counts, rd = d.recv_displs;
  if (d.kind == OpKind::kAllToAll) {
    uniform_blocks(d.count, n, sc, sd);
    rc = sc;
    rd = sd;
  }
  size_t send_extent = 0;
  for (int i = 0; i < n; ++i) send_extent = std::max(send_extent, sd[size_t(i)] + sc[size_t(i)]);
  // In place: the outgoing blocks are overwritten as blocks arrive, so send from a copy.
  const void* send = d.send;
  if (d.send == d.recv && send_extent > 0) {
    void* copy = c.scratch(send_extent * e);
    std::memcpy(copy, d.send, send_extent * e);
    send = copy;
  }
  if (sc[size_t(r)] > 0) {
    std::memmove(at(d.recv, rd[size_t(r)], e), at(send, sd[size_t(r)], e), sc[size_t(r)] * e);
  }
  for (int s = 1; s < n; ++s) {
    const int to = wrap(r + s, n), from = wrap(r - s, n);
    P2P ops[2] = {c.send(to, at(send, sd[size_t(to)], e), sc[size_t(to)] * e),
                  c.recv(from, at(d.recv, rd[size_t(from)], e), rc[size_t(from)] * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  return Status();
}

Status barrier_dissemination(AlgoContext& c, const OpDesc&) {
  const int n = c.size(), r = c.rank();
  for (int k = 1; k < n; k <<= 1) {
    P2P ops[2] = {c.send(wrap(r + k, n), nullptr, 0), c.recv(wrap(r - k, n), nullptr, 0)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  return Status();
}

Status send_recv(AlgoContext& c, const OpDesc& d) {
  const size_t bytes = d.count * dtype_bytes(d.dtype);
  P2P op = d.kind == OpKind::kSend ? c.send(d.peer, d.send, bytes) : c.recv(d.peer, d.recv, bytes);
  return c.run({&op, 1});
}

}  // namespace tessera::coll
