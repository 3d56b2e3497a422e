// GradSync in allreduce mode: the result is bit for bit what one plain allreduce of the whole
// gradient gives, whatever the order of the marks, with mixed dtypes and several steps; unused
// parameters; the trace file. Gradients are device memory, filled and read back by stream copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

struct Layout {
  size_t count;
  DType dtype;
};

const std::vector<Layout> kMixed = {{1000, DType::kF32}, {17, DType::kF32},   {4096, DType::kF32},
                                    {100, DType::kF64},  {1, DType::kF32},    {257, DType::kBF16},
                                    {333, DType::kF32},  {2048, DType::kF32}, {65, DType::kF32},
                                    {5000, DType::kF32}};

// Fills `bytes` of `dtype` with random values (integers in [-8, 8] when `integers`, so that any
// summation order gives the same bits on more than two ranks).
void fill(void* data, size_t count, DType dtype, std::mt19937_64& rng, bool integers) {
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> whole(-8, 8);
  for (size_t i = 0; i < count; ++i) {
    const double v = integers ? double(whole(rng)) : real(rng);
    switch (dtype) {
      case DType::kF32: static_cast<float*>(data)[i] = float(v); break;
      case DType::kF64: static_cast<double*>(data)[i] = v; break;
      case DType::kBF16: {
        const float f = float(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        static_cast<uint16_t*>(data)[i] = uint16_t(bits >> 16);
        break;
      }
      default: break;
    }
  }
}

struct Span {
  void* ptr;
  size_t bytes;
  void* data() const { return ptr; }
  size_t size() const { return bytes; }
};

// `contiguous`: the gradients are adjacent slices of one allocation (buckets are then reduced
// in place); else one allocation each (buckets of several gradients are copied).
int bitwise_body(int rank, int n, Reduction reduction, bool integers, bool contiguous) {
  const uint64_t seed = testing::test_seed();
  auto r = Rank::make(rank, n);
  if (!r) return 2;
  GradSyncOptions options;
  options.reduction = reduction;
  options.bucket_bytes = 8192;
  auto sync_or = GradSync::create(r->comm, *r->device, options);
  CHILD_OK(sync_or.status());
  auto& sync = *sync_or.value();
  std::vector<hal::DeviceBuffer> buffers;
  std::vector<Span> grads;
  size_t total = 0;
  for (const Layout& l : kMixed) total += l.count * hal::dtype_size(l.dtype) + 8;
  if (contiguous) {
    auto buf = r->device->allocate(total);
    CHILD_OK(buf.status());
    buffers.push_back(std::move(buf.value()));
  }
  size_t cursor = 0;
  for (size_t i = 0; i < kMixed.size(); ++i) {
    const size_t size = hal::dtype_size(kMixed[i].dtype);
    const size_t bytes = kMixed[i].count * size;
    if (contiguous) {
      cursor = (cursor + size - 1) / size * size;
      grads.push_back({static_cast<char*>(buffers[0].data()) + cursor, bytes});
      cursor += bytes;
    } else {
      auto buf = r->device->allocate(bytes);
      CHILD_OK(buf.status());
      buffers.push_back(std::move(buf.value()));
      grads.push_back({buffers.back().data(), bytes});
    }
    CHILD_OK(sync.add_parameter("layer" + std::to_string(i), nullptr, grads.back().data(),
                                kMixed[i].count, kMixed[i].dtype)
                 .status());
  }
  CHILD_CHECK(sync.buckets().size() > 3, "expected several buckets, got %zu",
              sync.buckets().size());
  auto event_or = r->device->create_event(false);
  CHILD_OK(event_or.status());
  hal::Event& event = event_or.value();
  const hal::ReduceOp op =
      reduction == Reduction::kAverage ? hal::ReduceOp::kAvg : hal::ReduceOp::kSum;
  for (int step = 0; step < 3; ++step) {
    std::mt19937_64 rng(seed + uint64_t(rank) * 7919 + uint64_t(step));
    // The reference: one allreduce of every parameter's gradient, per dtype, made before the
    // engine runs (nothing of the engine is in flight on the communicator then).
    std::vector<std::vector<uint8_t>> expected(kMixed.size());
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
      std::vector<uint8_t> whole;
      std::vector<size_t> at;
      for (size_t i = 0; i < kMixed.size(); ++i) {
        if (kMixed[i].dtype != dtype) continue;
        std::vector<uint8_t> host(grads[i].size());
        at.push_back(whole.size());
        fill(host.data(), kMixed[i].count, dtype, rng, integers);
        whole.insert(whole.end(), host.begin(), host.end());
        CHILD_OK(testing::to_device(r->compute, grads[i].data(), host));
      }
      const size_t elements = whole.size() / hal::dtype_size(dtype);
      CHILD_OK(r->comm->allreduce(whole.data(), whole.data(), elements, dtype, op));
      size_t k = 0;
      for (size_t i = 0; i < kMixed.size(); ++i) {
        if (kMixed[i].dtype != dtype) continue;
        expected[i].assign(whole.begin() + ptrdiff_t(at[k]),
                           whole.begin() + ptrdiff_t(at[k] + grads[i].size()));
        ++k;
      }
    }
    // Marks in a different order on every rank and step; both overloads; the event is
    // re-recorded right after each mark (the engine relays it).
    std::vector<int> order(kMixed.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int(order.size() - 1 - i);
    std::mt19937_64 shuffle(seed * 31 + uint64_t(rank) * 131 + uint64_t(step));
    std::shuffle(order.begin(), order.end(), shuffle);
    for (int p : order) {
      CHILD_OK(r->compute.busy_wait(50));
      if (p % 2 == 0) {
        CHILD_OK(sync.mark_ready(p, r->compute));
      } else {
        CHILD_OK(event.record(r->compute));
        CHILD_OK(sync.mark_ready(p, event));
      }
    }
    auto stats = sync.finish();
    CHILD_OK(stats.status());
    CHILD_CHECK(stats->step == uint64_t(step), "step %llu", (unsigned long long)stats->step);
    CHILD_CHECK(stats->buckets == sync.buckets().size(), "bucket count");
    CHILD_CHECK(stats->overlap_ratio >= 0 && stats->overlap_ratio <= 1, "overlap ratio");
    for (size_t i = 0; i < kMixed.size(); ++i) {
      std::vector<uint8_t> got;
      CHILD_OK(testing::from_device(r->compute, got, grads[i].data(), grads[i].size()));
      CHILD_CHECK(got == expected[i],
                  "step %d: gradient of layer%zu differs from the plain allreduce (seed %llu)",
                  step, i, (unsigned long long)seed);
    }
  }
  CHILD_DONE(r);
}

TEST(GradSync, MatchesAPlainAllreduceBitForBitOnTwoRanks) {
  std::printf("seed %llu (TESSERA_TEST_SEED reproduces)\n",
              (unsigned long long)testing::test_seed());
  testing::expect_all_ok(
      run_ranks(2, [](int rank,
                      int n) { return bitwise_body(rank, n, Reduction::kAverage, false, false); }),
      2);
}

TEST(GradSync, MatchesAPlainAllreduceBitForBitSummingInPlaceOverThreeRanks) {
  testing::expect_all_ok(
      run_ranks(3,
                [](int rank, int n) { return bitwise_body(rank, n, Reduction::kSum, true, true); }),
      3);
}

TEST(GradSync, TreatsUnmarkedAndUnusedParametersAsZeroContributions) {
  testing::expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  GradSyncOptions options;
                  options.zero_fill_unmarked = true;
                  options.bucket_bytes = 64;
                  auto sync_or = GradSync::create(r->comm, *r->device, options);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  std::vector<hal::DeviceBuffer> grads;
                  for (int p = 0; p < 4; ++p) {
                    auto g = testing::device_array<float>(*r->device, 16);
                    CHILD_OK(g.status());
                    grads.push_back(std::move(g.value()));
                    CHILD_OK(sync.add_parameter("w" + std::to_string(p), nullptr,
                                                grads.back().data(), 16, DType::kF32)
                                 .status());
                  }
                  for (int step = 0; step < 2; ++step) {
                    for (int p = 0; p < 4; ++p) {
                      CHILD_OK(testing::to_device(
                          r->compute, grads[size_t(p)].data(),
                          std::vector<float>(16, float(2 * (rank + 1) * (p + 1)))));
                    }
                    // Rank 1 never marks w1 (finish zero-fills it); rank 0 marks w3 unused.
                    for (int p = 3; p >= 0; --p) {
                      if (rank == 1 && p == 1) continue;
                      if (rank == 0 && p == 3) {
                        CHILD_OK(sync.mark_unused(p));
                      } else {
                        CHILD_OK(sync.mark_ready(p, r->compute));
                      }
                    }
                    auto stats = sync.finish();
                    CHILD_OK(stats.status());
                    CHILD_CHECK(stats->unused_params == 1, "unused %zu", stats->unused_params);
                    const float expect[4] = {(2 + 4) / 2.0f, 4 / 2.0f, (6 + 12) / 2.0f, 16 / 2.0f};
                    for (int p = 0; p < 4; ++p) {
                      std::vector<float> got;
                      CHILD_OK(testing::from_device(r->compute, got, grads[size_t(p)].data(), 16));
                      for (float x : got) {
                        CHILD_CHECK(x == expect[p], "w%d: %g, expected %g", p, double(x),
                                    double(expect[p]));
                      }
                    }
                  }
                  CHILD_DONE(r);
                }),
      2);
}

