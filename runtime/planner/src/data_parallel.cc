// Data-parallel and ZeRO traffic (data_parallel.h).
#include "data_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::plan::dp {

Bucketed bucketed(const Group& g, double bytes_per_param, double bucket_params, Collective kind) {
  Bucketed out;
  if (g.ranks <= 1 || g.params <= 0) return out;
  const double buckets = std::max(1.0, std::ceil(g.params / bucket_params));
  const double bytes = g.params * bytes_per_param;
  auto time = [&](double b) {
    return kind == Collective::kAllReduce ? allreduce_time(b, g.ranks, g.path)
                                          : allgather_time(b, g.ranks, g.path);
  };
  const double latency = kind == Collective::kAllReduce ? allreduce_latency(g.ranks, g.path)
                                                        : ring_latency(g.ranks, g.path);
  out.total_s = time(bytes) + (buckets - 1) * latency;
  out.one_s = time(bytes / buckets);
  return out;
}

double reduction_exposed(const Group& dense, const Group& expert, int zero, double grad_bytes,
                         double bucket_params, double backward_window, double forward_window) {
  const Collective reduce = zero >= 1 ? Collective::kAllGather : Collective::kAllReduce;
  const Bucketed rd = bucketed(dense, grad_bytes, bucket_params, reduce);
  const Bucketed re = bucketed(expert, grad_bytes, bucket_params, reduce);
  // The last bucket of each group starts when the backward ends; the rest hides if it fits.
  double exposed =
      std::max(rd.one_s + re.one_s, rd.total_s + re.total_s - std::max(0.0, backward_window));
  if (zero == 1 || zero == 2) {
    // The updated 16-bit weights are all-gathered while the next step's forward starts; the first
    // bucket is needed before it can.
    const Bucketed gd = bucketed(dense, 2, bucket_params, Collective::kAllGather);
    const Bucketed ge = bucketed(expert, 2, bucket_params, Collective::kAllGather);
    exposed +=
        std::max(gd.one_s + ge.one_s, gd.total_s + ge.total_s - std::max(0.0, forward_window));
  }
  return exposed;
}

double zero3_exposed_per_microbatch(const ShapeCosts& costs, int first, int end, bool with_pre,
                                    bool with_post, const Group& dense, const Group& expert,
                                    double grad_bytes, bool full_recompute,
                                    bool backward_gathers_wait) {
  // The device's modules in forward order: compute and the weights' gather / gradients' reduce.
  struct Module {
    double fwd, bwd, gather, reduce;
  };
  auto module = [&](const BlockCost& b) {
    const double gather = allgather_time(2 * b.dense_params, dense.ranks, dense.path) +
                          allgather_time(2 * b.expert_params, expert.ranks, expert.path);
    const double reduce = allgather_time(grad_bytes * b.dense_params, dense.ranks, dense.path) +
                          allgather_time(grad_bytes * b.expert_params, expert.ranks, expert.path);
    return Module{b.fwd_s + 0.5 * b.tp_comm_s, b.bwd_s + 0.5 * b.tp_comm_s, gather, reduce};
  };
  std::vector<Module> mods;
  mods.reserve(static_cast<size_t>(end - first) + 2);
  if (with_pre) mods.push_back(module(costs.pre));
  for (int j = first; j < end; ++j) mods.push_back(module(costs.blocks[static_cast<size_t>(j)]));
  if (with_post) mods.push_back(module(costs.post));
  if (mods.empty()) return 0;
  const double regather = full_recompute ? 2 : 1;
  const size_t n = mods.size();
  double busy = 0, span = mods[0].gather;  // forward: the first gather waits
  for (size_t j = 0; j < n; ++j) {
    const double next = j + 1 < n ? mods[j + 1].gather : 0;
    span += std::max(mods[j].fwd, next);
    busy += mods[j].fwd;
  }
  // Backward, last module first. With prefetch the last module's gather waits, then each
  // module's backward runs while the next one's weights arrive and the previous one's gradients
  // leave (one link, both in turn); without, each module waits for its own gathers and computes
  // while the previous one's gradients leave.
  if (!backward_gathers_wait) span += regather * mods[n - 1].gather;
  for (size_t r = 0; r < n; ++r) {
    const size_t j = n - 1 - r;
    const double prev = r > 0 ? mods[j + 1].reduce : 0;
    if (backward_gathers_wait) {
      span += regather * mods[j].gather + std::max(mods[j].bwd, prev);
    } else {
      const double next = j > 0 ? regather * mods[j - 1].gather : 0;
      span += std::max(mods[j].bwd, next + prev);
    }
    busy += mods[j].bwd;
  }
  span += mods[0].reduce;  // the last reduce-scatter waits
  return std::max(0.0, span - busy);
}

}  // namespace tessera::plan::dp
