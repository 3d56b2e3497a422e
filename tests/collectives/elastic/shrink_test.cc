// Node loss with --nnodes MIN:MAX, through the real launcher: two launchers on this host (node
// ranks 0 and 1, two ranks each) meet at a loopback endpoint and run shrink_rank; rank 2 SIGKILLs
// node 1's launcher (its ranks die with it). With --nnodes 1:2 node 0's launcher re-forms the job
// on node 0 alone: its ranks get generation 1 as ranks 0 and 1 of 2 (old ranks 0,1), allreduce
// across the two, and the job exits 0 naming the lost node. With --nnodes 2:2 the same loss fails
// the job naming the node and the minimum. Node 0 notices the loss after 10 s of silence.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A port nothing listens on now (bound to port 0 and released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct NodeRun {
  int code = -1;
  std::string out, err;
};

// Both launchers of a `--nnodes NNODES --nproc-per-node 2` job running shrink_rank, each bounded
// by 60 s; what node 0 printed and its exit code.
NodeRun run_node_loss(const std::string& nnodes, const std::string& rank_flags) {
  const std::string dir = ::testing::TempDir() + "/tsr_shrink_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string token = "TESSERA_STORE_TOKEN=shrink-test-" + std::to_string(::getpid());
  const std::string opts = "--nnodes " + nnodes + " --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:" +
                           std::to_string(free_port()) + " --rdzv-timeout-s 20 --timeout-s 50";
  auto line = [&](int node) {
    const std::string base = dir + "/n" + std::to_string(node);
    return "(" + token + " timeout -s KILL 60 " + TESSERA_BIN + " launch " + opts +
           " --node-rank " + std::to_string(node) + " -- " + SHRINK_RANK_BIN + " " + rank_flags +
           " >" + base + ".out 2>" + base + ".err; echo $? >" + base + ".code)";
  };
  {
    std::ofstream script(dir + "/run.sh");
    script << line(1) << " &\n" << line(0) << "\nwait\n";
  }
  EXPECT_EQ(std::system(("sh " + dir + "/run.sh").c_str()), 0);
  NodeRun r;
  r.code = std::atoi(slurp(dir + "/n0.code").c_str());
  r.out = slurp(dir + "/n0.out");
  r.err = slurp(dir + "/n0.err");
  std::filesystem::remove_all(dir);
  return r;
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
