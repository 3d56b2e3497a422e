// Elastic recovery: a rank SIGKILLed in the middle of training is restarted by `tessera launch
// --max-restarts`, the survivors re-form with it, its state comes back from its buddy's memory,
// and the run ends with the same bits as a run without the fault.
#include <gtest/gtest.h>

#include <random>

#include "support.h"

namespace tessera::trainer {
namespace {

using testing::train;
using testing::TrainRun;

constexpr const char* kRecoveryArgs = " --steps 6 --snapshot-every 2";

void expect_recovers_bitwise(const std::string& plan, int kill_rank, int kill_step,
                             const TrainRun* fault_free = nullptr) {
  TrainRun clean;
  if (fault_free == nullptr) {
    clean =
        train(testing::fresh_dir("clean"), 4,
              "--plan " + plan + kRecoveryArgs + " --ckpt-dir " + testing::fresh_dir("clean-ckpt"));
    fault_free = &clean;
  }
  ASSERT_EQ(fault_free->exit_code, 0) << fault_free->log;
  const std::string dir =
      testing::fresh_dir("fault-r" + std::to_string(kill_rank) + "-s" + std::to_string(kill_step));
  const TrainRun faulted =
      train(dir, 4,
            "--plan " + plan + kRecoveryArgs + " --ckpt-dir " + dir + "/ckpt" + " --kill-rank " +
                std::to_string(kill_rank) + " --kill-step " + std::to_string(kill_step),
            "--max-restarts 1");
  ASSERT_EQ(faulted.exit_code, 0) << faulted.log;
  EXPECT_NE(faulted.log.find("recovered"), std::string::npos) << faulted.log;
  auto cmp = compare_params(faulted.params, fault_free->params);
  ASSERT_TRUE(cmp.ok()) << cmp.status().to_string() << "\n" << faulted.log;
  EXPECT_TRUE(cmp->bitwise_equal) << "kill rank " << kill_rank << " at step " << kill_step
                                  << ": max |diff| " << cmp->max_abs_diff << " at " << cmp->worst
                                  << "\n"
                                  << faulted.log;
}

TEST(Recovery, KilledRankRestartsAndTheRunEndsBitwiseEqualToAFaultFreeRun) {
  expect_recovers_bitwise("dp=2,tp=2", 2, 3);
}

TEST(Recovery, LongRandomKillsAlwaysRecoverBitwise) {
  // 10 trials: a random plan, a random rank, a random step (0 = right after start).
  const char* env = std::getenv("TESSERA_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  std::printf("seed %llu (TESSERA_TEST_SEED to repeat)\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> plans = {"dp=2,pp=2,mbs=4", "dp=2,tp=2", "dp=4,zero=1",
                                          "tp=2,pp=2,mbs=2"};
  std::vector<TrainRun> clean(plans.size());
  for (int trial = 0; trial < 10; ++trial) {
    const size_t plan = size_t(rng() % plans.size());
    const int rank = int(rng() % 4), step = int(rng() % 6);
    std::printf("trial %d: plan %s, kill rank %d at step %d (0-based)\n", trial,
                plans[plan].c_str(), rank, step);
    if (clean[plan].exit_code != 0) {
      clean[plan] = train(testing::fresh_dir("clean" + std::to_string(plan)), 4,
                          "--plan " + plans[plan] + kRecoveryArgs + " --ckpt-dir " +
                              testing::fresh_dir("clean-ckpt" + std::to_string(plan)));
    }
    expect_recovers_bitwise(plans[plan], rank, step, &clean[plan]);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace tessera::trainer
