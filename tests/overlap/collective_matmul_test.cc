// Collective matmuls against the unfused pair, within the f32 error bound of a dot product (BLAS
// gives no bitwise promise across differently shaped calls), on 2, 3 and 4 rank rings, with odd
// sizes and chunks larger than the shared-memory transport buffers (a ring of blocking send/recv on
// one communicator would deadlock there). Every matrix is device memory, filled and read back by
// stream copies.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>

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

// Row-major C = A B through the HAL GEMM on device copies (the unfused reference).
Result<std::vector<float>> reference_gemm(const hal::Device& device, const hal::Stream& s,
                                          const std::vector<float>& a, int64_t rows, int64_t k,
                                          const std::vector<float>& b, int64_t n) {
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer da, testing::device_array<float>(device, a.size()));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer db, testing::device_array<float>(device, b.size()));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer dc,
                       testing::device_array<float>(device, size_t(rows * n)));
  TSR_RETURN_IF_ERROR(testing::to_device(s, da.data(), a));
  TSR_RETURN_IF_ERROR(testing::to_device(s, db.data(), b));
  // Column-major C^T (n x rows) = B^T (n x k) A^T (k x rows): row-major C = A B.
  TSR_RETURN_IF_ERROR(s.gemm(hal::f32_gemm_desc(
      false, false, n, rows, k, static_cast<const float*>(db.data()), n,
      static_cast<const float*>(da.data()), k, static_cast<float*>(dc.data()), n)));
  std::vector<float> c;
  TSR_RETURN_IF_ERROR(testing::from_device(s, c, dc.data(), size_t(rows * n)));
  return c;
}

struct Sizes {
  int64_t rows_per_rank, k, n, k_local, n_rs;  // n_rs: the reduce-scatter's n
};

// Device buffers of the given element counts (nullptr after printing why on failure).
std::vector<hal::DeviceBuffer> device_buffers(const hal::Device& device,
                                              std::initializer_list<size_t> counts) {
  std::vector<hal::DeviceBuffer> out;
  for (size_t count : counts) {
    auto b = testing::device_array<float>(device, count);
    if (!b.ok()) return {};
    out.push_back(std::move(b.value()));
  }
  return out;
}

