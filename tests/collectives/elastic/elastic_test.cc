// Elastic recovery end to end, through the real launcher: `tessera launch -n 3 --max-restarts 1`
// runs elastic_rank; rank 1 SIGKILLs itself in generation 0, the survivors re-form with the
// restarted rank 1 in generation 1 and the job exits 0. Also: without restarts left, the death
// (first or second) stops the job with a non-zero exit.
#include <iostream>
#include <string>

#include <gtest/gtest.h>

#include "cli_run.h"
#include "support/launchers.h"

namespace {

using tessera::coll::testing::count;
using tessera::coll::testing::has;
using tessera::testing::CliRun;

CliRun launch(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_BIN, "launch", args);
}

TEST(ElasticRecovery, SurvivorsReformWithTheRestartedRankAndTheJobExitsZero) {
  const CliRun r = launch("-n 3 --max-restarts 1 --timeout-s 60 -- " ELASTIC_RANK_BIN);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "rank 1 killed by signal 9 (SIGKILL); restarting it")) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 1] rank 1: restarted in generation 1\n")) << r.out;
  for (int rank : {0, 2}) {
    const std::string tag = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank);
    EXPECT_TRUE(has(r.out, tag + ": generation 0 allreduce")) << r.out;
    EXPECT_TRUE(has(r.out, tag + ": timing: detection")) << r.out;
  }
  // The launcher published which rank it restarted (tessera/restarted_rank) for the survivors.
  EXPECT_EQ(count(r.out, "generation 1 communicator ready), restarted rank 1\n"), 2) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string tag = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank);
    EXPECT_TRUE(has(r.out, tag + ": generation 1: 10 allreduces correct across 3 ranks\n"))
        << r.out;
  }
  // The timing split, for whoever reads the log (not asserted).
  for (size_t at = r.out.find("timing:"); at != std::string::npos;
       at = r.out.find("timing:", at + 1)) {
    std::cout << r.out.substr(at, r.out.find('\n', at) - at) << "\n";
  }
}

TEST(ElasticRecovery, WithoutRestartsTheDeathStopsTheJobNonZero) {
  const CliRun r =
      launch("-n 3 --max-restarts 0 --timeout-s 60 -- " ELASTIC_RANK_BIN " --wait-ms 20000");
  EXPECT_EQ(r.code, 128 + 9) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "rank 1 killed by signal 9 (SIGKILL); stopping the other 2 ranks"))
      << r.err;
}

TEST(ElasticRecovery, ASecondFailureAfterTheRestartsAreSpentStopsTheJobNonZero) {
  const CliRun r =
      launch("-n 3 --max-restarts 1 --timeout-s 60 -- " ELASTIC_RANK_BIN " --kill-again");
  // Usually 137 (rank 1's second death); 1 when a survivor's own exit on seeing it is reaped first.
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "restarting it"), 1) << r.err;
  EXPECT_TRUE(has(r.err, "; stopping the other 2 ranks")) << r.err;
}

}  // namespace
