// The communicator's machinery: membership, transports, the progress loop every algorithm step
// runs in, liveness of local peers, the tuner, the flight recorder and the queue of operations
// submitted on streams. Communicator (communicator.cc) validates arguments and forwards here.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algo/algo.h"
#include "flight_recorder.h"
#include "membership.h"
#include "memory_kind.h"
#include "native_route.h"
#include "peer_liveness.h"
#include "staged.h"
#include "tessera/coll/communicator.h"
#include "transport/shm_transport.h"
#include "tuner.h"

namespace tessera::coll {

// State shared between a Work handle, the stream callback and the proxy thread.
class WorkState {
 public:
  void mark_ready(Status upstream);
  // Waits until the stream reached the operation. Returns early with the status `stop()` gives
  // (checked every 10 ms: an abort, posted here or by a peer), or DEADLINE_EXCEEDED after
  // `timeout`.
  Status wait_ready(std::chrono::milliseconds timeout, const std::function<Status()>& stop);
  void finish(Status status);
  Status wait(std::chrono::milliseconds timeout);
  bool done();
  hal::Event event;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ready_ = false;
  bool done_ = false;
  Status upstream_;
  Status status_;
};

class CommImpl {
 public:
  // An allgather over the ranks taking part in a creation (the parent communicator or the
  // bootstrap's job): every one of them calls it the same number of times, in the same order.
  using Exchange = std::function<Result<std::vector<std::string>>(std::string_view mine)>;

  struct CreateArgs {
    std::string uid;  // unique per communicator in the job, the same on every member
    std::shared_ptr<Bootstrap> bootstrap;
    std::optional<hal::Device> device;
    CommOptions options;  // resolved (environment applied)
    Exchange exchange;
    int64_t color = 0;  // < 0: not a member (takes part in the exchanges only)
    int64_t key = 0;
    int world_rank = 0;
  };
  // Collective over the exchange's ranks. nullptr for a non-member.
  static Result<std::unique_ptr<CommImpl>> create(CreateArgs args);
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int num_hosts() const { return num_hosts_; }
  int world_rank(int rank) const { return world_ranks_[size_t(rank)]; }
  const std::optional<hal::Device>& device() const { return device_; }
  const Tuner& tuner() const { return *tuner_; }
  // What buffers are checked against (memory_kind.h): the communicator's device, else the
  // stream's (stream forms of a communicator created without a device), else none.
  MemoryTarget memory_target(const hal::Stream* stream) const;
  // The route `d` takes (memory_kind.h). The one place the choice is made.
  DeviceRoute route_for(const OpDesc& d) const;

  // Runs an operation now, on the calling thread, after the queued ones.
  Status execute(const OpDesc& d);
  // Queues an operation on a stream.
  Result<Work> enqueue(OpDesc d, const hal::Stream& stream);

  Result<std::unique_ptr<CommImpl>> split(int64_t color, int64_t key);

  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  Status abort_status() const;
  std::string flight_record() const { return recorder_.dump(rank_); }

