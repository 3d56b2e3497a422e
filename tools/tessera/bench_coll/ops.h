// The operations `tessera bench coll` measures: their names, buffer layouts, nccl-tests bandwidth
// factors, how to run one, and how to fill and check their buffers. Thread-compatible.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"

namespace tessera::tools::bench_coll {

enum class BenchOp {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv
};

// "allreduce", "all_reduce", "all_reduce_perf", "allgather", "all_gather", "alltoall", ...
std::optional<BenchOp> parse_bench_op(std::string_view name);
std::string_view bench_op_name(BenchOp op);
bool takes_redop(BenchOp op);
bool takes_root(BenchOp op);
// nccl-tests' busbw/algbw: allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n;
// broadcast, reduce, sendrecv 1.
double bus_factor(BenchOp op, int nranks);

// Element counts of one run of `bytes` bytes, as nccl-tests derives them: `param` is the count
// passed to the operation (per rank for allgather/reduce_scatter, per peer for alltoall), `send`
// and `recv` the buffer lengths, `algbw_bytes` the bytes algbw divides by the time.
struct Layout {
  size_t param = 0;
  size_t send = 0;
  size_t recv = 0;
  size_t algbw_bytes = 0;
  size_t printed_bytes = 0;  // the size column: the larger buffer
};
Layout layout_for(BenchOp op, size_t bytes, hal::DType dtype, int nranks);

struct Run {
  BenchOp op;
  hal::DType dtype;
  hal::ReduceOp redop;
  int root;
  Layout layout;
  bool in_place;
  void* send_base;  // buffers of at least layout.send / layout.recv elements
  void* recv_base;
};

// Whether `run` can be done in place (sendrecv cannot: its blocking send and receive share no
// buffer safely); such columns print N/A.
bool supports_in_place(BenchOp op);
// Writes this rank's inputs (into the receive buffer's own slot when in place).
void fill_inputs(const Run& run, int rank, int nranks);
// Runs the operation once on this rank.
Status run_once(coll::Communicator& comm, const Run& run);
// Elements of this rank's result that differ from the host-computed expectation.
int64_t count_wrong(const Run& run, int rank, int nranks);

}  // namespace tessera::tools::bench_coll
