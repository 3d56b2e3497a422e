// The sharded parameters mode (ZeRO-3): momentum SGD where each rank keeps only its shard of the
// parameters and of the momentum, gathering each layer's parameters for forward and backward,
// gives the parameters plain data parallelism gives (within f32 summation-order tolerance); the
// engine's memory is a shard plus a small pool; bad calls fail naming the parameter. Parameters,
// gradients, shards and gathered buckets are device memory, read and written by stream copies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

constexpr int kLayers = 10;

// Layer l has a weight and a bias of odd sizes, so buckets and shards do not divide evenly.
std::vector<size_t> layer_counts() {
  std::vector<size_t> counts;
  for (int l = 0; l < kLayers; ++l) {
    counts.push_back(150 + 10 * size_t(l));
    counts.push_back(7 + size_t(l));
  }
  return counts;
}

// Depends on w, so the two trainings only agree if every gathered parameter was right.
float gradient(float w, size_t i, int rank, int step) {
  return 0.3f * w * float(rank + 1) + std::sin(float(i) * 0.37f + float(step) + float(rank));
}

bool close(float a, float b) {
  return std::fabs(a - b) <= 1e-5f * (1 + std::fabs(b));
}

int zero3_body(int rank, int n, int prefetch) {
  auto r = Rank::make(rank, n);
  if (!r) return 2;
  GradSyncOptions options;
  options.mode = SyncMode::kShardedParameters;
  options.bucket_bytes = 800;  // one layer (weight and bias) per bucket
  options.prefetch_buckets = prefetch;
  // The trace shows whether gathers were prefetched (each rank its own file).
  const std::string trace = ::testing::TempDir() + "zero3_" + std::to_string(n) + "_" +
                            std::to_string(prefetch) + "_" + std::to_string(getppid()) + ".json";
  options.trace_path = trace;
  auto sync_or = GradSync::create(r->comm, *r->device, options);
  CHILD_OK(sync_or.status());
  auto& sync = *sync_or.value();
  const std::vector<size_t> counts = layer_counts();
  const size_t np = counts.size();
  // Initial values and gradients in device memory (filled and read by stream copies).
  std::vector<std::vector<float>> g(np), ref_w(np), ref_m(np);
  std::vector<hal::DeviceBuffer> init, dev_g;
  size_t total = 0;
  for (size_t p = 0; p < np; ++p) {
    std::vector<float> values(counts[p]);
    for (size_t i = 0; i < counts[p]; ++i) values[i] = std::cos(float(p * 1000 + i));
    g[p].assign(counts[p], 0.0f);
    ref_w[p] = values;
    ref_m[p].assign(counts[p], 0.0f);
    total += counts[p];
    auto dw = testing::device_array<float>(*r->device, counts[p]);
    auto dg = testing::device_array<float>(*r->device, counts[p]);
    CHILD_OK(dw.status());
    CHILD_OK(dg.status());
    init.push_back(std::move(dw.value()));
    dev_g.push_back(std::move(dg.value()));
    CHILD_OK(testing::to_device(r->compute, init[p].data(), values));
    CHILD_OK(sync.add_parameter("p" + std::to_string(p), init[p].data(), dev_g[p].data(), counts[p],
                                DType::kF32)
                 .status());
  }
  const size_t buckets = sync.buckets().size();
  CHILD_CHECK(buckets >= 6, "buckets %zu", buckets);
  // The engine read the initial values when it formed the buckets: the full copy can go (a
  // later read by the engine would fail: the backend refuses a freed pointer).
  init.clear();

  // Memory: a shard of the parameters and of the optimizer state, plus a bounded pool.
  const ShardedMemory mem = sync.memory();
  const size_t total_bytes = total * sizeof(float);
  int64_t owned = int64_t(sync.shard_elements());
  CHILD_OK(r->comm->allreduce(&owned, &owned, 1, DType::kI64, hal::ReduceOp::kSum));
  CHILD_CHECK(size_t(owned) == total, "shards cover %lld of %zu elements", (long long)owned, total);
  CHILD_CHECK(mem.parameter_shard_bytes <= total_bytes / size_t(n) + buckets * sizeof(float),
              "parameter shard of %zu bytes is more than 1/%d of %zu", mem.parameter_shard_bytes, n,
              total_bytes);
  CHILD_CHECK(mem.gradient_shard_bytes == mem.parameter_shard_bytes, "gradient shard %zu bytes",
              mem.gradient_shard_bytes);
  CHILD_CHECK(mem.staging_bytes < total_bytes / 2, "staging %zu of %zu bytes", mem.staging_bytes,
              total_bytes);
  std::vector<float> momentum(sync.shard_elements(), 0.0f);

  constexpr float kLr = 0.05f, kBeta = 0.9f;
  // Forward: gather each layer (weight and bias) in order, check it against data parallel.
  auto forward = [&](int step) -> int {
    for (size_t l = 0; l < size_t(kLayers); ++l) {
      std::vector<float> w[2];
      for (size_t j = 0; j < 2; ++j) {
        auto ptr = sync.gather(int(2 * l + j), r->compute, Pass::kForward);
        CHILD_OK(ptr.status());
        CHILD_OK(testing::from_device(r->compute, w[j], ptr.value(), counts[2 * l + j]));
      }
      for (size_t j = 0; j < 2; ++j) {
        const size_t p = 2 * l + j;
        for (size_t i = 0; i < counts[p]; ++i) {
          CHILD_CHECK(close(w[j][i], ref_w[p][i]),
                      "step %d: gathered p%zu[%zu] = %.9g, data parallel has %.9g", step, p, i,
                      double(w[j][i]), double(ref_w[p][i]));
        }
      }
      for (size_t j = 0; j < 2; ++j) CHILD_OK(sync.release(int(2 * l + j), r->compute));
    }
    return 0;
  };
  for (int step = 0; step < 4; ++step) {
    if (int rc = forward(step); rc != 0) return rc;
    // Plain data parallel on the reference copy.
    std::vector<float> whole;
    for (size_t p = 0; p < np; ++p) {
      for (size_t i = 0; i < counts[p]; ++i) whole.push_back(gradient(ref_w[p][i], i, rank, step));
    }
    CHILD_OK(r->comm->allreduce(whole.data(), whole.data(), whole.size(), DType::kF32,
                                hal::ReduceOp::kAvg));
    size_t at = 0;
    for (size_t p = 0; p < np; ++p) {
      for (size_t i = 0; i < counts[p]; ++i, ++at) {
        ref_m[p][i] = kBeta * ref_m[p][i] + whole[at];
        ref_w[p][i] -= kLr * ref_m[p][i];
      }
    }
    // Backward: gather again (last layer first), gradient from the gathered values, release,
    // mark ready; the reduce-scatters overlap the next gathers.
    for (size_t p = np; p-- > 0;) {
      auto ptr = sync.gather(int(p), r->compute, Pass::kBackward);
      CHILD_OK(ptr.status());
      std::vector<float> w;
      CHILD_OK(testing::from_device(r->compute, w, ptr.value(), counts[p]));
      for (size_t i = 0; i < counts[p]; ++i) g[p][i] = gradient(w[i], i, rank, step);
      CHILD_OK(testing::to_device(r->compute, dev_g[p].data(), g[p]));
      CHILD_OK(sync.release(int(p), r->compute));
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
    // Odd steps: as if the optimizer ran on the compute stream (gathers wait for it).
    CHILD_OK(sync.gather_parameters(step % 2 == 1 ? &r->compute : nullptr));
  }
  {
    // Steps are flushed: the gathers so far are in the file, prefetched ones among them.
    const std::string path =
        trace.substr(0, trace.size() - 5) + ".rank" + std::to_string(rank) + ".json";
    std::FILE* f = std::fopen(path.c_str(), "r");
    CHILD_CHECK(f != nullptr, "no trace %s", path.c_str());
    std::string text;
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, got);
    std::fclose(f);
    std::remove(path.c_str());
    CHILD_CHECK(text.find("gather bucket") != std::string::npos, "no gather spans in the trace");
    const bool prefetched = text.find("\"prefetch\":true") != std::string::npos;
    CHILD_CHECK(prefetched == (prefetch > 0), "prefetch %d, prefetched gathers in trace: %d",
                prefetch, int(prefetched));
  }
  if (int rc = forward(4); rc != 0) return rc;
  const ShardedMemory after = sync.memory();
  CHILD_CHECK(after.gather_buffer_bytes <= size_t(prefetch + 2) * mem.staging_bytes,
              "gather pool grew to %zu bytes (buckets of up to %zu bytes, prefetch %d)",
              after.gather_buffer_bytes, mem.staging_bytes, prefetch);
  CHILD_CHECK(after.gather_buffer_bytes < total_bytes, "gather pool %zu bytes of %zu",
              after.gather_buffer_bytes, total_bytes);
  CHILD_OK(sync.wait_parameters());
  CHILD_DONE(r);
}

