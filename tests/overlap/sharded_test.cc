// The sharded optimizer mode (ZeRO-1/2): momentum SGD where each rank keeps momentum for its
// shard only gives the parameters plain data parallelism gives (within f32 summation-order
// tolerance), and the shards partition the parameters. Parameters, gradients and shards are device
// memory; the test's optimizer stages its shard through the host.
#include <gtest/gtest.h>

#include <cmath>

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

const std::vector<size_t> kCounts = {300, 7, 1000, 64, 129};

// The gradient of rank `rank` at step `step` for parameter values `w`: depends on w, so the two
// trainings only agree if every update agreed.
float gradient(float w, size_t i, int rank, int step) {
  return 0.3f * w * float(rank + 1) + std::sin(float(i) * 0.37f + float(step) + float(rank));
}

int sharded_body(int rank, int n) {
  auto r = Rank::make(rank, n);
  if (!r) return 2;
  GradSyncOptions options;
  options.mode = SyncMode::kShardedOptimizer;
  options.bucket_bytes = 2048;
  auto sync_or = GradSync::create(r->comm, *r->device, options);
  CHILD_OK(sync_or.status());
  auto& sync = *sync_or.value();
  const size_t np = kCounts.size();
  // Host copies (w: what the device holds, read back after every gather) and device buffers.
  std::vector<std::vector<float>> w(np), g(np), ref_w(np), ref_m(np);
  std::vector<hal::DeviceBuffer> dev_w, dev_g;
  size_t total = 0;
  for (size_t p = 0; p < np; ++p) {
    w[p].resize(kCounts[p]);
    for (size_t i = 0; i < kCounts[p]; ++i) w[p][i] = std::cos(float(p * 1000 + i));
    g[p].assign(kCounts[p], 0.0f);
    ref_w[p] = w[p];
    ref_m[p].assign(kCounts[p], 0.0f);
    total += kCounts[p];
    auto dw = testing::device_array<float>(*r->device, kCounts[p]);
    auto dg = testing::device_array<float>(*r->device, kCounts[p]);
    CHILD_OK(dw.status());
    CHILD_OK(dg.status());
    dev_w.push_back(std::move(dw.value()));
    dev_g.push_back(std::move(dg.value()));
    CHILD_OK(testing::to_device(r->compute, dev_w[p].data(), w[p]));
    CHILD_OK(sync.add_parameter("p" + std::to_string(p), dev_w[p].data(), dev_g[p].data(),
                                kCounts[p], DType::kF32)
                 .status());
  }
  CHILD_CHECK(sync.buckets().size() >= 2, "buckets %zu", sync.buckets().size());
  // Each rank holds momentum for its shard only.
  std::vector<float> momentum(sync.shard_elements(), 0.0f);
  int64_t owned = int64_t(sync.shard_elements());
  CHILD_OK(r->comm->allreduce(&owned, &owned, 1, DType::kI64, hal::ReduceOp::kSum));
  CHILD_CHECK(size_t(owned) == total, "shards cover %lld of %zu elements", (long long)owned, total);
  CHILD_CHECK(sync.shard_elements() <= total / size_t(n) + sync.buckets().size(),
              "shard of %zu elements is more than 1/%d of %zu", sync.shard_elements(), n, total);
  constexpr float kLr = 0.05f, kBeta = 0.9f;
  for (int step = 0; step < 5; ++step) {
    // Plain data parallel on the reference copy (blocking allreduce of everything).
    std::vector<float> whole;
    for (size_t p = 0; p < np; ++p) {
      for (size_t i = 0; i < kCounts[p]; ++i) whole.push_back(gradient(ref_w[p][i], i, rank, step));
    }
    CHILD_OK(r->comm->allreduce(whole.data(), whole.data(), whole.size(), DType::kF32,
                                hal::ReduceOp::kAvg));
    size_t at = 0;
    for (size_t p = 0; p < np; ++p) {
      for (size_t i = 0; i < kCounts[p]; ++i, ++at) {
        ref_m[p][i] = kBeta * ref_m[p][i] + whole[at];
        ref_w[p][i] -= kLr * ref_m[p][i];
      }
    }
    // The engine: gradients, reduce-scatter, the optimizer on the shard, all-gather.
    for (size_t p = np; p-- > 0;) {
      for (size_t i = 0; i < kCounts[p]; ++i) g[p][i] = gradient(w[p][i], i, rank, step);
      CHILD_OK(testing::to_device(r->compute, dev_g[p].data(), g[p]));
      CHILD_OK(sync.mark_ready(int(p), r->compute));
    }
    CHILD_OK(sync.finish().status());
    // The optimizer on this rank's shard, staged through the host.
    size_t k = 0;
    for (const ShardSegment& s : sync.shard_segments()) {
      std::vector<float> grad, data;
      CHILD_OK(testing::from_device(r->compute, grad, s.grad, s.count));
      CHILD_OK(testing::from_device(r->compute, data, s.data, s.count));
      for (size_t i = 0; i < s.count; ++i, ++k) {
        momentum[k] = kBeta * momentum[k] + grad[i];
        data[i] -= kLr * momentum[k];
      }
      CHILD_OK(testing::to_device(r->compute, s.data, data));
    }
    // Odd steps: as if the optimizer ran on the compute stream (the gather waits for it).
    CHILD_OK(sync.gather_parameters(step % 2 == 1 ? &r->compute : nullptr));
    CHILD_OK(sync.wait_parameter(0, r->compute));
    CHILD_OK(sync.wait_parameters());
    for (size_t p = 0; p < np; ++p) {
      CHILD_OK(testing::from_device(r->compute, w[p], dev_w[p].data(), kCounts[p]));
      for (size_t i = 0; i < kCounts[p]; ++i) {
        const float a = w[p][i], b = ref_w[p][i];
        CHILD_CHECK(std::fabs(a - b) <= 1e-5f * (1 + std::fabs(b)),
                    "step %d: p%zu[%zu] = %.9g, data parallel gives %.9g", step, p, i, double(a),
                    double(b));
      }
    }
  }
  CHILD_DONE(r);
}

TEST(ShardedOptimizer, MatchesDataParallelWithEachRankHoldingOnlyItsShardOnTwoRanks) {
  testing::expect_all_ok(run_ranks(2, sharded_body), 2);
}

TEST(ShardedOptimizer, MatchesDataParallelWithEachRankHoldingOnlyItsShardOnThreeRanks) {
  testing::expect_all_ok(run_ranks(3, sharded_body), 3);
}

}  // namespace
}  // namespace tessera::overlap
