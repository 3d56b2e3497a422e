// The rank groups one GPT rank belongs to: its tensor-parallel group (Megatron splits, see
// params.h for which tensors split how), its data-parallel group (gradient allreduce), its
// pipeline group (the stages, pipeline.h) and, under expert parallelism (ep.h), its expert group
// (the all-to-all of MoE tokens) and expert-data-parallel group (the ranks holding the same
// experts, which sum their gradients). A null communicator means a group of one; then every
// collective below is a no-op.
//
// Collectives are queued on the caller's stream (after its earlier work; later work waits), on
// device memory, so nothing here touches a device pointer. Not thread-safe (one rank, one thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/stream.h"

namespace tessera::gpt {

using hal::DType;
using hal::ReduceOp;

// The device time of one group's collectives in a step: each is bracketed by a pair of timing
// events recorded on the stream it is queued on, summed once the step has synchronised (nothing
// here waits). The pairs come from a pool that grows to the most collectives a step has queued
// and is reused from the start every step, so a step allocates no events after the first.
// Not thread-safe (one rank, one thread).
class CommTimer {
 public:
  // Starts a step: its spans reuse the pool from the first pair.
  void begin_step() {
    used_ = 0;
    open_ = false;  // a span a failed enqueue left open
  }
  // Records the start of a span on `stream` (a pair is created only the first time the pool
  // reaches this many spans); stop() records its end on the same stream.
  Status start(const hal::Stream& stream);
  Status stop(const hal::Stream& stream);
  // The spans since begin_step, summed, in seconds; every one must be complete (call after the
  // step's synchronize). 0 when none was recorded.
  Result<double> seconds() const;
  // Spans recorded since begin_step.
  size_t spans() const { return used_; }

 private:
  std::vector<std::pair<hal::Event, hal::Event>> pool_;
  size_t used_ = 0;
  bool open_ = false;  // between start and stop
};

// Brackets `enqueue` (which queues one collective on `stream`) with `timer`'s events; just runs
// it when timer is null.
template <typename Enqueue>
Status timed_on(CommTimer* timer, const hal::Stream& stream, Enqueue&& enqueue) {
  if (!timer) return enqueue();
  TSR_RETURN_IF_ERROR(timer->start(stream));
  TSR_RETURN_IF_ERROR(enqueue());
  return timer->stop(stream);
}

struct ParallelGroups {
  std::shared_ptr<coll::Communicator> tp;  // null: tp = 1
  std::shared_ptr<coll::Communicator> dp;  // null: dp = 1
  std::shared_ptr<coll::Communicator> pp;  // null: pp = 1; rank = pipeline stage
  // The first and last stage of this pipeline (Megatron's embedding group: a tied embedding's
  // two copies sum their gradients); null where pp = 1 or this rank is a middle stage.
  std::shared_ptr<coll::Communicator> embed;
  // Expert parallelism, carved from dp: ep consecutive dp ranks share their tokens' experts
  // (rank = ep index: it holds experts [rank * E/ep, (rank+1) * E/ep)); expert_dp joins the dp/ep
  // ranks with the same ep index. Null where ep = 1 / ep = dp.
  std::shared_ptr<coll::Communicator> ep;
  std::shared_ptr<coll::Communicator> expert_dp;
  // The per-step device time of the tensor-parallel collectives (the model's tp sums, sequence-
  // parallel gathers and scatters, vocabulary-parallel loss statistics) and of the pipeline's
  // point-to-point transfers; null: not measured. GptTrainer::create sets its own (shared with
  // its model's copy of the groups) where tp > 1 / pp > 1.
  std::shared_ptr<CommTimer> tp_timer;
  std::shared_ptr<CommTimer> pp_timer;

