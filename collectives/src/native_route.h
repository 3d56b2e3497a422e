// The native route (docs/COLLECTIVES.md, "Native route"): device buffers move through the
// backend's own collective library (tsr_collectives_api_v1: NCCL in the CUDA backend, RCCL
// through HIP, the host backend's reference CCL) instead of the communicator's transports.
//
// Creation: collective, inside the communicator's creation exchanges (NativeSetup). Every
// participant posts whether it can use the library; a group (the world, or the members of one
// split colour) takes the route only when every member can, so the ranks of a group always agree.
// The group's rank 0 makes the unique id and the same exchange carries it to the others.
//
// Operations:
//   - on a stream: enqueued on the caller's stream directly (no proxy thread, no host signal);
//     the Work's event is recorded after the operation, and a watcher thread finishes the Work
//     when that event completes, or fails it on an asynchronous error of the library, an abort
//     (here or posted by a peer) or when the operation has run longer than the timeout since the
//     stream reached it;
//   - blocking: enqueued on the communicator's internal stream (after this communicator's pending
//     stream operations) and waited for on the calling thread with the same checks.
// A peer's death is the library's to detect (the host reference CCL checks the peers' processes in
// every wait, NCCL through its sockets): only the library knows whether the operation still needs
// that peer (one that exited after its last part is no failure). The timeout bounds the rest.
// Every failure calls comm_abort on the library's communicator and aborts the Tessera one, and
// names the operation, the rank and the library. A Tessera abort (Communicator::abort, a peer's
// posted abort, a dead peer) calls comm_abort, which releases every pending library operation.
//
// Forms: allreduce, broadcast, allgather, reduce_scatter, alltoall, send and recv map to the
// table's entries; reduce is composed (an allreduce whose result lands in device scratch on the
// ranks other than the root), and an in-place alltoall first copies its input to scratch.
// allgatherv and alltoallv take the staged route; barrier has no buffers and keeps the host route.
// An entry the table lacks (NULL) sends its operation to the staged route too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algo/algo.h"
#include "flight_recorder.h"
#include "memory_kind.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/backend_abi.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::coll {

// Why the device cannot take the native route ("" when it can): no table, or the capability off.
std::string native_unavailable_reason(const hal::Device& device);

class NativeComm {
 public:
  // What the communicator lends the route.
  struct Hooks {
    // An abort of the Tessera communicator, posted here or by a peer: non-OK stops every wait.
    // Thread-safe (the watcher thread calls it).
    std::function<Status()> stop;
    // Aborts the Tessera communicator (which calls abort() here).
    std::function<void(const std::string&)> abort;
  };

  // comm_init_rank of `rank` of `size` on `device`, from the group's unique id. Blocks until
  // every rank of the group joined (the library bounds it).
  static Result<std::unique_ptr<NativeComm>> init(const hal::Device& device, int rank, int size,
                                                  const tsr_comm_unique_id& id,
                                                  std::chrono::milliseconds timeout,
                                                  FlightRecorder& recorder, Hooks hooks);
  // Fails pending stream operations (aborting the library's communicator when there are any),
  // stops the watcher, then comm_destroy.
  ~NativeComm();
  NativeComm(const NativeComm&) = delete;
  NativeComm& operator=(const NativeComm&) = delete;

  // "tessera host reference CCL", "NCCL 2.21.5"
  const char* library() const { return ccl_->library; }
  // Whether `kind` has a native form with this table (else the staged route takes it).
  bool has(OpKind kind) const;

  // Runs `d` (device buffers) to completion on the internal stream; bounded by the timeout.
  Status run(const OpDesc& d);
  // Enqueues `d` on `stream`; the Work completes when the stream's work up to it does.
  Result<Work> enqueue(const OpDesc& d, const hal::Stream& stream);

  // comm_abort, once. Thread-safe, never blocks on the library's operations.
  void abort();

 private:
  NativeComm() = default;
  struct Pending {
    OpDesc desc;  // buffers are not touched after the enqueue; kept for messages
    uint64_t seq = 0;
    uint64_t record = 0;  // flight recorder id
    std::shared_ptr<WorkState> state;
    hal::Event ready;  // recorded before the operation: the stream reached it
    std::optional<std::chrono::steady_clock::time_point> started;
    std::optional<hal::DeviceBuffer> scratch;  // scratch_bytes() of the operation
  };
  // Device scratch `d` needs on this rank: a non-root's reduce result, an in-place alltoall's
  // input. 0: none.
  size_t scratch_bytes(const OpDesc& d) const;
  // The table call for `d` on `stream`, with scratch_bytes(d) of `scratch`.
  Status issue(const OpDesc& d, const hal::Stream& stream, void* scratch);
  // "allreduce #3 (native route, <library>) on rank 1"
  std::string what(const OpDesc& d, uint64_t seq) const;
  // TSR_OK, or the library's asynchronous failure (its message names the library).
  Status async_error() const;
  // Fails the operation: aborts both communicators, records it, returns it with context.
  Status fail(const OpDesc& d, uint64_t seq, uint64_t record, Status why);
  Result<hal::Event> new_event() const;
  void watch();
  // Fails every pending stream operation with `why` (under no lock).
  void fail_pending(const Status& why);

  std::shared_ptr<hal::Backend> backend_;
  std::optional<hal::Device> device_;
  const tsr_collectives_api_v1* ccl_ = nullptr;
  tsr_comm comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_{0};
  FlightRecorder* recorder_ = nullptr;
  Hooks hooks_;
  std::atomic<bool> aborted_{false};
  std::atomic<uint64_t> seq_{0};

  std::optional<hal::Stream> internal_;       // blocking operations; created by the first one
  std::optional<hal::DeviceBuffer> scratch_;  // blocking reduce on a non-root rank

  std::mutex pending_mutex_;
  std::condition_variable pending_cv_;
  std::deque<Pending> pending_;                   // stream operations in issue order
  std::vector<hal::DeviceBuffer> spare_scratch_;  // scratch of completed stream operations
  bool stopping_ = false;
  std::thread watcher_;
};

// The native part of a communicator's creation, run by every participant of the creation (the
// members of every group and the non-members of a split) in the same order.
struct NativeSetup {
  std::string uid;                      // the communicator's, for the log
  const hal::Device* device = nullptr;  // this participant's device (null: none)
  DevicePath path = DevicePath::kAuto;  // resolved options
  bool member = false;                  // in a group (split colour >= 0)
  std::vector<int> members;             // participants of this one's group, in rank order
  int my_index = 0;                     // this participant's index in the exchange
  int rank = 0;                         // in the group
  std::chrono::milliseconds timeout{0};
  std::function<Result<std::vector<std::string>>(std::string_view)> exchange;
};

// One exchange always (every participant posts whether it can take the route, the group leaders
// their unique id), and one more after comm_init_rank when any participant could. nullptr when
// this group does not take the route. Fails when path is native and the group cannot (naming the
// rank and why), or when initialisation failed on a member under native; under auto, a group
// whose initialisation failed falls back to staging (logged as a warning).
Result<std::unique_ptr<NativeComm>> setup_native(const NativeSetup& setup, FlightRecorder& recorder,
                                                 NativeComm::Hooks hooks);

}  // namespace tessera::coll
