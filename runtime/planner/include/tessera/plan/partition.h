// Exact layer-to-stage partition: contiguous blocks, each stage at least one block, minimising
// the slowest stage subject to each stage's memory limit. Dynamic program over (stage, blocks
// covered); a stage's cost only grows as its range grows, so the scan over the range start stops
// as soon as the stage alone is no better than the best found: exact, and near O(L^2) in
// practice instead of O(p L^2). Header-only so the cost functors inline.
#pragma once

#include <limits>
#include <vector>

namespace tessera::plan {

// cost(stage, first, end) -> seconds, or +infinity when the range does not fit that stage.
// Returns blocks per stage, or an empty vector when no partition fits. Deterministic: among equal
// bottlenecks, each stage (from the last) takes the shortest range that achieves it.
template <typename Cost>
std::vector<int> partition_min_max(int blocks, int stages, const Cost& cost,
                                   double* out_bottleneck = nullptr) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (stages < 1 || blocks < stages) return {};
  const size_t width = static_cast<size_t>(blocks) + 1;
  std::vector<double> best(static_cast<size_t>(stages + 1) * width, kInf);
  std::vector<int> from(best.size(), -1);
  auto at = [&](int i, int j) -> size_t { return static_cast<size_t>(i) * width + j; };
  best[at(0, 0)] = 0;
  for (int i = 1; i <= stages; ++i) {
    // Stage i-1 covers [k, j); the stages after it need at least one block each.
    const int j_max = blocks - (stages - i);
    for (int j = i; j <= j_max; ++j) {
      double b = kInf;
      int arg = -1;
      for (int k = j - 1; k >= i - 1; --k) {
        const double c = cost(i - 1, k, j);
        if (c >= b) break;  // longer ranges only cost more
        const double prev = best[at(i - 1, k)];
        const double v = prev > c ? prev : c;
        if (v < b) {
          b = v;
          arg = k;
        }
      }
      best[at(i, j)] = b;
      from[at(i, j)] = arg;
    }
  }
  if (best[at(stages, blocks)] == kInf) return {};
  if (out_bottleneck != nullptr) *out_bottleneck = best[at(stages, blocks)];
  std::vector<int> counts(static_cast<size_t>(stages));
  int j = blocks;
  for (int i = stages; i >= 1; --i) {
    const int k = from[at(i, j)];
    counts[static_cast<size_t>(i - 1)] = j - k;
    j = k;
  }
  return counts;
}

}  // namespace tessera::plan
