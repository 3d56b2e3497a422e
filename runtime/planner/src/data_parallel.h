// Data-parallel and ZeRO traffic as it runs (internal to the planner): gradient reduction in
// buckets hidden under the backward except the last bucket, ZeRO-1/2's parameter all-gather hidden
// under the next step's first forward except the first bucket, and ZeRO-3's per-block gathers
// with one block of prefetch. Seconds; thread-safe (pure functions of values).
#pragma once

#include <cstdint>

#include "tessera/plan/cost_model.h"

namespace tessera::plan::dp {

// One set of parameters reduced over one group: the dense ones over dp x cp ranks, the experts
// over dp x cp / ep.
struct Group {
  double params = 0;  // on this device, after TP/EP sharding
  int64_t ranks = 1;
  LinkPath path;
};

// What one collective over a group costs when split into buckets of `bucket_params`.
struct Bucketed {
  double total_s = 0;  // every bucket, latencies included
  double one_s = 0;    // the last (or first) bucket alone: what cannot overlap
};
// kind: all-reduce (ZeRO 0) or reduce-scatter/all-gather (same cost, hardware.md).
enum class Collective { kAllReduce, kAllGather };
Bucketed bucketed(const Group& g, double bytes_per_param, double bucket_params, Collective kind);

// Exposed seconds of one stage's gradient reduction (and ZeRO-1/2's parameter all-gather):
// `backward_window`: backward seconds the reduction hides under (the last micro-batch's backward
// and the drain after it); `forward_window`: forward seconds the next step's all-gather hides
// under (the first micro-batch's forward and the fill before it).
double reduction_exposed(const Group& dense, const Group& expert, int zero, double grad_bytes,
                         double bucket_params, double backward_window, double forward_window);

// Exposed seconds per micro-batch of ZeRO-3 on a device holding blocks [first, end) of `costs`
// (plus the pre/post groups when `with_pre` / `with_post`): every block's weights gathered before
// its forward and again before its backward (twice under full recomputation), its gradients
// reduce-scattered after its backward; each collective runs while the previous block computes
// (one block of prefetch), and the first gather and the last reduce-scatter wait.
// `backward_gathers_wait`: the backward's gathers of a block start when its backward does (no
// prefetch there), and only the previous block's reduce-scatter overlaps its compute.
double zero3_exposed_per_microbatch(const ShapeCosts& costs, int first, int end, bool with_pre,
                                    bool with_post, const Group& dense, const Group& expert,
                                    double grad_bytes, bool full_recompute,
                                    bool backward_gathers_wait);

}  // namespace tessera::plan::dp