TEST(GradSync, WritesAChromeTracePerRankWithBucketsAndComputeSpans) {
  char dir_template[] = "/tmp/tessera-overlap-trace-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  testing::expect_all_ok(
      run_ranks(2,
                [&dir](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  GradSyncOptions options;
                  options.trace_path = dir + "/trace.json";
                  options.bucket_bytes = 1024;
                  auto sync_or = GradSync::create(r->comm, *r->device, options);
                  CHILD_OK(sync_or.status());
                  auto sync = std::move(sync_or.value());
                  std::vector<hal::DeviceBuffer> grads;
                  for (int p = 0; p < 3; ++p) {
                    auto g = testing::device_array<float>(*r->device, 512);
                    CHILD_OK(g.status());
                    grads.push_back(std::move(g.value()));
                    CHILD_OK(testing::to_device(r->compute, grads.back().data(),
                                                std::vector<float>(512, 1.0f)));
                    CHILD_OK(sync->add_parameter("w" + std::to_string(p), nullptr,
                                                 grads.back().data(), 512, DType::kF32)
                                 .status());
                  }
                  for (int step = 0; step < 2; ++step) {
                    for (int p = 2; p >= 0; --p) {
                      CHILD_OK(
                          sync->trace_compute_begin(r->compute, "backward w" + std::to_string(p)));
                      CHILD_OK(r->compute.busy_wait(100));
                      CHILD_OK(sync->trace_compute_end(r->compute));
                      CHILD_OK(sync->mark_ready(p, r->compute));
                    }
                    CHILD_OK(sync->finish().status());
                  }
                  CHILD_OK(r->compute.synchronize());
                  sync.reset();
                  CHILD_DONE(r);
                }),
      2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + "/trace.rank" + std::to_string(rank) + ".json";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    EXPECT_EQ(json.front(), '[') << path;
    EXPECT_NE(json.find("\n]"), std::string::npos) << "not closed: " << path;
    for (const char* needle : {"\"bucket 0 communicate\"", "\"algorithm\":", "\"wire_bytes\":",
                               "\"backward w2\"", "\"exposed communication\"", "\"step 1\""}) {
      EXPECT_NE(json.find(needle), std::string::npos) << needle << " missing from " << path;
    }
    std::remove(path.c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace tessera::overlap
