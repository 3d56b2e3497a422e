// The trainer and its checkpoint directory: a rerun resumes from `latest` instead of overwriting
// it, a directory of another run or held by another job is refused, --fresh refuses what it would
// destroy unless --overwrite, saves that keep failing end the run with exit code 3, and flags that
// can never take effect are refused. Small runs (1-2 ranks, a few steps).
#include <gtest/gtest.h>
#include <unistd.h>

#include "ckpt_dir.h"
#include "run.h"
#include "support.h"

namespace tessera::trainer {
namespace {

using testing::train;
using testing::TrainRun;

std::string latest_of(const std::string& ckpt) {
  std::string text = testing::read_file(ckpt + "/latest");
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string ckpt_args(const std::string& ckpt, int steps) {
  return "--snapshot-every 2 --ckpt-dir " + ckpt + " --steps " + std::to_string(steps);
}

TEST(CkptDir, ARerunResumesFromLatestAndEndsBitwiseEqualToOneLongRun) {
  const TrainRun whole = train(testing::fresh_dir("whole"), 2,
                               "--plan dp=2 " + ckpt_args(testing::fresh_dir("whole-ck"), 6));
  ASSERT_EQ(whole.exit_code, 0) << whole.log;
  const std::string dir = testing::fresh_dir("split"), ckpt = dir + "/ck";
  const TrainRun first = train(dir, 2, "--plan dp=2 " + ckpt_args(ckpt, 4));
  ASSERT_EQ(first.exit_code, 0) << first.log;
  EXPECT_EQ(latest_of(ckpt), "step-4") << "the final step is saved\n" << first.log;
  // The same directory again, two more steps: it must continue from step 4, not start over and
  // commit step 2 over it.
  const TrainRun second =
      train(dir, 2, "--plan dp=2 " + ckpt_args(ckpt, 6) + " --metrics " + dir + "/m.jsonl");
  ASSERT_EQ(second.exit_code, 0) << second.log;
  EXPECT_NE(second.log.find("resuming from " + ckpt + "/step-4 (latest)"), std::string::npos)
      << second.log;
  EXPECT_EQ(testing::read_file(dir + "/m.jsonl").rfind("{\"step\": 4,", 0), 0u)
      << "the first step trained is step 4";
  EXPECT_EQ(latest_of(ckpt), "step-6");
  auto cmp = compare_params(second.params, whole.params);
  ASSERT_TRUE(cmp.ok()) << cmp.status().to_string();
  EXPECT_TRUE(cmp->bitwise_equal) << "max |diff| " << cmp->max_abs_diff << " at " << cmp->worst;
}

TEST(CkptDir, ACheckpointOfAnotherRunIsRefusedUnlessAllowed) {
  const std::string dir = testing::fresh_dir("other"), ckpt = dir + "/ck";
  ASSERT_EQ(train(dir, 1, ckpt_args(ckpt, 2)).exit_code, 0);
  const TrainRun other = train(dir, 1, ckpt_args(ckpt, 4) + " --seed 8");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.log.find(ckpt + "/step-2 was written by another run (seed 7 there, 8 here)"),
            std::string::npos)
      << other.log;
  EXPECT_EQ(latest_of(ckpt), "step-2") << "nothing written";
  const TrainRun allowed = train(dir, 1, ckpt_args(ckpt, 4) + " --seed 8 --allow-other-run");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.log;
  EXPECT_EQ(latest_of(ckpt), "step-4");
}

TEST(CkptDir, FreshRefusesADirectoryWithCheckpointsUnlessOverwrite) {
  const std::string dir = testing::fresh_dir("fresh"), ckpt = dir + "/ck";
  ASSERT_EQ(train(dir, 1, ckpt_args(ckpt, 4)).exit_code, 0);
  const TrainRun refused = train(dir, 1, ckpt_args(ckpt, 2) + " --fresh");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.log.find("--ckpt-dir " + ckpt + " is not empty"), std::string::npos)
      << refused.log;
  EXPECT_EQ(latest_of(ckpt), "step-4");
  const TrainRun over = train(dir, 1, ckpt_args(ckpt, 2) + " --fresh --overwrite");
  ASSERT_EQ(over.exit_code, 0) << over.log;
  EXPECT_EQ(latest_of(ckpt), "step-2");
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/step-4")) << "the old checkpoints are deleted";
}

TEST(CkptDir, ACheckpointBeyondStepsIsRefused) {
  const std::string dir = testing::fresh_dir("beyond"), ckpt = dir + "/ck";
  ASSERT_EQ(train(dir, 1, ckpt_args(ckpt, 4)).exit_code, 0);
  const TrainRun run = train(dir, 1, ckpt_args(ckpt, 2));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.log.find("holds step 4, beyond --steps 2"), std::string::npos) << run.log;
  EXPECT_EQ(latest_of(ckpt), "step-4");
}

