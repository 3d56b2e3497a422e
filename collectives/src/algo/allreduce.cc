// Allreduce: ring (bandwidth-optimal, 2(n-1) steps), recursive doubling (latency-optimal for small
// messages, log2 n steps of the whole vector), recursive halving/doubling (Rabenseifner: log2 n
// steps of shrinking halves, then the mirror allgather), binomial tree (reduce to rank 0, then
// broadcast), and the two-level hierarchical variant.
//
// Every algorithm computes each element's reduction once, in one place, and copies the result to
// the others, so every rank ends with the same bits. AVG sums and divides once, on the rank that
// finished an element, before it is copied out.
#include <cstring>

#include "algo/algo.h"
#include "comm_impl.h"
#include "reduce.h"

namespace tessera::coll {
namespace {

char* at(void* base, size_t elements, size_t element_bytes) {
  return static_cast<char*>(base) + elements * element_bytes;
}
const char* at(const void* base, size_t elements, size_t element_bytes) {
  return static_cast<const char*>(base) + elements * element_bytes;
}

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

int largest_power_of_two_at_most(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The fold that turns n ranks into a power of two p: of the first 2*(n-p) ranks, each even one
// hands its vector to the odd one after it and sits out. Returns the rank's index among the p
// (or -1 when it sits out); `real_rank` maps an index back.
struct Fold {
  int p;
  int rem;
  int index;
  int real_rank(int i) const { return i < rem ? 2 * i + 1 : i + rem; }
};
Fold make_fold(int rank, int n) {
  Fold f{largest_power_of_two_at_most(n), 0, -1};
  f.rem = n - f.p;
  if (rank < 2 * f.rem) {
    f.index = rank % 2 == 1 ? rank / 2 : -1;
  } else {
    f.index = rank - f.rem;
  }
  return f;
}

// Before the power-of-two part: even ranks of the first 2*rem send, odd ones reduce into recv.
// Afterwards recv holds this rank's starting vector (its input, or its input and its partner's).
Status fold_in(AlgoContext& c, const OpDesc& d, const Fold& f, size_t bytes) {
  const int r = c.rank();
  if (r >= 2 * f.rem) {
    copy_if_distinct(d.recv, d.send, bytes);
    return Status();
  }
  P2P op = r % 2 == 0 ? c.send(r + 1, d.send, bytes) : c.recv_reduce(r - 1, d.send, d.recv, bytes);
  TSR_RETURN_IF_ERROR(c.run({&op, 1}));
  ++c.header.step;
  return Status();
}

// After: the odd ranks give the result back to the even ones that sat out.
Status fold_out(AlgoContext& c, const OpDesc& d, const Fold& f, size_t bytes) {
  const int r = c.rank();
  if (r >= 2 * f.rem) return Status();
  P2P op = r % 2 == 0 ? c.recv(r + 1, d.recv, bytes) : c.send(r - 1, d.recv, bytes);
  return c.run({&op, 1});
}

}  // namespace

Status allreduce_ring(AlgoContext& c, const OpDesc& d) {
  const int n = c.size(), r = c.rank();
  const size_t e = dtype_bytes(d.dtype);
  if (n == 1) {
    copy_if_distinct(d.recv, d.send, d.count * e);
    return Status();
  }
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto block = [&](int i) { return block_of(d.count, n, ((i % n) + n) % n); };
  // Reduce-scatter: at step s, send block r-s and reduce block r-s-1 arriving from prev. The local
  // operand is always this rank's input block, which is still untouched in place.
  for (int s = 0; s < n - 1; ++s) {
    const Block out = block(r - s), in = block(r - s - 1);
    const void* out_src = s == 0 ? at(d.send, out.begin, e) : at(d.recv, out.begin, e);
    P2P ops[2] = {
        c.send(next, out_src, out.count * e),
        c.recv_reduce(prev, at(d.send, in.begin, e), at(d.recv, in.begin, e), in.count * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  const Block mine = block(r + 1);  // the block this rank finished
  if (d.op == ReduceOp::kAvg) finish_average(at(d.recv, mine.begin, e), mine.count, d.dtype, n);
  // Allgather: pass the finished blocks around.
  for (int s = 0; s < n - 1; ++s) {
    const Block out = block(r + 1 - s), in = block(r - s);
    P2P ops[2] = {c.send(next, at(d.recv, out.begin, e), out.count * e),
                  c.recv(prev, at(d.recv, in.begin, e), in.count * e)};
    TSR_RETURN_IF_ERROR(c.run(ops));
    ++c.header.step;
  }
  return Status();
}

Status allreduce_recursive_doubling(AlgoContext& c, const OpDesc& d) {
  const int n = c.size();
  const size_t bytes = d.count * dtype_bytes(d.dtype);
  const Fold f = make_fold(c.rank(), n);
  TSR_RETURN_IF_ERROR(fold_in(c, d, f, bytes));
  if (f.index >= 0) {
    void* incoming = c.scratch(bytes);
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const int partner = f.real_rank(f.index ^ mask);
      // Both directions at once; recv goes to scratch because the send still reads recv.
      P2P ops[2] = {c.send(partner, d.recv, bytes), c.recv(partner, incoming, bytes)};
      TSR_RETURN_IF_ERROR(c.run(ops));
      ++c.header.step;
      // Lower index first, so partners combine their operands in the same order.
      if ((f.index & mask) == 0) {
        reduce_pair(d.recv, d.recv, incoming, d.count, d.dtype, d.op);
      } else {
        reduce_pair(d.recv, incoming, d.recv, d.count, d.dtype, d.op);
      }
    }
    if (d.op == ReduceOp::kAvg) finish_average(d.recv, d.count, d.dtype, n);
  }
  return fold_out(c, d, f, bytes);
}

Status allreduce_halving_doubling(AlgoContext& c, const OpDesc& d) {
  const int n = c.size();
  const size_t e = dtype_bytes(d.dtype), bytes = d.count * e;
  const Fold f = make_fold(c.rank(), n);
  TSR_RETURN_IF_ERROR(fold_in(c, d, f, bytes));
  if (f.index >= 0) {
    // Reduce-scatter by recursive halving: keep the half of the current segment on my side.
    size_t lo = 0, hi = d.count;
    struct Range {
      size_t lo, hi;
    };
    std::vector<Range> kept;  // segment before each halving, for the mirror allgather
    for (int mask = f.p / 2; mask >= 1; mask >>= 1) {
      const int partner = f.real_rank(f.index ^ mask);
      const size_t mid = lo + (hi - lo) / 2;
      const bool lower = (f.index & mask) == 0;
      const size_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
      const size_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
      P2P ops[2] = {c.send(partner, at(d.recv, give_lo, e), (give_hi - give_lo) * e),
                    c.recv_reduce(partner, at(d.recv, keep_lo, e), at(d.recv, keep_lo, e),
                                  (keep_hi - keep_lo) * e)};
      TSR_RETURN_IF_ERROR(c.run(ops));
      ++c.header.step;
      kept.push_back({lo, hi});
      lo = keep_lo;
      hi = keep_hi;
    }
    if (d.op == ReduceOp::kAvg) finish_average(at(d.recv, lo, e), hi - lo, d.dtype, n);
    // Allgather by recursive doubling, mirroring the halving.
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const Range whole = kept.back();
      kept.pop_back();
      const int partner = f.real_rank(f.index ^ mask);
      const size_t other_lo = lo == whole.lo ? hi : whole.lo;
      const size_t other_hi = lo == whole.lo ? whole.hi : lo;
      P2P ops[2] = {c.send(partner, at(d.recv, lo, e), (hi - lo) * e),
                    c.recv(partner, at(d.recv, other_lo, e), (other_hi - other_lo) * e)};
      TSR_RETURN_IF_ERROR(c.run(ops));
      ++c.header.step;
      lo = whole.lo;
      hi = whole.hi;
    }
  }
  return fold_out(c, d, f, bytes);
}

Status allreduce_tree(AlgoContext& c, const OpDesc& d) {
  TSR_RETURN_IF_ERROR(reduce_tree(c, OpDesc::reduce(d.send, d.recv, d.count, d.dtype, d.op, 0)));
  return broadcast_tree(c, OpDesc::broadcast(d.recv, d.recv, d.count, d.dtype, 0));
}

Status allreduce_hierarchical(AlgoContext& c, const OpDesc& d) {
  CommImpl* local = c.local_comm();
  CommImpl* cross = c.cross_comm();
  if (local == nullptr || cross == nullptr) return allreduce_ring(c, d);
  const size_t e = dtype_bytes(d.dtype);
  const int ln = local->size(), lr = local->rank();
  // 1. Inside the host: reduce-scatter, so local rank lr holds block lr of the host's sum.
  //    (Sum, not average: the division happens once, after the cross-host step.)
  const ReduceOp partial = d.op == ReduceOp::kAvg ? ReduceOp::kSum : d.op;
  copy_if_distinct(d.recv, d.send, d.count * e);
  const Block mine = block_of(d.count, ln, lr);
  std::vector<size_t> counts(static_cast<size_t>(ln)), displs(static_cast<size_t>(ln));
  for (int i = 0; i < ln; ++i) {
    const Block b = block_of(d.count, ln, i);
    counts[size_t(i)] = b.count;
    displs[size_t(i)] = b.begin;
  }
  TSR_RETURN_IF_ERROR(local->reduce_scatter_blocks(d.recv, counts, displs, d.dtype, partial));
  // 2. Across hosts: allreduce of that block among the ranks with the same local rank.
  TSR_RETURN_IF_ERROR(cross->allreduce_inline(at(d.recv, mine.begin, e), at(d.recv, mine.begin, e),
                                              mine.count, d.dtype, partial));
  if (d.op == ReduceOp::kAvg)
    finish_average(at(d.recv, mine.begin, e), mine.count, d.dtype, c.size());
  // 3. Inside the host: allgather the blocks.
  return local->allgatherv_inline(d.recv, counts, displs, d.dtype);
}

}  // namespace tessera::coll
