// Node loss with --nnodes MIN:MAX, through the real launcher: two launchers on this host (node
// ranks 0 and 1, two ranks each) meet at a loopback endpoint and run shrink_rank; rank 2 SIGKILLs
// node 1's launcher (its ranks die with it). With --nnodes 1:2 node 0's launcher re-forms the job
// on node 0 alone: its ranks get generation 1 as ranks 0 and 1 of 2 (old ranks 0,1), allreduce
// across the two, and the job exits 0 naming the lost node. With --nnodes 2:2 the same loss fails
// the job naming the node and the minimum. Node 0 notices the loss after 10 s of silence.
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "support/launchers.h"

namespace {

using tessera::coll::testing::has;
using tessera::coll::testing::NodeRun;

// Both launchers of a `--nnodes NNODES --nproc-per-node 2` job running shrink_rank, each bounded
// by 60 s; what node 0 printed and its exit code.
NodeRun run_node_loss(const std::string& nnodes, const std::string& rank_flags) {
  namespace t = tessera::coll::testing;
  const std::string token = "TESSERA_STORE_TOKEN=shrink-test-" + std::to_string(::getpid());
  const std::string opts = "--nnodes " + nnodes + " --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:" +
                           std::to_string(t::free_port()) + " --rdzv-timeout-s 20 --timeout-s 50";
  auto node = [&](int n) {
    return t::launcher_command(
        token, TESSERA_BIN, 60,
        opts + " --node-rank " + std::to_string(n) + " -- " + SHRINK_RANK_BIN + " " + rank_flags);
  };
  return t::run_two_launchers(node(0), node(1), "shrink").first;
}

TEST(NodeLoss, SurvivorsReformOnFewerNodesAndTheJobExitsZero) {
  const NodeRun n0 = run_node_loss("1:2", "");
  ASSERT_EQ(n0.code, 0) << n0.out << n0.err;
  EXPECT_TRUE(has(n0.err, "node rank 1 (")) << n0.err;
  EXPECT_TRUE(has(n0.err,
                  "the job re-forms on 1 of 2 nodes (--nnodes 1:2): ranks 0..1 were "
                  "ranks 0,1, TESSERA_GENERATION=1"))
      << n0.err;
  for (int rank : {0, 1}) {
    const std::string tag = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank);
    EXPECT_TRUE(has(n0.out, tag + ": generation 1: rank " + std::to_string(rank) +
                                " of 2, local rank " + std::to_string(rank) +
                                " of 2, old ranks [0,1], shrunk\n"))
        << n0.out;
    EXPECT_TRUE(has(n0.out, tag + ": generation 1: 5 allreduces correct across 2 ranks\n"))
        << n0.out;
  }
}

TEST(NodeLoss, BelowTheMinimumTheLossFailsTheJobNamingTheNode) {
  const NodeRun n0 = run_node_loss("2:2", "--wait-ms 40000");
  EXPECT_EQ(n0.code, 1) << n0.out << n0.err;
  EXPECT_TRUE(has(n0.err, "node rank 1 (")) << n0.err;
  EXPECT_TRUE(has(n0.err,
                  "stopped answering for 10 s; 1 of 2 nodes left, fewer than --nnodes "
                  "minimum 2; stopping 2 rank(s) on this node"))
      << n0.err;
  EXPECT_FALSE(has(n0.err, "re-forms")) << n0.err;
}

}  // namespace
