#include "ops.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "values.h"

namespace tessera::tools::bench_coll {
namespace {

using hal::DType;
using hal::ReduceOp;

struct OpName {
  std::string_view name;
  BenchOp op;
};
// The first name of each operation is the one printed.
constexpr std::array<OpName, 19> kOpNames = {{
    {"allreduce", BenchOp::kAllReduce},
    {"all_reduce", BenchOp::kAllReduce},
    {"all_reduce_perf", BenchOp::kAllReduce},
    {"reduce", BenchOp::kReduce},
    {"reduce_perf", BenchOp::kReduce},
    {"broadcast", BenchOp::kBroadcast},
    {"broadcast_perf", BenchOp::kBroadcast},
    {"allgather", BenchOp::kAllGather},
    {"all_gather", BenchOp::kAllGather},
    {"all_gather_perf", BenchOp::kAllGather},
    {"reduce_scatter", BenchOp::kReduceScatter},
    {"reducescatter", BenchOp::kReduceScatter},
    {"reduce_scatter_perf", BenchOp::kReduceScatter},
    {"alltoall", BenchOp::kAllToAll},
    {"all_to_all", BenchOp::kAllToAll},
    {"alltoall_perf", BenchOp::kAllToAll},
    {"sendrecv", BenchOp::kSendRecv},
    {"send_recv", BenchOp::kSendRecv},
    {"sendrecv_perf", BenchOp::kSendRecv},
}};

unsigned char* at(void* base, size_t elements, DType dtype) {
  return static_cast<unsigned char*>(base) + elements * hal::dtype_size(dtype);
}

// The pointers an operation is called with: in place they alias the receive buffer as the
// Communicator API defines it.
struct Pointers {
  void* send;
  void* recv;
};
Pointers pointers(const Run& run, int rank) {
  if (!run.in_place) return {run.send_base, run.recv_base};
  const size_t per = run.layout.param;
  switch (run.op) {
    case BenchOp::kAllGather:
      return {at(run.recv_base, size_t(rank) * per, run.dtype), run.recv_base};
    case BenchOp::kReduceScatter:
      return {run.recv_base, at(run.recv_base, size_t(rank) * per, run.dtype)};
    default: return {run.recv_base, run.recv_base};
  }
}

}  // namespace

std::optional<BenchOp> parse_bench_op(std::string_view name) {
  for (const auto& entry : kOpNames) {
    if (entry.name == name) return entry.op;
  }
  return std::nullopt;
}

std::string_view bench_op_name(BenchOp op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  return "?";
}

bool takes_redop(BenchOp op) {
  return op == BenchOp::kAllReduce || op == BenchOp::kReduce || op == BenchOp::kReduceScatter;
}

bool takes_root(BenchOp op) {
  return op == BenchOp::kReduce || op == BenchOp::kBroadcast;
}

bool supports_in_place(BenchOp op) {
  return op != BenchOp::kSendRecv;
}

double bus_factor(BenchOp op, int nranks) {
  const double n = nranks;
  switch (op) {
    case BenchOp::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAllToAll: return (n - 1) / n;
    default: return 1.0;
  }
}

Layout layout_for(BenchOp op, size_t bytes, DType dtype, int nranks) {
  const size_t ts = hal::dtype_size(dtype);
  const size_t count = bytes / ts;
  const size_t n = size_t(nranks);
  Layout l;
  switch (op) {
    case BenchOp::kAllGather:
      l = {count / n, count / n, count / n * n, count / n * n * ts, 0};
      break;
    case BenchOp::kReduceScatter:
      l = {count / n, count / n * n, count / n, count / n * n * ts, 0};
      break;
    case BenchOp::kAllToAll:
      l = {count / n, count / n * n, count / n * n, count / n * n * ts, 0};
      break;
    default: l = {count, count, count, count * ts, 0}; break;
  }
  l.printed_bytes = (l.send > l.recv ? l.send : l.recv) * ts;
  return l;
}

void fill_inputs(const Run& run, int rank, int nranks) {
  const Pointers p = pointers(run, rank);
  auto* send = static_cast<unsigned char*>(p.send);
  const size_t n = run.layout.send;
  // Inputs repeat every kInputPeriod elements: compute one period, copy it over the rest.
  const size_t computed = std::min(n, kInputPeriod);
  for (size_t i = 0; i < computed; ++i) {
    store(send, i, run.dtype,
          takes_redop(run.op) ? reduction_input(run.redop, run.dtype, nranks, rank, i)
                              : movement_input(run.dtype, rank, i));
  }
  const size_t ts = hal::dtype_size(run.dtype);
  for (size_t at = computed; at < n; at += computed) {
    std::memcpy(send + at * ts, send, std::min(computed, n - at) * ts);
  }
}

Status run_once(coll::Communicator& comm, const Run& run) {
  const int rank = comm.rank();
  const int nranks = comm.size();
  const Pointers p = pointers(run, rank);
  const size_t count = run.layout.param;
  switch (run.op) {
    case BenchOp::kAllReduce: return comm.allreduce(p.send, p.recv, count, run.dtype, run.redop);
    case BenchOp::kReduce:
      return comm.reduce(p.send, p.recv, count, run.dtype, run.redop, run.root);
    case BenchOp::kBroadcast: return comm.broadcast(p.send, p.recv, count, run.dtype, run.root);
    case BenchOp::kAllGather: return comm.allgather(p.send, p.recv, count, run.dtype);
    case BenchOp::kReduceScatter:
      return comm.reduce_scatter(p.send, p.recv, count, run.dtype, run.redop);
    case BenchOp::kAllToAll: return comm.alltoall(p.send, p.recv, count, run.dtype);
    case BenchOp::kSendRecv: {
      // Blocking calls: even ranks send first, odd ranks receive first, so the ring never has
      // every rank waiting in send (rank n-1 and 0 both even for odd n is fine: 0's send to the
      // odd rank 1 completes first).
      const int next = (rank + 1) % nranks;
      const int prev = (rank + nranks - 1) % nranks;
      if (rank % 2 == 0) {
        TSR_RETURN_IF_ERROR(comm.send(p.send, count, run.dtype, next));
        return comm.recv(p.recv, count, run.dtype, prev);
      }
      TSR_RETURN_IF_ERROR(comm.recv(p.recv, count, run.dtype, prev));
      return comm.send(p.send, count, run.dtype, next);
    }
  }
  return internal_error("unknown benchmark operation");
}

int64_t count_wrong(const Run& run, int rank, int nranks) {
  const Pointers p = pointers(run, rank);
  const size_t per = run.layout.param;
  const int ulps = run.redop == ReduceOp::kAvg ? 2 : 0;
  int64_t wrong = 0;
  auto check = [&](const void* base, size_t i, double expected) {
    if (!element_matches(base, i, run.dtype, expected, ulps)) ++wrong;
  };
  // Reductions cost O(ranks) per element: computed once per input period.
  std::vector<double> reduced;
  if (takes_redop(run.op)) {
    reduced.resize(kInputPeriod);
    for (size_t j = 0; j < kInputPeriod; ++j) {
      reduced[j] = reduction_expected(run.redop, run.dtype, nranks, j);
    }
  }
  auto reduction = [&](size_t i) { return reduced[i % kInputPeriod]; };
  switch (run.op) {
    case BenchOp::kAllReduce:
    case BenchOp::kReduce:
      if (run.op == BenchOp::kReduce && rank != run.root) break;
      for (size_t i = 0; i < per; ++i) {
        check(p.recv, i, reduction(i));
      }
      break;
    case BenchOp::kReduceScatter:
      for (size_t i = 0; i < per; ++i) {
        check(p.recv, i, reduction(size_t(rank) * per + i));
      }
      break;
    case BenchOp::kBroadcast:
      for (size_t i = 0; i < per; ++i) check(p.recv, i, movement_input(run.dtype, run.root, i));
      break;
    case BenchOp::kAllGather:
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < per; ++i) {
          check(p.recv, size_t(r) * per + i, movement_input(run.dtype, r, i));
        }
      }
      break;
    case BenchOp::kAllToAll:
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < per; ++i) {
          check(p.recv, size_t(r) * per + i, movement_input(run.dtype, r, size_t(rank) * per + i));
        }
      }
      break;
    case BenchOp::kSendRecv: {
      const int prev = (rank + nranks - 1) % nranks;
      for (size_t i = 0; i < per; ++i) check(p.recv, i, movement_input(run.dtype, prev, i));
      break;
    }
  }
  return wrong;
}

}  // namespace tessera::tools::bench_coll
