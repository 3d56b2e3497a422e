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

#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/stream.h"

namespace tessera::gpt {

using hal::DType;
using hal::ReduceOp;

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
// ordered on `stream`. `what` names the tensor in errors.
inline Status allreduce_on(const std::shared_ptr<coll::Communicator>& comm,
                           const hal::Stream& stream, void* data, uint64_t count, DType dtype,
                           ReduceOp op, const char* what) {
  if (!comm || comm->size() == 1 || count == 0) return Status();
  auto work = comm->allreduce(data, data, count, dtype, op, stream);
  if (!work.ok()) return work.status().with_context(std::string("allreduce of ") + what);
  return Status();
}

// Allgather on `comm`: every rank's `count` elements of `send` land at recv + rank * count (a
// plain copy when comm is null or of size 1), ordered on `stream`. `what` names it in errors.
inline Status allgather_on(const std::shared_ptr<coll::Communicator>& comm,
                           const hal::Stream& stream, const void* send, void* recv, uint64_t count,
                           DType dtype, const char* what) {
  if (count == 0) return Status();
  if (!comm || comm->size() == 1) {
    return send == recv ? Status() : stream.copy(recv, send, count * hal::dtype_size(dtype));
  }
  auto work = comm->allgather(send, recv, count, dtype, stream);
  if (!work.ok()) return work.status().with_context(std::string("allgather of ") + what);
  return Status();
}

// Reduce-scatter on `comm`: `send` holds size * recv_count elements; rank r receives the reduction
// of every rank's elements [r * recv_count, (r+1) * recv_count) in `recv` (a plain copy when comm
// is null or of size 1), ordered on `stream`. `what` names it in errors.
inline Status reduce_scatter_on(const std::shared_ptr<coll::Communicator>& comm,
                                const hal::Stream& stream, const void* send, void* recv,
                                uint64_t recv_count, DType dtype, ReduceOp op, const char* what) {
  if (recv_count == 0) return Status();
  if (!comm || comm->size() == 1) {
    return send == recv ? Status() : stream.copy(recv, send, recv_count * hal::dtype_size(dtype));
  }
  auto work = comm->reduce_scatter(send, recv, recv_count, dtype, op, stream);
  if (!work.ok()) return work.status().with_context(std::string("reduce-scatter of ") + what);
  return Status();
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