  int tp_size() const { return tp ? tp->size() : 1; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int pp_size() const { return pp ? pp->size() : 1; }
  int pp_rank() const { return pp ? pp->rank() : 0; }
  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
};

// Splits `world` (tp * dp * pp ranks) into this rank's groups in the planner's rank order
// (runtime/planner groups.h, examples/trainer/layout.h): tp innermost, then dp, pp outermost, so
// rank = tp_index + tp * (dp_index + dp * pp_index); ep groups are consecutive runs of dp
// indices (ep index = dp_index % ep). Collective over `world`; INVALID_ARGUMENT when tp * dp * pp
// is not its size or ep does not divide dp.
Result<ParallelGroups> make_groups(const std::shared_ptr<coll::Communicator>& world, int tp, int dp,
                                   int pp = 1, int ep = 1);

// In-place allreduce of `count` elements on `comm` (nothing when comm is null or of size 1),
// ordered on `stream`. `what` names the tensor in errors. `timer` (optional): times the
// collective where one runs (CommTimer above).
inline Status allreduce_on(const std::shared_ptr<coll::Communicator>& comm,
                           const hal::Stream& stream, void* data, uint64_t count, DType dtype,
                           ReduceOp op, const char* what, CommTimer* timer = nullptr) {
  if (!comm || comm->size() == 1 || count == 0) return Status();
  return timed_on(timer, stream, [&]() -> Status {
    auto work = comm->allreduce(data, data, count, dtype, op, stream);
    if (!work.ok()) return work.status().with_context(std::string("allreduce of ") + what);
    return Status();
  });
}

// Allgather on `comm`: every rank's `count` elements of `send` land at recv + rank * count (a
// plain copy when comm is null or of size 1), ordered on `stream`. `what` names it in errors.
// `timer` (optional): times the collective where one runs, not the copy.
inline Status allgather_on(const std::shared_ptr<coll::Communicator>& comm,
                           const hal::Stream& stream, const void* send, void* recv, uint64_t count,
                           DType dtype, const char* what, CommTimer* timer = nullptr) {
  if (count == 0) return Status();
  if (!comm || comm->size() == 1) {
    return send == recv ? Status() : stream.copy(recv, send, count * hal::dtype_size(dtype));
  }
  return timed_on(timer, stream, [&]() -> Status {
    auto work = comm->allgather(send, recv, count, dtype, stream);
    if (!work.ok()) return work.status().with_context(std::string("allgather of ") + what);
    return Status();
  });
}

// Reduce-scatter on `comm`: `send` holds size * recv_count elements; rank r receives the reduction
// of every rank's elements [r * recv_count, (r+1) * recv_count) in `recv` (a plain copy when comm
// is null or of size 1), ordered on `stream`. `what` names it in errors. `timer` (optional):
// times the collective where one runs, not the copy.
inline Status reduce_scatter_on(const std::shared_ptr<coll::Communicator>& comm,
                                const hal::Stream& stream, const void* send, void* recv,
                                uint64_t recv_count, DType dtype, ReduceOp op, const char* what,
                                CommTimer* timer = nullptr) {
  if (recv_count == 0) return Status();
  if (!comm || comm->size() == 1) {
    return send == recv ? Status() : stream.copy(recv, send, recv_count * hal::dtype_size(dtype));
  }
  return timed_on(timer, stream, [&]() -> Status {
    auto work = comm->reduce_scatter(send, recv, recv_count, dtype, op, stream);
    if (!work.ok()) return work.status().with_context(std::string("reduce-scatter of ") + what);
    return Status();
  });
}

// All-to-all of `count` elements per peer on `comm` (send: [peers][count], recv likewise; a
// plain copy when comm is null or of size 1), ordered on `stream`. `what` names it in errors.
inline Status alltoall_on(const std::shared_ptr<coll::Communicator>& comm,
                          const hal::Stream& stream, const void* send, void* recv, uint64_t count,
                          DType dtype, const char* what) {
  if (count == 0) return Status();
  if (!comm || comm->size() == 1) return stream.copy(recv, send, count * hal::dtype_size(dtype));
  auto work = comm->alltoall(send, recv, count, dtype, stream);
  if (!work.ok()) return work.status().with_context(std::string("all-to-all of ") + what);
  return Status();
}

}  // namespace tessera::gpt
