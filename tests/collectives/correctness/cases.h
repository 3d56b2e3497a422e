// The combinations the correctness test runs on every rank, and how one is run and checked.
//
// Inputs are small integers whose reductions are exact in any order (the same generator as
// `tessera bench coll`, tools/tessera/bench_coll/values.h), so results are compared bit for bit
// (2 ulp for float avg). Every buffer sits between guard bytes that must survive the operation,
// gaps of allgatherv/alltoallv must stay untouched, and out-of-place sends must be unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/coll/communicator.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::coll::testing {

struct Case {
  OpKind op = OpKind::kAllReduce;  // kSend means a send/recv ring shift by one rank
  hal::DType dtype = hal::DType::kF32;
  hal::ReduceOp redop = hal::ReduceOp::kSum;
  size_t count = 1;  // per rank (allgather, reduce_scatter), per peer (alltoall), else total
  bool in_place = false;
  bool unaligned = false;  // send at +1 byte, receive at +3 bytes from an aligned address
  int root = 0;
  bool on_stream = false;  // the stream API with Work::wait instead of the blocking one
  // Buffers in device memory of the communicator's device (filled and read back with stream
  // copies through pinned memory; on a discrete device the staged route moves them).
  bool device = false;
};

// The staged route's chunk size the rank uses (CommOptions::stage_chunk_bytes): the device cases
// include counts at and around multiples of it.
inline constexpr size_t kStageChunkBytes = 64 << 10;

// "allgatherv bf16 x 1000, 4 ranks, in place, unaligned"
std::string describe(const Case& c, int nranks);

// Every combination for `nranks` ranks, in the same order on every rank.
std::vector<Case> all_cases(int nranks);

struct Outcome {
  Status status;          // the operation's own status
  int64_t wrong = 0;      // mismatching elements, guard bytes and gaps on this rank
  std::string detail;     // the first few mismatches, one per line
  double op_seconds = 0;  // time inside the operation itself
};

// Runs `c` on this rank and checks the result. `stream` is needed for on_stream and device cases,
// `device` (the communicator's) for device cases.
Outcome run_case(Communicator& comm, const hal::Device* device, const hal::Stream* stream,
                 const Case& c);

}  // namespace tessera::coll::testing