int body(int rank, int ranks, Sizes sz) {
  const uint64_t seed = testing::test_seed();
  auto r = Rank::make(rank, ranks);
  if (!r) return 2;
  auto cm_or = CollectiveMatmul::create(r->comm, *r->device);
  CHILD_OK(cm_or.status());
  CollectiveMatmul& cm = *cm_or.value();
  const hal::Stream& s = r->compute;
  const int64_t kRowsPerRank = sz.rows_per_rank, kK = sz.k, kN = sz.n;
  const int64_t m = kRowsPerRank * ranks;
  // ---- all-gather + GEMM ----
  const std::vector<float> x = random_matrix(size_t(m * kK), seed);  // the same on every rank
  const std::vector<float> w = random_matrix(size_t(kK * kN), seed + 1 + uint64_t(rank));
  const std::vector<float> x_shard(x.begin() + rank * kRowsPerRank * kK,
                                   x.begin() + (rank + 1) * kRowsPerRank * kK);
  auto ag = device_buffers(*r->device, {x_shard.size(), w.size(), x.size(), size_t(m * kN)});
  CHILD_CHECK(ag.size() == 4, "device buffers");
  auto* d_shard = static_cast<float*>(ag[0].data());
  auto* d_w = static_cast<float*>(ag[1].data());
  auto* d_full = static_cast<float*>(ag[2].data());
  auto* d_y = static_cast<float*>(ag[3].data());
  CHILD_OK(testing::to_device(s, d_shard, x_shard));
  CHILD_OK(testing::to_device(s, d_w, w));
  CHILD_OK(testing::to_device(s, d_y, std::vector<float>(size_t(m * kN), -1.0f)));
  for (int round = 0; round < 2; ++round) {
    CHILD_OK(cm.allgather_matmul(d_shard, kRowsPerRank, kK, d_w, kN, d_full, d_y, s));
    CHILD_OK(cm.wait());
    CHILD_OK(s.synchronize());
  }
  std::vector<float> x_full, y;
  CHILD_OK(testing::from_device(s, x_full, d_full, x.size()));
  CHILD_OK(testing::from_device(s, y, d_y, size_t(m * kN)));
  std::vector<float> gathered(x.size());
  CHILD_OK(r->comm->allgather(x_shard.data(), gathered.data(), x_shard.size(), DType::kF32));
  auto expect = reference_gemm(*r->device, s, gathered, m, kK, w, kN);
  CHILD_OK(expect.status());
  CHILD_CHECK(x_full == gathered, "gathered X differs");
  // The fused form multiplies row blocks, the reference the whole matrix: BLAS does not promise
  // the same bits for differently shaped calls (OpenBLAS picks kernels and blockings by shape,
  // OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE), so the claim is the f32 dot-product error bound,
  // |y - ref| <= 2 k eps (|X| |W|)_ij, per element.
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double magnitude = 0;
      for (int64_t l = 0; l < kK; ++l) {
        magnitude += std::fabs(double(gathered[size_t(i * kK + l)])) *
                     std::fabs(double(w[size_t(l * kN + j)]));
      }
      const size_t at = size_t(i * kN + j);
      const double bound = 2.0 * double(kK) * 0x1p-24 * magnitude;
      CHILD_CHECK(std::fabs(double(y[at]) - double((*expect)[at])) <= bound,
                  "all-gather matmul [%lld, %lld]: %.9g vs all-gather + GEMM %.9g, beyond the "
                  "f32 bound %.3g (seed %llu)",
                  (long long)i, (long long)j, double(y[at]), double((*expect)[at]), bound,
                  (unsigned long long)seed);
    }
  }
  // ---- GEMM + reduce-scatter ----
  const int64_t k_local = sz.k_local, kNrs = sz.n_rs;
  const std::vector<float> xl = random_matrix(size_t(m * k_local), seed + 100 + uint64_t(rank));
  const std::vector<float> wl = random_matrix(size_t(k_local * kNrs), seed + 200 + uint64_t(rank));
  auto rs = device_buffers(*r->device, {xl.size(), wl.size(), size_t(kRowsPerRank * kNrs)});
  CHILD_CHECK(rs.size() == 3, "device buffers");
  auto* d_xl = static_cast<float*>(rs[0].data());
  auto* d_wl = static_cast<float*>(rs[1].data());
  auto* d_ys = static_cast<float*>(rs[2].data());
  CHILD_OK(testing::to_device(s, d_xl, xl));
  CHILD_OK(testing::to_device(s, d_wl, wl));
  for (int round = 0; round < 2; ++round) {
    CHILD_OK(cm.matmul_reduce_scatter(d_xl, m, k_local, d_wl, kNrs, d_ys, s));
    CHILD_OK(cm.wait());
    CHILD_OK(s.synchronize());
  }
  std::vector<float> ys;
  CHILD_OK(testing::from_device(s, ys, d_ys, size_t(kRowsPerRank * kNrs)));
  auto partial = reference_gemm(*r->device, s, xl, m, k_local, wl, kNrs);
  CHILD_OK(partial.status());
  std::vector<float> ref(ys.size());
  CHILD_OK(r->comm->reduce_scatter(partial->data(), ref.data(), ref.size(), DType::kF32,
                                   hal::ReduceOp::kSum));
  for (size_t i = 0; i < ys.size(); ++i) {
    CHILD_CHECK(std::fabs(ys[i] - ref[i]) <= 1e-5f * (1 + std::fabs(ref[i])),
                "reduce-scatter matmul [%zu]: %.9g vs %.9g", i, double(ys[i]), double(ref[i]));
  }
  CHILD_CHECK(
      !cm.matmul_reduce_scatter(d_xl, m + 1, k_local, d_wl, kNrs, d_ys, s).ok() || ranks == 1,
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
