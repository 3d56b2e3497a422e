// A rank that dies in the middle of a collective: 4 ranks (coll_fault_rank, started by fork +
// exec around a TCP store hosted here) allreduce 256 MiB in a loop with
// TESSERA_COLL_TIMEOUT_MS=30000; rank 2 SIGKILLs itself during one. Every survivor must return an
// error naming rank 2, and its next operation must fail too. The only time bound asserted is the
// parent's deadline, which turns a hang into a failure (leftover ranks are killed).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "multi_rank.h"

namespace tessera::coll::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;

TEST(Faults, SurvivorsOfAKilledRankGetAnErrorNamingItInsteadOfHanging) {
  SpawnOptions o;
  o.binary = COLL_FAULT_RANK_BIN;
  o.nranks = kRanks;
  o.deadline = std::chrono::milliseconds(120000);
  // The death is found through pidfds in milliseconds; the timeout is only the fallback, long
  // enough that a stalled (swapping, sanitized) machine does not report a timeout instead.
  o.env = {{"TESSERA_COLL_TIMEOUT_MS", "30000"}};
  const std::string prefix =
      ::testing::TempDir() + "/coll_fault." + std::to_string(getpid()) + ".rank";
  o.args = {"--victim", std::to_string(kVictim), "--out", prefix};
  auto result = spawn_ranks(o);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  ASSERT_FALSE(result->timed_out) << "a rank hung: " << result->summary();

  const RankExit& victim = result->ranks[kVictim];
  EXPECT_TRUE(!victim.exited && victim.signal == SIGKILL) << result->summary();
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    const RankExit& e = result->ranks[size_t(r)];
    EXPECT_TRUE(e.exited && e.code == 0) << result->summary();
    const std::string path = prefix + std::to_string(r);
    std::ifstream file(path);
    std::string failed, next;
    std::getline(file, failed);
    std::getline(file, next);
    std::remove(path.c_str());
    const std::string dead = "rank " + std::to_string(kVictim);
    EXPECT_NE(failed.find(dead), std::string::npos)
        << "rank " << r << "'s error does not name " << dead << ": " << failed;
    EXPECT_NE(failed.find("allreduce"), std::string::npos)
        << "rank " << r << "'s error does not name the operation: " << failed;
    EXPECT_FALSE(next.empty() || next == "OK")
        << "rank " << r << "'s next operation after the failure returned: " << next;
  }
}

}  // namespace
}  // namespace tessera::coll::testing
