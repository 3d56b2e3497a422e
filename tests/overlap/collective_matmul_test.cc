// Collective matmuls against the unfused pair: all-gather + GEMM bit for bit, GEMM +
// reduce-scatter within f32 summation-order tolerance, on 2, 3 and 4 rank rings, with odd sizes
// and chunks larger than the shared-memory transport buffers (a ring of blocking send/recv on one
// communicator would deadlock there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "support.h"
#include "tessera/hal/gemm_desc.h"
#include "tessera/overlap/collective_matmul.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

bool host_has_gemm() {
  auto platform = hal::Platform::create();
  if (!platform.ok()) return false;
  auto devices = platform.value()->devices("host");
  return !devices.empty() && devices[0].backend()->api().gemm_async != nullptr;
}

std::vector<float> random_matrix(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = u(rng);
  return v;
}

// Row-major C = A B through the HAL GEMM (the unfused reference).
Status reference_gemm(const hal::Stream& s, const float* a, int64_t rows, int64_t k, const float* b,
                      int64_t n, float* c) {
  // Column-major C^T (n x rows) = B^T (n x k) A^T (k x rows): row-major C = A B.
  TSR_RETURN_IF_ERROR(s.gemm(hal::f32_gemm_desc(false, false, n, rows, k, b, n, a, k, c, n)));
  return s.synchronize();
}

struct Sizes {
  int64_t rows_per_rank, k, n, k_local, n_rs;  // n_rs: the reduce-scatter's n
};

int body(int rank, int ranks, Sizes sz) {
  const uint64_t seed = testing::test_seed();
  auto r = Rank::make(rank, ranks);
  if (!r) return 2;
  auto cm_or = CollectiveMatmul::create(r->comm, *r->device);
  CHILD_OK(cm_or.status());
  CollectiveMatmul& cm = *cm_or.value();
  const int64_t kRowsPerRank = sz.rows_per_rank, kK = sz.k, kN = sz.n;
  const int64_t m = kRowsPerRank * ranks;
  // ---- all-gather + GEMM ----
  const std::vector<float> x = random_matrix(size_t(m * kK), seed);  // the same on every rank
  const std::vector<float> w = random_matrix(size_t(kK * kN), seed + 1 + uint64_t(rank));
  const float* x_shard = x.data() + size_t(rank * kRowsPerRank * kK);
  std::vector<float> x_full(x.size()), y(size_t(m * kN), -1.0f);
  for (int round = 0; round < 2; ++round) {
    CHILD_OK(cm.allgather_matmul(x_shard, kRowsPerRank, kK, w.data(), kN, x_full.data(), y.data(),
                                 r->compute));
    CHILD_OK(cm.wait());
    CHILD_OK(r->compute.synchronize());
  }
  std::vector<float> gathered(x.size()), expect(y.size());
  CHILD_OK(r->comm->allgather(x_shard, gathered.data(), size_t(kRowsPerRank * kK), DType::kF32));
  CHILD_OK(reference_gemm(r->compute, gathered.data(), m, kK, w.data(), kN, expect.data()));
  CHILD_CHECK(x_full == gathered, "gathered X differs");
  CHILD_CHECK(std::memcmp(y.data(), expect.data(), y.size() * 4) == 0,
              "all-gather matmul differs from all-gather + GEMM (seed %llu)",
              (unsigned long long)seed);
  // ---- GEMM + reduce-scatter ----
  const int64_t k_local = sz.k_local, kNrs = sz.n_rs;
  const std::vector<float> xl = random_matrix(size_t(m * k_local), seed + 100 + uint64_t(rank));
  const std::vector<float> wl = random_matrix(size_t(k_local * kNrs), seed + 200 + uint64_t(rank));
  std::vector<float> ys(size_t(kRowsPerRank * kNrs), -1.0f);
  for (int round = 0; round < 2; ++round) {
    CHILD_OK(
        cm.matmul_reduce_scatter(xl.data(), m, k_local, wl.data(), kNrs, ys.data(), r->compute));
    CHILD_OK(cm.wait());
    CHILD_OK(r->compute.synchronize());
  }
  std::vector<float> partial(size_t(m * kNrs)), ref(ys.size());
  CHILD_OK(reference_gemm(r->compute, xl.data(), m, k_local, wl.data(), kNrs, partial.data()));
  CHILD_OK(r->comm->reduce_scatter(partial.data(), ref.data(), ref.size(), DType::kF32,
                                   hal::ReduceOp::kSum));
  for (size_t i = 0; i < ys.size(); ++i) {
    CHILD_CHECK(std::fabs(ys[i] - ref[i]) <= 1e-5f * (1 + std::fabs(ref[i])),
                "reduce-scatter matmul [%zu]: %.9g vs %.9g", i, double(ys[i]), double(ref[i]));
  }
  CHILD_CHECK(
      !cm.matmul_reduce_scatter(xl.data(), m + 1, k_local, wl.data(), kNrs, ys.data(), r->compute)
              .ok() ||
          ranks == 1,
      "uneven m accepted");
  CHILD_DONE(r);
}

constexpr Sizes kSmall{37, 53, 29, 41, 29};
// 3 MiB chunks: more than the shared-memory FIFO holds (8 x 256 KiB).
constexpr Sizes kLarge{1031, 769, 8, 5, 771};

TEST(CollectiveMatmul, EqualsTheUnfusedPairOnTwoRanks) {
  if (!host_has_gemm()) GTEST_SKIP() << "the host backend was built without BLAS (no GEMM)";
  testing::expect_all_ok(run_ranks(2, [](int r, int n) { return body(r, n, kSmall); }), 2);
}

TEST(CollectiveMatmul, EqualsTheUnfusedPairOnThreeRanks) {
  if (!host_has_gemm()) GTEST_SKIP() << "the host backend was built without BLAS (no GEMM)";
  testing::expect_all_ok(run_ranks(3, [](int r, int n) { return body(r, n, kSmall); }), 3);
}

TEST(CollectiveMatmul, EqualsTheUnfusedPairOnFourRanks) {
  if (!host_has_gemm()) GTEST_SKIP() << "the host backend was built without BLAS (no GEMM)";
  testing::expect_all_ok(run_ranks(4, [](int r, int n) { return body(r, n, kSmall); }), 4);
}

TEST(CollectiveMatmul, EqualsTheUnfusedPairWithChunksLargerThanTheTransportBuffersOnThreeRanks) {
  if (!host_has_gemm()) GTEST_SKIP() << "the host backend was built without BLAS (no GEMM)";
  testing::expect_all_ok(run_ranks(3, [](int r, int n) { return body(r, n, kLarge); }), 3);
}

}  // namespace
}  // namespace tessera::overlap
