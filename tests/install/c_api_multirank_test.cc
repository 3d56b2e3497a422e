// The C API on two ranks: each a forked process (tests/collectives/support/multiprocess.h) that
// joins through tessera_init_from_env with the environment `tessera launch` gives its ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "c_api_support.h"
#include "support/multiprocess.h"
#include "tessera.h"

namespace {

using tessera::coll::testing::RankResult;
using tessera::coll::testing::run_ranks;

#define RANK_OK(call) CHILD_CHECK((call) == TESSERA_OK, "%s: %s", #call, tessera_last_error())

using tessera_c_api_testing::join;

void expect_all_ok(const std::vector<RankResult>& results, int n) {
  ASSERT_EQ(results.size(), size_t(n));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
}

TEST(CApiTwoRanks, CollectivesGiveEveryRankTheRightResult) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int size) {
            tessera_context* ctx = nullptr;
            RANK_OK(join(rank, size, &ctx));
            int got_rank = -1, got_size = -1;
            RANK_OK(tessera_rank(ctx, &got_rank));
            RANK_OK(tessera_size(ctx, &got_size));
            CHILD_CHECK(got_rank == rank && got_size == size, "rank %d size %d", got_rank,
                        got_size);
            // allreduce, in place, avg over f64
            std::vector<double> v(1000, rank == 0 ? 1.0 : 3.0);
            RANK_OK(tessera_allreduce(ctx, v.data(), v.data(), v.size(), TESSERA_F64, TESSERA_AVG));
            CHILD_CHECK(v[0] == 2.0 && v[999] == 2.0, "avg %g", v[0]);
            // allgather of i32
            int32_t mine[3] = {rank, rank * 10, rank * 100};
            int32_t all[6] = {};
            RANK_OK(tessera_allgather(ctx, mine, all, 3, TESSERA_I32));
            CHILD_CHECK(all[0] == 0 && all[3] == 1 && all[5] == 100, "allgather %d %d %d", all[0],
                        all[3], all[5]);
            // reduce_scatter of f32: rank r gets block r of the sum
            float send[4] = {1.f, 2.f, 3.f, 4.f}, recv[2] = {};
            RANK_OK(tessera_reduce_scatter(ctx, send, recv, 2, TESSERA_F32, TESSERA_SUM));
            CHILD_CHECK(recv[0] == 2.f * send[2 * rank] && recv[1] == 2.f * send[2 * rank + 1],
                        "reduce_scatter %g %g", recv[0], recv[1]);
            // broadcast from rank 1; rank 0 passes no send buffer
            uint8_t bytes[5] = {};
            if (rank == 1) std::memcpy(bytes, "hello", 5);
            RANK_OK(tessera_broadcast(ctx, rank == 1 ? bytes : nullptr, bytes, 5, TESSERA_U8, 1));
            CHILD_CHECK(std::memcmp(bytes, "hello", 5) == 0, "broadcast");
            RANK_OK(tessera_barrier(ctx));
            RANK_OK(tessera_context_destroy(ctx));
            return 0;
          }),
      2);
}

// The gradients live in device memory (host memory is refused on the discrete test device):
// each step writes them with tessera_memcpy, as backward's kernels would, and reads the sums back.
TEST(CApiTwoRanks, GradSyncAveragesAcrossRanks) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int size) {
            tessera_context* ctx = nullptr;
            RANK_OK(join(rank, size, &ctx));
            tessera_grad_sync_options options{};
            options.struct_size = sizeof options;
            options.reduce = TESSERA_SUM;
            options.bucket_bytes = 4096;  // several buckets
            tessera_grad_sync* sync = nullptr;
            RANK_OK(tessera_grad_sync_create(ctx, &options, &sync));
            constexpr size_t kCount = 3000;
            std::vector<void*> grads(4, nullptr);
            for (int p = 0; p < 4; ++p) {
              RANK_OK(tessera_device_alloc(ctx, kCount * sizeof(float), &grads[size_t(p)]));
              const std::string name = "layer" + std::to_string(p);
              RANK_OK(tessera_grad_sync_add_parameter(sync, name.c_str(), nullptr, grads[size_t(p)],
                                                      kCount, TESSERA_F32, nullptr));
            }
            std::vector<float> host(kCount);
            for (int step = 0; step < 3; ++step) {
              for (int p = 3; p >= 0; --p) {
                std::fill(host.begin(), host.end(), float(rank + 1) * float(p + step));
                RANK_OK(tessera_memcpy(ctx, grads[size_t(p)], host.data(), kCount * sizeof(float)));
                RANK_OK(tessera_grad_sync_mark_ready(sync, p));
              }
              tessera_step_stats stats{};
              stats.struct_size = sizeof stats;
              RANK_OK(tessera_grad_sync_finish(sync, &stats));
              CHILD_CHECK(stats.buckets >= 2, "%zu buckets", stats.buckets);
              for (int p = 0; p < 4; ++p) {
                RANK_OK(tessera_memcpy(ctx, host.data(), grads[size_t(p)], kCount * sizeof(float)));
                const float want = 3.f * float(p + step);  // (1 + 2) x (p + step)
                CHILD_CHECK(host[0] == want && host[kCount - 1] == want,
                            "step %d param %d: %g, want %g", step, p, host[0], want);
              }
            }
            RANK_OK(tessera_grad_sync_destroy(sync));
            for (void* grad : grads) RANK_OK(tessera_device_free(ctx, grad));
            RANK_OK(tessera_context_destroy(ctx));
            return 0;
          }),
      2);
}