TEST(CkptDir, ASecondHolderOfTheLockIsRefusedNamingTheDirectoryAndTheHolder) {
  const std::string dir = testing::fresh_dir("lock");
  auto first = DirLock::acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = DirLock::acquire(dir);  // another open file: flock refuses it, same process or not
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--ckpt-dir " + dir + " is in use by another job"),
            std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid()) + " on "),
            std::string::npos)
      << second.status().message();
  first->reset();
  EXPECT_TRUE(DirLock::acquire(dir).ok()) << "released with its holder";
}

TEST(CkptDir, AJobIsRefusedWhileAnotherHoldsTheDirectory) {
  const std::string dir = testing::fresh_dir("busy"), ckpt = dir + "/ck";
  {
    auto held = DirLock::acquire(ckpt);  // the "other job"
    ASSERT_TRUE(held.ok()) << held.status().to_string();
    const TrainRun run = train(dir, 2, "--plan dp=2 " + ckpt_args(ckpt, 2));
    EXPECT_NE(run.exit_code, 0);
    // Whichever rank the launcher hears from first says why (every rank carries rank 0's reason),
    // and the job ends on it: rank 1 fails too instead of waiting (the launcher may stop it first).
    EXPECT_NE(run.log.find("is in use by another job"), std::string::npos) << run.log;
    EXPECT_TRUE(run.log.find("rank 0 refused --ckpt-dir") != std::string::npos ||
                run.log.find("rank 0 exited with code 1") != std::string::npos)
        << "rank 1 fails too, instead of waiting\n"
        << run.log;
    EXPECT_FALSE(std::filesystem::exists(ckpt + "/latest")) << "nothing written";
  }
  EXPECT_EQ(train(dir, 2, "--plan dp=2 " + ckpt_args(ckpt, 2)).exit_code, 0);
}

TEST(CkptDir, SavesThatKeepFailingEndTheRunWithExitCodeThree) {
  const std::string dir = testing::fresh_dir("enospc");
  const TrainRun run = train(dir, 2,
                             "--plan dp=2 --snapshot-every 1 --ckpt-dir " + dir +
                                 "/ck --steps 6 --fail-saves-from 1 --max-failed-saves 2");
  EXPECT_EQ(run.exit_code, kExitSavesFailing) << run.log;
  EXPECT_NE(run.log.find("2 saves to " + dir +
                         "/ck failed in a row (--max-failed-saves 2); the "
                         "last, of step 2"),
            std::string::npos)
      << run.log;
  EXPECT_NE(run.log.find("No space left on device"), std::string::npos) << run.log;
}

TEST(CkptDir, AFailedFinalSaveEndsTheRunWithExitCodeThree) {
  // One failed save is a warning; the final one failing leaves the result off storage.
  const std::string dir = testing::fresh_dir("final");
  const TrainRun run =
      train(dir, 1, "--snapshot-every 2 --ckpt-dir " + dir + "/ck --steps 4 --fail-saves-from 4");
  EXPECT_EQ(run.exit_code, kExitSavesFailing) << run.log;
  EXPECT_NE(run.log.find("the final save (step 4)"), std::string::npos) << run.log;
  EXPECT_EQ(latest_of(dir + "/ck"), "step-2");
}

TEST(TrainerFlags, FlagsThatCanNeverTakeEffectAreRefused) {
  const std::string dir = testing::fresh_dir("flags");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--steps 4 --kill-rank 0 --kill-step 4", "--kill-step 4 is never reached"},
      {"--steps 4 --kill-rank 1 --kill-step 1", "--kill-rank 1 is not a rank of this 1-rank job"},
      {"--steps 4 --kill-step 1", "--kill-rank and --kill-step go together"},
      {"--steps 4 --ckpt-dir " + dir + "/ck", "--ckpt-dir needs --snapshot-every N"},
      {"--steps 4 --snapshot-every 2 --overwrite", "--overwrite needs --fresh"},
      {"--steps 4 --snapshot-every 2 --switch-step 5 --switch-plan dp=1",
       "--switch-step 5 is never reached"},
  };
  for (const auto& [args, message] : cases) {
    const TrainRun run = train(dir, 1, args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.log;
    EXPECT_NE(run.log.find(message), std::string::npos) << args << "\n" << run.log;
  }
}

}  // namespace
}  // namespace tessera::trainer
