// `tessera launch` on several nodes, emulated by two launchers on this host that meet at a
// loopback endpoint (the namespace tests in tests/multinode do it across real links, as root):
// torchrun's variables on every node, Slurm's node variables, the job token, a failure on one
// node stopping the other, and the multi-node options refused with their reason.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cli_run.h"
#include "support/launchers.h"

namespace {

using tessera::coll::testing::free_port;
using tessera::coll::testing::has;
using tessera::testing::CliRun;

// Both nodes' launchers (each bounded by 30 s), node 0's results first.
auto run_two(const std::string& node0, const std::string& node1) {
  return tessera::coll::testing::run_two_launchers(node0, node1, "nodes");
}

std::string launcher(const std::string& env, const std::string& args) {
  return tessera::coll::testing::launcher_command(env, TESSERA_BIN, 30, args);
}

TEST(LaunchNodes, TwoLaunchersFormOneJobThroughNodeZerosStore) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::string opts =
      "--nnodes 2 --nproc-per-node 2 --rdzv-endpoint " + endpoint + " --rdzv-timeout-s 20 ";
  const std::string token = "TESSERA_STORE_TOKEN=nodes-test-" + std::to_string(::getpid());
  auto [n0, n1] = run_two(launcher(token, opts + "--node-rank 0 -- " TESSERA_BOOTSTRAP_PROBE),
                          launcher(token, opts + "--node-rank 1 -- " TESSERA_BOOTSTRAP_PROBE));
  ASSERT_EQ(n0.code, 0) << n0.err;
  ASSERT_EQ(n1.code, 0) << n1.err;
  for (int r : {0, 1}) {
    const std::string rank = std::to_string(r);
    EXPECT_TRUE(has(n0.out, "[rank " + rank + "] rank " + rank + " of 4 (tessera): 0,1,2,3"))
        << n0.out;
  }
  for (int r : {2, 3}) {
    const std::string rank = std::to_string(r);
    EXPECT_TRUE(has(n1.out, "[rank " + rank + "] rank " + rank + " of 4 (tessera): 0,1,2,3"))
        << n1.out;
  }
  EXPECT_TRUE(has(n1.err, "node rank 1 of 2 joined the job at " + endpoint)) << n1.err;
}

TEST(LaunchNodes, RanksGetTorchrunsVariablesAndSlurmGivesTheNodeRank) {
  const int port = free_port();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  const std::string dir = ::testing::TempDir() + "/tsr_token_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string opts = "-n 2 --rdzv-endpoint " + endpoint + " --rdzv-token-file " + dir +
                           "/token --rdzv-timeout-s 20 ";
  // The token reaches the ranks through the environment only.
  const std::string show =
      "-- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK "
      "$GROUP_WORLD_SIZE $ROLE_RANK $ROLE_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
      "$TESSERA_STORE_HOSTED ${#TESSERA_STORE_TOKEN}'";
  auto [n0, n1] =
      run_two(launcher("env -u TESSERA_STORE_TOKEN", "--nnodes 2 --node-rank 0 " + opts + show),
              launcher("env -u TESSERA_STORE_TOKEN SLURM_NNODES=2 SLURM_NODEID=1", opts + show));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(n0.code, 0) << n0.err;
  ASSERT_EQ(n1.code, 0) << n1.err;
  const std::string tail = " 127.0.0.1 " + std::to_string(port) + " 1 32\n";
  EXPECT_TRUE(has(n0.out, "[rank 0] 0 4 0 2 0 2 0 4" + tail)) << n0.out;
  EXPECT_TRUE(has(n0.out, "[rank 1] 1 4 1 2 0 2 1 4" + tail)) << n0.out;
  EXPECT_TRUE(has(n1.out, "[rank 2] 2 4 0 2 1 2 2 4" + tail)) << n1.out;
  EXPECT_TRUE(has(n1.out, "[rank 3] 3 4 1 2 1 2 3 4" + tail)) << n1.out;
}

TEST(LaunchNodes, ARankFailingOnOneNodeStopsTheOtherNode) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::string opts = "--nnodes 2 -n 2 --rdzv-endpoint " + endpoint + " --rdzv-timeout-s 20 ";
  const std::string token = "TESSERA_STORE_TOKEN=fail-test-" + std::to_string(::getpid());
  const std::string cmd = "-- sh -c 'if [ $RANK = 3 ]; then sleep 1; exit 3; fi; exec sleep 25'";
  auto [n0, n1] = run_two(launcher(token, opts + "--node-rank 0 " + cmd),
                          launcher(token, opts + "--node-rank 1 " + cmd));
  EXPECT_EQ(n1.code, 3) << n1.err;
  EXPECT_EQ(n0.code, 3) << n0.err;
  EXPECT_TRUE(has(n1.err, "rank 3 exited with code 3")) << n1.err;
  EXPECT_TRUE(has(n0.err, "the job failed on node rank 1: rank 3 exited with code 3")) << n0.err;
}

TEST(LaunchNodes, MultiNodeOptionsAreCheckedBeforeAnythingStarts) {
  struct Case {
    std::string env, args, says;
  };
  const Case cases[] = {
      {"", "--nnodes 2 -- true", "needs --rdzv-endpoint"},
      {"", "--nnodes 2 --node-rank 2 --rdzv-endpoint 127.0.0.1:1 -- true", "not below --nnodes 2"},
      {"", "--nnodes 3:2 -- true", "MIN:MAX"},
      {"", "--nnodes 2 --rdzv-endpoint nohost -- true", "is not HOST:PORT"},
      {"SLURM_NNODES=x", "-- true", "SLURM_NNODES='x'"},
      {"env -u TESSERA_STORE_TOKEN", "--nnodes 2 --rdzv-endpoint 127.0.0.1:1 -- true",
       "TESSERA_STORE_TOKEN"},
  };
  for (const Case& c : cases) {
    const CliRun r = tessera::testing::run_cli(c.env + " " + TESSERA_BIN, "launch", c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_TRUE(has(r.err, c.says)) << c.args << ": " << r.err;
  }
}

}  // namespace