// Each rank holds half of a 2 x 4 tensor (row r). Saved with peer replicas; rank 1 "loses" its
// state; restore brings every rank back from memory; a load from storage agrees.
TEST(CApiTwoRanks, CheckpointShardsRestoreFromMemoryAndLoad) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tessera_c_api_2r_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  expect_all_ok(
      run_ranks(2,
                [&](int rank, int size) {
                  tessera_context* ctx = nullptr;
                  RANK_OK(join(rank, size, &ctx));
                  tessera_checkpoint_options options{};
                  options.struct_size = sizeof options;
                  options.dir = dir.c_str();
                  options.peer_replica = 1;
                  options.no_fsync = 1;
                  tessera_checkpoint* ckpt = nullptr;
                  RANK_OK(tessera_checkpoint_create(ctx, &options, &ckpt));
                  float row[4];
                  for (int i = 0; i < 4; ++i) row[i] = float(rank * 10 + i);
                  const int64_t shape[2] = {2, 4}, offset[2] = {rank, 0}, len[2] = {1, 4};
                  RANK_OK(tessera_checkpoint_add_tensor(ckpt, "w", TESSERA_F32, shape, 2, offset,
                                                        len, row, 0));
                  RANK_OK(tessera_checkpoint_save_async(ckpt, 3, nullptr));
                  int64_t step = -1;
                  RANK_OK(tessera_checkpoint_wait(ckpt, &step));
                  CHILD_CHECK(step == 3, "saved step %lld", (long long)step);
                  if (rank == 1) row[2] = -1.f;
                  int from_peer = -1;
                  step = -1;
                  RANK_OK(tessera_checkpoint_restore(ckpt, &step, &from_peer));
                  CHILD_CHECK(step == 3 && from_peer == 1, "restored step %lld from_peer %d",
                              (long long)step, from_peer);
                  CHILD_CHECK(row[2] == float(rank * 10 + 2), "restored %g", row[2]);
                  row[0] = -7.f;
                  RANK_OK(tessera_checkpoint_load(ckpt, -1, 1, &step));
                  CHILD_CHECK(step == 3 && row[0] == float(rank * 10), "loaded %g", row[0]);
                  RANK_OK(tessera_checkpoint_destroy(ckpt));
                  RANK_OK(tessera_context_destroy(ctx));
                  return 0;
                }),
      2);
  std::filesystem::remove_all(dir);
}

// A rank that leaves the job: the survivor's collective returns an error naming it (within the
// timeout), it does not hang or crash, and the context is still destroyed.
TEST(CApiTwoRanks, DeadPeerIsAnErrorNotAHang) {
  const auto results = run_ranks(2, [](int rank, int size) {
    tessera_context* ctx = nullptr;
    RANK_OK(join(rank, size, &ctx, /*timeout_ms=*/20000));
    RANK_OK(tessera_barrier(ctx));
    if (rank == 1) _exit(0);  // dies without a word
    std::vector<float> v(16, 1.f);
    const tessera_status status =
        tessera_allreduce(ctx, v.data(), v.data(), v.size(), TESSERA_F32, TESSERA_SUM);
    const std::string message = tessera_last_error();
    CHILD_CHECK(status != TESSERA_OK, "allreduce with a dead peer succeeded");
    CHILD_CHECK(
        message.find("tessera_allreduce: ") == 0 && message.find("rank 1") != std::string::npos,
        "message: %s", message.c_str());
    CHILD_CHECK(tessera_context_destroy(ctx) != TESSERA_INVALID_ARGUMENT, "destroy");
    return 0;
  });
  expect_all_ok(results, 2);
}

}  // namespace
