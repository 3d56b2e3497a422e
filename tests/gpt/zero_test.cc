// ZeRO-1/2 of the GPT trainer (examples/trainer/gpt/zero.h) over forked dp ranks against a 1-rank
// run: the losses and the gathered master weights match within the f32 tolerances of the
// parallel tests (model_test_parallel.cc), the optimizer state held per rank is 1/dp of the
// 1-rank run's (asserted from the trainer's own byte accounting), and a run repeats itself
// bitwise. zero=3 and bf16 gradients under ZeRO are refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

using coll::testing::run_ranks;

// As model_test_parallel.cc: f32 activations, the runs differ only in summation order (the dp sum
// of gradients, the norm summed per shard).
constexpr double kLossTol = 2e-5;      // relative, per step
constexpr double kParamTol = 1e-4;     // absolute, per parameter
constexpr double kParamRmsTol = 2e-6;  // over all parameters
constexpr int kSteps = 4;

Result<RunOut> run_zero_steps(const DeviceEnv& env, const GptConfig& config, ParallelGroups groups,
                              int64_t micro_batches, int zero) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.zero = zero;
  return run_steps(env, config, std::move(groups), options, kSteps);
}

int zero_body(int rank, int size, const char* file, int zero) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path(file));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, size);
  CHILD_OK(groups.status());
  auto sharded = run_zero_steps(*env, *config, *groups, 2, zero);
  CHILD_OK(sharded.status());
  auto again = run_zero_steps(*env, *config, *groups, 2, zero);
  CHILD_OK(again.status());
  auto reference = run_zero_steps(*env, *config, {}, 2 * size, 0);
  CHILD_OK(reference.status());

  // Repeats itself bitwise.
  CHILD_CHECK(sharded->losses == again->losses, "zero=%d: a second run's losses differ", zero);
  CHILD_CHECK(sharded->master.size() == again->master.size() &&
                  std::memcmp(sharded->master.data(), again->master.data(),
                              sharded->master.size() * sizeof(float)) == 0,
              "zero=%d: a second run's parameters differ", zero);

  for (int s = 0; s < kSteps; ++s) {
    const double a = sharded->losses[size_t(s)], b = reference->losses[size_t(s)];
    if (rank == 0)
      std::fprintf(stderr, "zero=%d step %d loss %.7f (1 rank %.7f)\n", zero, s + 1, a, b);
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b), "step %d loss %.9g, 1 rank %.9g", s + 1,
                a, b);
  }
  CHILD_CHECK(sharded->master.size() == reference->master.size(), "gathered %zu of %zu",
              sharded->master.size(), reference->master.size());
  double worst = 0, sum_sq = 0;
  for (size_t i = 0; i < reference->master.size(); ++i) {
    const double diff = std::abs(double(sharded->master[i]) - double(reference->master[i]));
    worst = std::max(worst, diff);
    sum_sq += diff * diff;
    CHILD_CHECK(diff <= kParamTol, "parameter %zu = %.9g, 1 rank %.9g", i,
                double(sharded->master[i]), double(reference->master[i]));
  }
  const double rms = std::sqrt(sum_sq / double(reference->master.size()));
  CHILD_CHECK(rms <= kParamRmsTol, "parameter differences: rms %.3g", rms);

  // Bytes: master, m and v hold ceil(total / dp) f32 each; the 1-rank run holds total.
  const uint64_t total = reference->master.size();
  const uint64_t shard = (total + uint64_t(size) - 1) / uint64_t(size);
  const Params::Bytes& mine = sharded->memory.params;
  const Params::Bytes& whole = reference->memory.params;
  CHILD_CHECK(sharded->zero.shard == shard, "shard %llu, want %llu",
              (unsigned long long)sharded->zero.shard, (unsigned long long)shard);
  for (uint64_t bytes : {mine.master, mine.m, mine.v}) {
    CHILD_CHECK(bytes == shard * 4, "optimizer-state buffer of %llu bytes, want %llu",
                (unsigned long long)bytes, (unsigned long long)(shard * 4));
  }
  CHILD_CHECK(whole.master == total * 4 && whole.m == total * 4 && whole.v == total * 4,
              "1-rank optimizer state %llu/%llu/%llu bytes", (unsigned long long)whole.master,
              (unsigned long long)whole.m, (unsigned long long)whole.v);
  // The gradient and the working copy stay whole (padded to shard * dp): see zero.h.
  CHILD_CHECK(mine.grad == shard * uint64_t(size) * 4, "gradient buffer %llu bytes",
              (unsigned long long)mine.grad);
  CHILD_CHECK(mine.total() < whole.total(), "ZeRO holds %llu bytes, 1 rank %llu",
              (unsigned long long)mine.total(), (unsigned long long)whole.total());
  std::fprintf(stderr,
               "rank %d zero=%d: parameters within %.3g of the 1-rank run (rms %.3g); parameter "
               "state %llu bytes (1 rank %llu)\n",
               rank, zero, worst, rms, (unsigned long long)mine.total(),
               (unsigned long long)whole.total());
  CHILD_OK(world->barrier());
  return 0;
}

void expect_zero_matches_one_rank(const char* file, int zero, int dp) {
  coll::testing::MultiprocessOptions options;
  options.deadline = std::chrono::milliseconds(240000);
  const auto results = run_ranks(
      dp, [file, zero](int rank, int size) { return zero_body(rank, size, file, zero); }, options);
  ASSERT_EQ(results.size(), size_t(dp));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
}

TEST(GptZero, ZeroOneDataParallelTwoMatchesOneRankDense) {
  expect_zero_matches_one_rank("tiny-llama.json", 1, 2);
}
TEST(GptZero, ZeroTwoDataParallelTwoMatchesOneRankDense) {
  expect_zero_matches_one_rank("tiny-llama.json", 2, 2);
}
TEST(GptZero, ZeroTwoDataParallelTwoMatchesOneRankMoe) {
  expect_zero_matches_one_rank("tiny-mixtral.json", 2, 2);
}

TEST(GptZero, RefusesWhatItCannotShard) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  TrainOptions zero3 = parallel_test_options(1);
  zero3.zero = 3;
  auto three = GptTrainer::create(*env->device, config, *env->kernels, {}, zero3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().to_string().find("zero=3"), std::string::npos)
      << three.status().to_string();
  TrainOptions bf16 = parallel_test_options(1);
  bf16.zero = 1;
  bf16.grad_comm = DType::kBF16;
  auto wire = GptTrainer::create(*env->device, config, *env->kernels, {}, bf16);
  ASSERT_FALSE(wire.ok());
  EXPECT_NE(wire.status().to_string().find("grad_comm"), std::string::npos)
      << wire.status().to_string();
}

}  // namespace
}  // namespace tessera::gpt::testing
