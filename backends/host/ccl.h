// The host reference CCL: tsr_collectives_api_v1 for the host backend's devices, so the native
// collectives route of the layers above (unique id, communicator creation, operations enqueued
// on a stream, abort, asynchronous errors) runs on every CI machine. Ranks are virtual devices
// of one process or processes on one host; bytes move through a shared-memory segment
// (ccl_segment.h) and reductions use the backend's own kernels, so results are those of
// reduce_async bit for bit.
//
// Each operation is validated when it is called and then enqueued on the caller's stream: the
// stream's worker runs it when the stream's earlier work is done and holds the stream until it
// completes, as an NCCL kernel does. Operations of one communicator run in the order they were
// issued, whatever streams they are on. Off unless TESSERA_HOST_CCL=1 or the init option
// collectives=1 (the table is always present; TSR_CAP_NATIVE_COLLECTIVES says whether it is on).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ccl_segment.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::host::ccl {

inline constexpr const char* kLibrary = "tessera host reference CCL";
inline constexpr const char* kEnableEnv = "TESSERA_HOST_CCL";
inline constexpr const char* kInitTimeoutEnv = "TESSERA_HOST_CCL_INIT_TIMEOUT";

// One rank's communicator. The segment is shared by all ranks; the rest is this rank's.
struct Comm {
  std::unique_ptr<Segment> segment;
  int32_t device = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
  // Issue order: each enqueued task takes a ticket; a task runs when `turn` reaches it.
  std::mutex issue_mutex;  // held while a task takes its ticket and is enqueued
  std::atomic<uint64_t> next_ticket{0};
  std::atomic<uint64_t> turn{0};
  // Touched only by the task holding the turn.
  uint64_t generation = 0;  // last barrier step of this rank
  int half = 0;             // the slot half the next chunk fills

  // The first asynchronous failure of this rank (TSR_OK when none). Thread-safe.
  void set_error(tsr_status status, const std::string& message);
  tsr_status error(std::string* message);

 private:
  std::mutex mutex_;
  tsr_status error_ = TSR_OK;
  std::string message_;
};

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSend, kRecv };

// One validated operation; pointers are the addresses the backend reaches the bytes through.
struct Op {
  Kind kind = Kind::kAllReduce;
  const char* name = "";
  std::shared_ptr<Comm> comm;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;    // elements: per rank for allgather/reduce_scatter/alltoall blocks
  size_t element = 0;  // bytes per element
  tsr_dtype dtype = TSR_DTYPE_F32;
  tsr_reduce_op op = TSR_REDUCE_SUM;
  int32_t peer = 0;  // broadcast: root; send/recv: the other rank
};

// Runs a collective (any kind but send/recv) to completion on the calling thread, which holds the
// communicator's turn. On failure *message says what and where.
tsr_status run_collective(const Op& op, std::string* message);

// Runs send/recv operations together (a group's point-to-point part) until all are complete:
// each channel carries one message at a time, in the order given.
tsr_status run_point_to_point(const std::vector<const Op*>& ops, std::string* message);

}  // namespace tessera::host::ccl

namespace tessera::host::api {
// The sub-table (always present; its calls fail with FAILED_PRECONDITION while it is off).
const tsr_collectives_api_v1* collectives();
}  // namespace tessera::host::api