TEST(ShardedParameters, MatchesDataParallelWithShardedParametersOnTwoRanks) {
  testing::expect_all_ok(run_ranks(2, [](int rank, int n) { return zero3_body(rank, n, 1); }), 2);
}

TEST(ShardedParameters, MatchesDataParallelWithShardedParametersOnFourRanksPrefetchingTwo) {
  testing::expect_all_ok(run_ranks(4, [](int rank, int n) { return zero3_body(rank, n, 2); }), 4);
}

TEST(ShardedParameters, MatchesDataParallelWithoutPrefetchOnTwoRanks) {
  testing::expect_all_ok(run_ranks(2, [](int rank, int n) { return zero3_body(rank, n, 0); }), 2);
}

bool names(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

int bad_calls_body(int rank, int n) {
  auto r = Rank::make(rank, n);
  if (!r) return 2;
  GradSyncOptions options;
  options.mode = SyncMode::kShardedParameters;
  options.zero_fill_unmarked = true;
  auto sync_or = GradSync::create(r->comm, *r->device, options);
  CHILD_OK(sync_or.status());
  auto& sync = *sync_or.value();
  // Gather before anything is registered.
  auto early = sync.gather(0, r->compute);
  CHILD_CHECK(early.status().code() == StatusCode::kOutOfRange &&
                  names(early.status(), "parameter index 0 is not registered"),
              "gather before register: %s", early.status().to_string().c_str());
  auto w0 = testing::device_array<float>(*r->device, 33);
  auto g0 = testing::device_array<float>(*r->device, 33);
  auto w1 = testing::device_array<float>(*r->device, 5);
  auto g1 = testing::device_array<float>(*r->device, 5);
  for (auto* b : {&w0, &g0, &w1, &g1}) CHILD_OK(b->status());
  CHILD_OK(testing::to_device(r->compute, w0.value().data(), std::vector<float>(33, 1.0f)));
  CHILD_OK(testing::to_device(r->compute, w1.value().data(), std::vector<float>(5, 2.0f)));
  CHILD_OK(
      sync.add_parameter("w0", w0.value().data(), g0.value().data(), 33, DType::kF32).status());
  CHILD_OK(sync.add_parameter("w1", w1.value().data(), g1.value().data(), 5, DType::kF32).status());
  auto beyond = sync.gather(2, r->compute);
  CHILD_CHECK(beyond.status().code() == StatusCode::kOutOfRange, "gather(2): %s",
              beyond.status().to_string().c_str());
  // Release of a parameter never gathered, and a second release.
  Status never = sync.release(1, r->compute);
  CHILD_CHECK(never.code() == StatusCode::kFailedPrecondition && names(never, "'w1'"),
              "release never gathered: %s", never.to_string().c_str());
  auto ptr = sync.gather(0, r->compute);
  CHILD_OK(ptr.status());
  std::vector<float> gathered;
  CHILD_OK(testing::from_device(r->compute, gathered, ptr.value(), 33));
  CHILD_CHECK(gathered[32] == 1.0f, "gathered w0[32] = %g", double(gathered[32]));
  // finish() while a parameter is still gathered names it (and leaves the step usable).
  Status held = sync.finish().status();
  CHILD_CHECK(held.code() == StatusCode::kFailedPrecondition && names(held, "'w0'"),
              "finish while gathered: %s", held.to_string().c_str());
  CHILD_OK(sync.release(0, r->compute));
  Status twice = sync.release(0, r->compute);
  CHILD_CHECK(twice.code() == StatusCode::kFailedPrecondition && names(twice, "'w0'") &&
                  names(twice, "released twice"),
              "release twice: %s", twice.to_string().c_str());
  CHILD_OK(sync.finish().status());
  CHILD_DONE(r);
}

TEST(ShardedParameters, BadCallsNameTheParameter) {
  testing::expect_all_ok(run_ranks(2, bad_calls_body), 2);
  // Another mode: gather() is refused, naming the parameter.
  testing::expect_all_ok(run_ranks(1,
                                   [](int rank, int n) {
                                     auto r = Rank::make(rank, n);
                                     if (!r) return 2;
                                     auto sync = GradSync::create(r->comm, *r->device).value();
                                     auto w = testing::device_array<float>(*r->device, 4);
                                     auto g = testing::device_array<float>(*r->device, 4);
                                     CHILD_OK(w.status());
                                     CHILD_OK(g.status());
                                     CHILD_OK(sync->add_parameter("only", w.value().data(),
                                                                  g.value().data(), 4, DType::kF32)
                                                  .status());
                                     auto got = sync->gather(0, r->compute);
                                     CHILD_CHECK(
                                         got.status().code() == StatusCode::kFailedPrecondition &&
                                             names(got.status(), "'only'"),
                                         "%s", got.status().to_string().c_str());
                                     return 0;
                                   }),
                         1);
}

}  // namespace
}  // namespace tessera::overlap
