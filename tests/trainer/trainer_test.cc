// The reference trainer reaches the single-rank parameters under every kind of plan, and the same
// plan twice gives the same bits.
//
// Tolerance: the runs differ only in the order of fp32 sums (DP averages per-rank means, TP splits
// the inner dimension of W2 and of W1's input gradient into partial sums, PP accumulates
// micro-batch gradients, ZeRO-1 reduce-scatters instead of allreducing). Each of those
// differences is a few ulp of a gradient (~1e-7 relative). Adam divides by sqrt(v), so a few-ulp
// gradient difference gives at most ~1e-6 relative change of an update of size lr, and over
// 6 steps parameters (|w| ~ 0.2, lr 0.01) move by < 0.06. We accept max |a - b| <= 2e-4, which is
// ~1e-3 of an update over all steps and far below what a wrong gradient (an error of the order
// of the update, 1e-2) would give; the tests print the measured difference.
#include <gtest/gtest.h>

#include "support.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::trainer {
namespace {

using testing::train;
using testing::TrainRun;

constexpr double kTolerance = 5e-5;

// Runs, checkpoints and logs go to a per-process directory, removed at the end.
[[maybe_unused]] ::testing::Environment* const kScratch =
    ::testing::AddGlobalTestEnvironment(new testing::RemoveScratch);
constexpr const char* kSteps = " --steps 6";

const TrainRun& reference() {
  static const TrainRun ref = [] {
    return train(testing::fresh_dir("reference"), 1, std::string("--plan dp=1") + kSteps);
  }();
  return ref;
}

void expect_matches_reference(int ranks, const std::string& plan) {
  const TrainRun& ref = reference();
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  ASSERT_FALSE(ref.params.empty()) << ref.log;
  const TrainRun run = train(testing::fresh_dir("run"), ranks, "--plan " + plan + kSteps);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  auto cmp = compare_params(run.params, ref.params);
  ASSERT_TRUE(cmp.ok()) << cmp.status().to_string();
  std::printf("plan %s: max |diff| %.3g (max rel %.3g), worst %s\n", plan.c_str(),
              cmp->max_abs_diff, cmp->max_rel_diff, cmp->worst.c_str());
  EXPECT_LE(cmp->max_abs_diff, kTolerance) << "worst " << cmp->worst << "\n" << run.log;
}

TEST(Trainer, PureDataParallelOnFourRanksMatchesOneRank) {
  expect_matches_reference(4, "dp=4");
}

TEST(Trainer, DataAndTensorParallelTwoByTwoMatchesOneRank) {
  expect_matches_reference(4, "dp=2,tp=2");
}

TEST(Trainer, DataAndPipelineParallelTwoByTwoMatchesOneRank) {
  expect_matches_reference(4, "dp=2,pp=2,mbs=2");
}

TEST(Trainer, TensorAndPipelineParallelTwoByTwoMatchesOneRank) {
  expect_matches_reference(4, "tp=2,pp=2,mbs=4");
}

TEST(Trainer, ZeroOneDataParallelOnFourRanksMatchesOneRank) {
  expect_matches_reference(4, "dp=4,zero=1");
}

TEST(Trainer, SwitchingPlanInMemoryMidRunMatchesOneRank) {
  // DP4 for 4 steps, then a doubled batch under DP2 x TP2: the state moves through
  // Checkpointer::reshard_from_memory; the single rank makes the same batch change.
  const std::string args =
      " --steps 8 --snapshot-every 2 --switch-step 4 --switch-batch 32 --switch-plan ";
  const TrainRun ref =
      train(testing::fresh_dir("ref"), 1,
            "--plan dp=1" + args + "dp=1 --ckpt-dir " + testing::fresh_dir("ref-ck"));
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  const std::string run_ck = testing::fresh_dir("run-ck");
  const TrainRun run =
      train(testing::fresh_dir("run"), 4, "--plan dp=4" + args + "dp=2,tp=2 --ckpt-dir " + run_ck);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_NE(run.log.find("plan switch before step 5"), std::string::npos) << run.log;
  // Saves after the switch record the plan the state is laid out in, not the first one.
  auto saved = ckpt::read_manifest(run_ck, ckpt::read_latest(run_ck).value());
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_GT(saved->step, 4);
  EXPECT_EQ(saved->layout.rfind("tp=2 pp=1 dp=2 ", 0), 0u) << saved->layout;
  auto cmp = compare_params(run.params, ref.params);
  ASSERT_TRUE(cmp.ok()) << cmp.status().to_string();
  std::printf("switch dp=4 -> dp=2,tp=2: max |diff| %.3g, worst %s\n", cmp->max_abs_diff,
              cmp->worst.c_str());
  EXPECT_LE(cmp->max_abs_diff, kTolerance) << cmp->worst << "\n" << run.log;
}

TEST(Trainer, SamePlanTwiceGivesTheSameBits) {
  const std::string args = std::string("--plan tp=2,pp=2,mbs=2") + kSteps;
  const TrainRun a = train(testing::fresh_dir("a"), 4, args);
  const TrainRun b = train(testing::fresh_dir("b"), 4, args);
  ASSERT_EQ(a.exit_code, 0) << a.log;
  ASSERT_EQ(b.exit_code, 0) << b.log;
  auto cmp = compare_params(a.params, b.params);
  ASSERT_TRUE(cmp.ok()) << cmp.status().to_string();
  EXPECT_TRUE(cmp->bitwise_equal) << "max |diff| " << cmp->max_abs_diff << " at " << cmp->worst;
  EXPECT_EQ(params_checksum(a.params), params_checksum(b.params));
}

TEST(Trainer, ABrokenGradientWouldBeCaught) {
  // The comparison can fail: a run with another learning rate ends elsewhere.
  const TrainRun& ref = reference();
  ASSERT_EQ(ref.exit_code, 0) << ref.log;
  const TrainRun run =
      train(testing::fresh_dir("lr"), 1, std::string("--plan dp=1 --lr 0.0101") + kSteps);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  auto cmp = compare_params(run.params, ref.params);
  ASSERT_TRUE(cmp.ok());
  EXPECT_GT(cmp->max_abs_diff, kTolerance);
}

TEST(Trainer, RejectsAPlanThatDoesNotMatchTheWorld) {
  const TrainRun run = train(testing::fresh_dir("bad"), 2, "--plan dp=4 --steps 1");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.log.find("tp*pp*dp = 4 but the job has 2 ranks"), std::string::npos) << run.log;
}

}  // namespace
}  // namespace tessera::trainer