  // Building blocks of the hierarchical algorithms, run as operations of this communicator.
  Status reduce_scatter_blocks(void* data, const std::vector<size_t>& counts,
                               const std::vector<size_t>& displs, DType dtype, ReduceOp op);
  Status allreduce_inline(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  Status allgatherv_inline(void* data, const std::vector<size_t>& counts,
                           const std::vector<size_t>& displs, DType dtype);
  // Every rank's bytes, in rank order (an allgather of sizes, then of the bytes).
  Result<std::vector<std::string>> allgather_bytes(std::string_view mine);

  // One algorithm step (AlgoContext::run).
  Status run(std::span<P2P> ops, uint32_t step);
  void* scratch(size_t bytes, int slot);
  CommImpl* local_comm() { return local_.get(); }
  CommImpl* cross_comm() { return cross_.get(); }

 private:
  CommImpl() = default;
  Status setup(const CreateArgs& args, const std::vector<std::string>& cards, int my_index);
  // setup()'s steps, in order (comm_impl.cc names the exchanges of each).
  Status adopt_options(const CreateArgs& args);
  void adopt_membership(const Membership& m);
  Status setup_shared_memory(const CreateArgs& args, const Membership& m);
  Status setup_single_copy(const CreateArgs& args, const Membership& m);
  Status setup_ucx(const CreateArgs& args, const Membership& m);
  void watch_local_peers(const Membership& m);
  Status setup_tuner_and_hierarchy(const Membership& m);
  void log_creation() const;
  Status creation_barrier(const CreateArgs& args, const Status& mine, const char* what);
  bool uses_shared_memory(const Membership& m) const;
  // The native route's part of the creation (native_route.cc): collective over the participants.
  Status init_native(const CreateArgs& args, const std::vector<int>& members, int my_index,
                     bool member);
  // Under exec_mutex_: the route, chunking, the staged pipeline, then run_algorithm per piece.
  Status execute_now(const OpDesc& d);
  // One operation on host-addressable buffers: sequence number, tuner, algorithm, recorder.
  Status run_algorithm(const OpDesc& d, DeviceRoute route);
  Status run_staged(const OpDesc& d);
  // Stream operations: the host-signal form (comm_exec.cc) and the callback fallback.
  Result<Work> enqueue_signalled(OpDesc d, const hal::Stream& stream);
  Result<Work> enqueue_with_callback(OpDesc d, const hal::Stream& stream);
  // Raises every signal to the last value handed out (nothing may wait on a stream forever).
  void release_signals();
  // Polls `ready` until the stream reached the operation: bounded by the timeout, released by an
  // abort. A failure of the stream's earlier work lands in *upstream (the operation still runs,
  // so the ranks stay in step).
  Status wait_ready_event(const hal::Event& ready, Status* upstream);
  // An abort posted here or by a peer (a peer's is adopted), else OK.
  Status stop_status();
  Transport* transport_for(int peer);
  // Marks local peers whose process exited in dead_ (peer_liveness.h).
  void update_dead_peers();
  // "rank P", with its world rank when the two differ (for messages).
  std::string peer_name(int peer) const;
  // The launcher's notice that the job failed (peer_liveness.h), as this rank's error.
  Status job_failed(const std::string& why, const Status& seen_here) const;
  Status fail(std::span<P2P> ops, Status status);
  void proxy_main();
  void drain();

  std::string uid_;
  std::shared_ptr<Bootstrap> bootstrap_;
  std::optional<hal::Device> device_;
  CommOptions options_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, num_hosts_ = 1;
  std::vector<int> world_ranks_;
  std::vector<int> host_of_;                // host index of each rank
  std::vector<std::string> hosts_;          // host id of each rank
  std::vector<ProcessIdentity> processes_;  // per rank, from the creation cards
  std::unique_ptr<PeerLiveness> liveness_;  // watches the local peers
  std::vector<bool> dead_;                  // per rank: its process exited
  JobAbortNotice notice_;                   // the launcher's word that the job failed
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<Transport> ucx_;
  bool force_ucx_ = false;
  uint64_t spin_limit_ = 64;  // idle iterations spent spinning before yielding
  std::unique_ptr<Tuner> tuner_;
  std::unique_ptr<CommImpl> local_, cross_;
  FlightRecorder recorder_;
  uint64_t seq_ = 0;
  // Memory and routes (memory_kind.h, staged.h).
  MemoryMode memory_mode_ = MemoryMode::kAuto;
  DevicePath device_path_ = DevicePath::kAuto;
  size_t stage_chunk_ = 4 << 20;
  // allreduce/reduce/broadcast are cut into chunk operations on every route (so that a rank
  // staging device memory and a rank passing host memory run the same sequence of operations):
  // set when this communicator's device memory is staged.
  bool chunk_all_ = false;
  std::unique_ptr<Stager> stager_;  // created by the first staged operation
  std::array<std::array<bool, 3>, kNumOpKinds> route_logged_{};
  // The tuner's last choice per operation (under exec_mutex_): same-sized loops skip the model.
  struct ChoiceMemo {
    size_t bytes = SIZE_MAX;
    const AlgoInfo* info = nullptr;
  };
  std::array<ChoiceMemo, kNumOpKinds> choice_memo_{};
  std::vector<uint64_t> send_seq_, recv_seq_;  // point-to-point sequence per peer
  uint64_t split_count_ = 0;
  std::vector<std::unique_ptr<char[]>> scratch_{2};
  std::vector<size_t> scratch_bytes_{0, 0};

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;

  // A host signal per (backend, device) of the streams used; values are handed out in queue
  // order, so raising one releases exactly the operations up to it.
  struct StreamSignal {
    const hal::Backend* backend = nullptr;
    int32_t device = -1;
    hal::HostSignal signal;
    uint64_t issued = 0;  // under queue_mutex_
  };
  // Operations queued on streams run on the proxy thread, in order.
  struct Task {
    OpDesc desc;
    std::shared_ptr<WorkState> state;
    // Host-signal form: the stream reached the operation once `ready` completes; the proxy
    // raises `signal` to `value` when the operation ended (however it ended).
    std::optional<hal::Event> ready;
    StreamSignal* signal = nullptr;
    uint64_t value = 0;
    Status refused;  // queuing failed half-way: finish with this, run nothing, still raise
  };
  std::vector<std::unique_ptr<StreamSignal>> signals_;  // under queue_mutex_
  bool stream_callbacks_ = false;  // TESSERA_COLL_STREAM_CALLBACKS=1: the fallback, for tests
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool proxy_busy_ = false;
  bool proxy_at_gate_ = false;  // the proxy waits for a stream to reach its operation
  bool stopping_ = false;
  std::thread proxy_;
  std::mutex exec_mutex_;  // one operation at a time (proxy vs. blocking callers)
  // The native route (native_route.h), when this group takes it. Last: destroyed first, while
  // everything its hooks reach is still alive.
  std::unique_ptr<NativeComm> native_;
};

}  // namespace tessera::coll
