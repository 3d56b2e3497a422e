// The exact search. For each valid candidate: per-block costs (cached per shape), a memory lower
// bound (first stage with only block 0, last stage with only the last block, the model's state
// spread evenly), then the fastest partition ignoring memory (cached per shape and pp: memory
// does not move it), and only if that one does not fit, the memory-constrained DP.
#include "tessera/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

#include "rules.h"
#include "tessera/plan/partition.h"
#include "tessera/plan/stage_model.h"

namespace tessera::plan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kGiB = 1073741824.0;

// Divisors of n up to cap, ascending, in O(sqrt n): a global batch of millions must not cost
// millions of steps per candidate prefix. n is bounded by the workload and cluster limits, so
// every divisor fits an int.
std::vector<int> divisors(int64_t n, int64_t cap) {
  std::vector<int> low, high;
  for (int64_t d = 1; d * d <= n && d <= cap; ++d) {
    if (n % d != 0) continue;
    low.push_back(static_cast<int>(d));
    if (n / d != d && n / d <= cap) high.push_back(static_cast<int>(n / d));
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

template <typename T>
bool allowed(const std::optional<T>& fixed, T value) {
  return !fixed.has_value() || *fixed == value;
}

// Identical blocks: stage i holding n of them takes e_i + n t seconds (e_i: embedding/head and
// transfers) and a memory linear in n, so the min-max partition is the smallest bottleneck
// T = e_c + n t (over the <= 3 distinct e_c) for which the stages' capacities
// min(mem cap_i, (T - e_i) / t) add up to the blocks. Binary search per class: exact and
// O(p log L) instead of the DP's O(L^2). Returns counts or empty when nothing fits.
std::vector<int> uniform_partition(const StageModel& sm, double block_time, int p, int blocks,
                                   double budget) {
  std::vector<double> e(static_cast<size_t>(p));
  std::vector<int> cap(static_cast<size_t>(p), blocks);
  for (int i = 0; i < p; ++i) {
    e[i] = sm.stage_time(i, 0, 0);
    if (budget == kInf) continue;
    const double m1 = sm.stage_memory(i, 0, 1);
    if (m1 > budget) return {};
    const double slope = blocks > 1 ? sm.stage_memory(i, 0, 2) - m1 : 0;
    if (slope > 0) {
      cap[i] = static_cast<int>(std::min<double>(blocks, 1 + std::floor((budget - m1) / slope)));
    }
  }
  auto take = [&](int i, double t) {
    const double n = block_time > 0 ? std::floor((t - e[i]) / block_time + 1e-9) : blocks;
    return std::min<int>(cap[i], static_cast<int>(std::clamp<double>(n, 0, blocks)));
  };
  auto fits = [&](double t) {
    int64_t sum = 0;
    for (int i = 0; i < p; ++i) {
      const int n = take(i, t);
      if (n < 1) return false;
      sum += n;
    }
    return sum >= blocks;
  };
  double best = kInf;
  for (int i = 0; i < p; ++i) {
    if (i > 0 && i < p - 1 && i != 1) continue;  // middle stages share one e
    int lo = 1, hi = blocks;
    if (!fits(e[i] + hi * block_time)) continue;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (fits(e[i] + mid * block_time))
        hi = mid;
      else
        lo = mid + 1;
    }
    best = std::min(best, e[i] + lo * block_time);
  }
  if (best == kInf) return {};
  std::vector<int> counts(static_cast<size_t>(p));
  int excess = -blocks;
  for (int i = 0; i < p; ++i) excess += counts[i] = take(i, best);
  // Give back the surplus from the first stages, which keep the most micro-batches in flight.
  for (int i = 0; i < p && excess > 0; ++i) {
    const int give = std::min(excess, counts[i] - 1);
    counts[i] -= give;
    excess -= give;
  }
  return counts;
}

using ShapeTuple = std::tuple<int, int, int, int, bool, int>;
ShapeTuple tuple_of(const ShapeKey& k) {
  return {k.tp, k.cp, k.ep, k.mbs, k.sp, static_cast<int>(k.recompute)};
}

class Searcher {
 public:
  Searcher(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
           const SearchConstraints& c, const CostOptions& o)
      : model_(model),
        cluster_(cluster),
        w_(w),
        c_(c),
        o_(o),
        context_{model, cluster, w, o},
        flops_(step_flops(model, w)) {}

  // Calls visit(plan) for every valid combination, in a fixed order, until visit returns false.
  // The loops generate sizes (divisors of what is left, within the search's caps) and the
  // constraints' fixed values; validity is the rule table's (rules.h), checked at the loop of
  // the last dimension each rule reads.
  template <typename Visit>
  void enumerate(Visit&& visit) {
    const int64_t n = cluster_.devices();
    const int64_t tp_cap = o_.allow_tp_across_hosts ? n : cluster_.devices_per_host;
    const rules::Context& ctx = context_;
    Plan p;
    for (int tp : divisors(n, tp_cap)) {
      p.tp = tp;
      if (!allowed(c_.tp, tp) || !rules_.holds(rules::kTp, ctx, p)) continue;
      for (int cp : divisors(n / tp, c_.cp ? *c_.cp : c_.max_cp)) {
        p.cp = cp;
        if (!allowed(c_.cp, cp) || !rules_.holds(rules::kCp, ctx, p)) continue;
        for (int pp : divisors(n / tp / cp, model_.num_blocks)) {
          p.pp = pp;
          if (!allowed(c_.pp, pp) || !rules_.holds(rules::kPp, ctx, p)) continue;
          p.dp = static_cast<int>(n / tp / cp / pp);
          if (!allowed(c_.dp, p.dp) || !rules_.holds(rules::kDp, ctx, p)) continue;
          for (int ep : divisors(p.dp, model_.experts > 0 ? model_.experts : 1)) {
            p.ep = ep;
            if (!allowed(c_.ep, ep) || !rules_.holds(rules::kEp, ctx, p)) continue;
            for (int mbs : divisors(w_.global_batch / p.dp, w_.global_batch)) {
              p.mbs = mbs;
              if (!allowed(c_.mbs, mbs) || !rules_.holds(rules::kMbs, ctx, p)) continue;
              p.num_microbatches = w_.global_batch / p.dp / mbs;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                p.sp = sp == 1;
                if (!allowed(c_.sp, p.sp) || !rules_.holds(rules::kSp, ctx, p)) continue;
                for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
                  p.recompute = rc;
                  if (!allowed(c_.recompute, rc)) continue;
                  // With fused attention selective recomputation equals none: skip the twin.
                  if (rc == Recompute::kSelective && o_.flash_attention && !c_.recompute) continue;
                  for (int vp = 1; vp <= c_.max_vp || (c_.vp && vp <= *c_.vp); ++vp) {
                    p.vp = vp;
                    if (!allowed(c_.vp, vp) || !rules_.holds(rules::kVp, ctx, p)) continue;
                    for (int zero = 0; zero <= 3; ++zero) {
                      p.zero = zero;
                      if (!allowed(c_.zero, zero) || !rules_.holds(rules::kZero, ctx, p)) continue;
                      if (!visit(p)) return;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }

  // The main pass. `report` mode (after a pass where nothing fit) looks only for the plan that
  // needs the least memory, evaluating pruned candidates whose bound is below the best so far.
  void consider(const Plan& plan, bool report) {
    if (!report) ++result_.candidates;
    const ShapeKey key{plan.tp, plan.cp, plan.ep, plan.mbs, plan.sp, plan.recompute};
    const ShapeCosts& costs = shape(key);
    const StageModel sm(model_, cluster_, w_, plan, costs, flops_, o_);
    const int blocks = model_.num_blocks, p = plan.pp;
    const double budget = sm.budget_bytes();
    if (plan.vp == 1 && (c_.prune || report)) {
      const double lb = lower_bound(sm, p, blocks);
      const double cut = report ? smallest_bytes_ : budget;
      if (lb > cut) return;
    }
    std::vector<int> counts;
    if (plan.vp > 1) {
      counts.assign(static_cast<size_t>(p), blocks / p);
    } else {
      counts = time_partition(key, p, sm, costs);
    }
    const double mem = peak_memory(sm, counts);
    if (!report) ++result_.evaluated;
    if (mem > budget && plan.vp == 1 && !report) {
      std::vector<int> fitting =
          costs.homogeneous
              ? uniform_partition(sm, costs.blocks[0].total_s(), p, blocks, budget)
              : partition_min_max(blocks, p, [&](int s, int a, int b) {
                  return sm.stage_memory(s, a, b) <= budget ? sm.stage_time(s, a, b) : kInf;
                });
      if (!fitting.empty()) counts = std::move(fitting);
    }
    if (!report && peak_memory(sm, counts) <= budget) {
      ++result_.feasible;
      // The pipeline alone already reaches the slowest plan kept: keep() would drop it.
      if (full() && sm.pipeline_seconds(counts) >= result_.plans.back().step_time_s) return;
      keep(sm.estimate(counts));
      return;
    }
    if (result_.feasible > 0) return;
    // Nothing fits yet: remember the candidate that comes closest.
    if (plan.vp == 1 && lower_bound(sm, p, blocks) >= smallest_bytes_) return;
    if (plan.vp == 1) {
      counts = partition_min_max(blocks, p,
                                 [&](int s, int a, int b) { return sm.stage_memory(s, a, b); });
    }
    const double least = peak_memory(sm, counts);
    if (least < smallest_bytes_) {
      smallest_bytes_ = least;
      result_.smallest = sm.estimate(counts);
    }
  }

  // Estimated cost of the search in nanoseconds (search.h, kMaxSearchWork), stopping once over
  // `limit`: ~3 us a candidate, its stages, and the partition DP's blocks^2 when blocks differ
  // (measured on the CI machine). Returns {work, candidates counted}.
  std::pair<double, int64_t> estimate_work(double limit) {
    const ShapeKey base{1, 1, 1, 1, false, Recompute::kNone};
    const bool uniform = compute_shape_costs(model_, cluster_, w_, base, o_).homogeneous;
    const double blocks = model_.num_blocks;
    double work = 0;
    int64_t count = 0;
    enumerate([&](const Plan& p) {
      const bool dp_partition = !uniform && p.pp > 1 && p.vp == 1;  // vp > 1: equal stages
      work += 3000 + 100.0 * p.pp + (dp_partition ? 1.5 * blocks * blocks : 0);
      ++count;
      return work <= limit;
    });
    return {work, count};
  }

  SearchResult& result() { return result_; }

 private:
  const ShapeCosts& shape(const ShapeKey& key) {
    auto [it, inserted] = shapes_.try_emplace(tuple_of(key));
    if (inserted) it->second = compute_shape_costs(model_, cluster_, w_, key, o_);
    return it->second;
  }

  // Fastest partition ignoring memory; p2p and DP terms are equal for every stage, so it
  // depends only on the shape and pp.
  const std::vector<int>& time_partition(const ShapeKey& key, int p, const StageModel& sm,
                                         const ShapeCosts& costs) {
    auto [it, inserted] = partitions_.try_emplace(std::tuple_cat(tuple_of(key), std::tuple{p}));
    if (inserted && costs.homogeneous) {
      it->second = uniform_partition(sm, costs.blocks[0].total_s(), p, model_.num_blocks, kInf);
    } else if (inserted) {
      it->second = partition_min_max(model_.num_blocks, p,
                                     [&](int s, int a, int b) { return sm.stage_time(s, a, b); });
    }
    return it->second;
  }

  static double lower_bound(const StageModel& sm, int p, int blocks) {
    double lb = sm.stage_memory(0, 0, 1);
    if (p > 1) {
      lb = std::max(lb, sm.stage_memory(p - 1, blocks - 1, blocks));
      // Every stage keeps at least one micro-batch and its share of the state: the last stage
      // holding everything (one in flight, no pre group) spread over p stages.
      MemoryBreakdown all;
      sm.stage_memory(p - 1, 0, blocks, &all);
      lb = std::max(lb, (all.total() - all.transient) / p);
    }
    return lb;
  }

  static double peak_memory(const StageModel& sm, const std::vector<int>& counts) {
    if (counts.empty()) return kInf;
    double peak = 0;
    int first = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      peak = std::max(peak, sm.stage_memory(static_cast<int>(i), first, first + counts[i]));
      first += counts[i];
    }
    return peak;
  }

  bool full() const { return result_.plans.size() >= static_cast<size_t>(std::max(1, c_.top)); }

  void keep(Estimate e) {
    auto& plans = result_.plans;
    const size_t top = static_cast<size_t>(std::max(1, c_.top));
    if (plans.size() >= top && e.step_time_s >= plans.back().step_time_s) return;
    auto pos = std::upper_bound(plans.begin(), plans.end(), e.step_time_s,
                                [](double t, const Estimate& x) { return t < x.step_time_s; });
    plans.insert(pos, std::move(e));
    if (plans.size() > top) plans.pop_back();
  }

  const ir::Model& model_;
  const ClusterSpec& cluster_;
  const Workload& w_;
  const SearchConstraints& c_;
  const CostOptions& o_;
  const rules::Context context_;
  const rules::ByLevel rules_;
  StepFlops flops_;
  std::map<ShapeTuple, ShapeCosts> shapes_;
  std::map<std::tuple<int, int, int, int, bool, int, int>, std::vector<int>> partitions_;
  SearchResult result_;
  double smallest_bytes_ = kInf;
};

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / kGiB);
  return buf;
}

std::string num(int64_t v) {
  return std::to_string(v);
}

// A fixed value that no plan can satisfy gets its own reason (the first rule it breaks, rules.h)
// before the search says "none".
Status check_fixed(const ir::Model& model, const ClusterSpec& cluster, const Workload& w,
                   const SearchConstraints& c, const CostOptions& o) {
  Plan fixed;
  uint16_t known = 0;
  auto take = [&](const auto& value, auto& field, rules::Dim dim) {
    if (!value) return;
    field = *value;
    known |= dim;
  };
  take(c.tp, fixed.tp, rules::kTp);
  take(c.cp, fixed.cp, rules::kCp);
  take(c.pp, fixed.pp, rules::kPp);
  take(c.dp, fixed.dp, rules::kDp);
  take(c.ep, fixed.ep, rules::kEp);
  take(c.mbs, fixed.mbs, rules::kMbs);
  take(c.sp, fixed.sp, rules::kSp);
  take(c.recompute, fixed.recompute, rules::kRecompute);
  take(c.vp, fixed.vp, rules::kVp);
  take(c.zero, fixed.zero, rules::kZero);
  return rules::check({model, cluster, w, o}, fixed, known);
}

Status check_workload(const Workload& w) {
  if (w.global_batch < 1 || w.global_batch > kMaxGlobalBatch) {
    return invalid_argument("global batch " + num(w.global_batch) + " outside 1.." +
                            num(kMaxGlobalBatch) + " sequences");
  }
  if (w.seq_len < 1 || w.seq_len > kMaxSeqLen) {
    return invalid_argument("sequence length " + num(w.seq_len) + " outside 1.." + num(kMaxSeqLen) +
                            " tokens");
  }
  return Status();
}

// Refuses a search that would take long (search.h) before doing any of it, saying what narrows
// it: fixed values, or identical layers written as one "repeat" group (then the partition is a
// binary search instead of the blocks^2 DP).
Status check_work(const ir::Model& model, Searcher& s) {
  const auto [work, counted] = s.estimate_work(kMaxSearchWork);
  if (work <= kMaxSearchWork) return Status();
  return resource_exhausted(
      "the search is too large: " + num(counted) + "+ candidates over " + num(model.num_blocks) +
      " blocks, above the limit of about " + std::to_string(kMaxSearchWork / 1e9).substr(0, 3) +
      " s of work; fix some values (--fix tp=..,pp=..,mbs=..), plan for fewer devices or a "
      "smaller --global-batch, or write identical layers as one \"repeat\" group");
}

}  // namespace

Result<SearchResult> search_plans(const ir::Model& model, const ClusterSpec& cluster,
                                  const Workload& w, const SearchConstraints& c,
                                  const CostOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  TSR_RETURN_IF_ERROR(validate_model(model));
  TSR_RETURN_IF_ERROR(check_workload(w));
  TSR_RETURN_IF_ERROR(validate_cluster(cluster, w.dtype));
  // The rules reading no plan dimension (learned positions) are checked here too.
  TSR_RETURN_IF_ERROR(check_fixed(model, cluster, w, c, o));
  Searcher s(model, cluster, w, c, o);
  TSR_RETURN_IF_ERROR(check_work(model, s));
  s.enumerate([&](const Plan& p) {
    s.consider(p, false);
    return true;
  });
  if (s.result().feasible == 0 && s.result().candidates > 0 && c.prune) {
    s.enumerate([&](const Plan& p) {
      s.consider(p, true);
      return true;
    });
  }
  SearchResult& r = s.result();
  r.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (r.candidates == 0) {
    return invalid_argument(
        "no valid plan for " + std::to_string(cluster.devices()) +
        " devices with these fixed values: tp must divide the heads and fit a host, tp*cp*pp*dp "
        "must equal the devices, pp must not exceed the layers, dp*mbs must divide the global "
        "batch " +
        std::to_string(w.global_batch));
  }
  if (r.feasible == 0) {
    const double budget = cluster.device.memory_gib * kGiB * (1 - o.reserve_fraction);
    std::string msg = "no plan fits in " + gib(budget) + " per device (" +
                      gib(cluster.device.memory_gib * kGiB) + " x " +
                      std::to_string(1 - o.reserve_fraction).substr(0, 4) + ")";
    if (r.smallest) {
      msg += ": the smallest needs " + gib(r.smallest->memory.total()) + " (" +
             plan_summary(r.smallest->plan) + ")";
    }
    return resource_exhausted(msg);
  }
  return std::move(r);
}

}  // namespace tessera::plan
