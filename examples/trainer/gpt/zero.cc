#include "zero.h"

#include <algorithm>
#include <string>

namespace tessera::gpt {

Result<ZeroPlan> make_zero_plan(int level, uint64_t total, int dp_rank, int dp_size) {
  if (level == 3) {
    return invalid_argument(
        "zero=3: not supported by the GPT trainer yet (parameters would have to be gathered "
        "per block inside GptModel)");
  }
  if (level < 0 || level > 3) {
    return invalid_argument("zero=" + std::to_string(level) + ": must be 0, 1 or 2");
  }
  ZeroPlan plan;
  plan.level = level;
  if (level == 0) return plan;
  const uint64_t dp = uint64_t(dp_size);
  plan.shard = std::max<uint64_t>((total + dp - 1) / dp, 1);
  plan.begin = plan.shard * uint64_t(dp_rank);
  plan.padded = plan.shard * dp;
  return plan;
}

Status reduce_gradients(const ZeroPlan& plan, const ParallelGroups& groups,
                        const hal::Stream& stream, const Params& params) {
  const auto& dp = groups.dp;
  if (!dp || dp->size() == 1) return Status();
  if (plan.level == 1) {
    return allreduce_on(dp, stream, params.grad_base(), plan.padded, DType::kF32, ReduceOp::kSum,
                        "gradients (zero=1)");
  }
  auto work = dp->reduce_scatter(params.grad_base(), params.grad_base() + plan.begin, plan.shard,
                                 DType::kF32, ReduceOp::kSum, stream);
  if (!work.ok()) return work.status().with_context("reduce-scatter of gradients (zero=2)");
  return Status();
}

Status gather_work(const ZeroPlan& plan, const ParallelGroups& groups, const hal::Stream& stream,
                   const Params& params) {
  const auto& dp = groups.dp;
  if (!dp || dp->size() == 1) return Status();
  char* base = static_cast<char*>(params.work_base());
  const size_t elem = hal::dtype_size(params.act());
  auto work = dp->allgather(base + plan.begin * elem, base, plan.shard, params.act(), stream);
  if (!work.ok()) return work.status().with_context("allgather of the working weights (ZeRO)");
  return Status();
}

Result<std::vector<float>> gather_master(const ZeroPlan& plan, const ParallelGroups& groups,
                                         const hal::Device& device, const hal::Stream& stream,
                                         const Params& params) {
  const uint64_t total = params.layout().total;
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer whole, device.allocate(plan.padded * sizeof(float)));
  float* base = static_cast<float*>(whole.data());
  // In sharded mode master_base() is the rank's shard.
  TSR_RETURN_IF_ERROR(
      stream.copy(base + plan.begin, params.master_base(), plan.shard * sizeof(float)));
  if (groups.dp && groups.dp->size() > 1) {
    auto work = groups.dp->allgather(base + plan.begin, base, plan.shard, DType::kF32, stream);
    if (!work.ok()) return work.status().with_context("allgather of the master weights (ZeRO)");
  }
  TSR_ASSIGN_OR_RETURN(std::vector<float> out, download<float>(stream, base, total));
  return out;
}

}  // namespace tessera::gpt
