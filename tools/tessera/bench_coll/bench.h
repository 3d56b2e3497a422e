// The measurement loop of `tessera bench coll`: for each size of the sweep, out of place then in
// place, warm up, time `iters` back-to-back operations, reduce the per-iteration time over the
// ranks, and (with checking on) run once more on fresh inputs and count wrong elements.
// Buffers are host memory or device memory of BenchOptions::device.
// Collective: every rank of the communicator calls run_sweep with the same options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops.h"
#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::tools::bench_coll {

// How the per-iteration times of the ranks are combined (nccl-tests' -a).
enum class TimeReduction { kRank0 = 0, kAverage = 1, kMin = 2, kMax = 3 };
std::string_view time_reduction_name(TimeReduction reduction);  // "rank0", "avg", "min", "max"

struct BenchOptions {
  BenchOp op = BenchOp::kAllReduce;
  hal::DType dtype = hal::DType::kF32;
  hal::ReduceOp redop = hal::ReduceOp::kSum;
  int root = 0;
  size_t min_bytes = 32u << 20;
  size_t max_bytes = 32u << 20;
  int64_t step_factor = 1;       // > 1: multiply the size by it
  size_t step_bytes = 1u << 20;  // step_factor == 1: add this
  int iters = 20;
  int warmup = 5;
  bool check = true;
  TimeReduction time_reduction = TimeReduction::kMax;
  // Device memory of this device (the communicator's), as nccl-tests uses GPU buffers; nullptr:
  // host memory. Inputs are written and results checked in host memory and moved with the
  // device's copies (never timed).
  const hal::Device* device = nullptr;
};

struct Measurement {
  bool available = false;  // false: not measured (N/A), e.g. in-place sendrecv
  double time_us = 0;      // per iteration, reduced over the ranks
  double algbw_gbps = 0;   // 1e9 bytes per second
  double busbw_gbps = 0;
  int64_t wrong = -1;  // elements wrong, summed over the ranks; -1 when not checked
};

struct Row {
  size_t bytes = 0;       // nccl-tests' size column
  size_t count = 0;       // elements passed to the operation
  std::string algorithm;  // the tuner's choice for this size
  Measurement out_of_place;
  Measurement in_place;
};

// The communicator's operation behind a benchmark operation (sendrecv: send).
coll::OpKind op_kind(BenchOp op);

// The sizes of the sweep, in bytes: min, then * factor (or + step) while <= max.
std::vector<size_t> sweep_sizes(const BenchOptions& options);

// What run_sweep allocates on each rank for the sweep: two host buffers of the largest layout
// (page-rounded), and with BenchOptions::device two device buffers and a pinned host buffer of
// that size. Bytes.
struct MemoryNeed {
  size_t largest = 0;   // the largest send or receive buffer of the sweep
  uint64_t host = 0;    // pageable + pinned host memory
  uint64_t device = 0;  // memory of BenchOptions::device
};
MemoryNeed memory_need(const BenchOptions& options, int nranks);

// Runs the sweep; `on_row` sees each row as soon as it is measured (on every rank). Errors name
// the size and the placement that failed.
Result<std::vector<Row>> run_sweep(coll::Communicator& comm, const BenchOptions& options,
                                   const std::function<void(const Row&)>& on_row);

}  // namespace tessera::tools::bench_coll
