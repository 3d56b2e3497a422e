// `tessera launch` as a user runs it, for the launcher tests (bootstrap/launch_*_cli_test.cc,
// elastic/): text checks on what a job printed, a free loopback port, and two launchers on this
// host as the two nodes of one job. Header-only; needs GoogleTest (TempDir, EXPECT).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace tessera::coll::testing {

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// How many times `part` occurs in `text` (overlapping occurrences count).
inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The whole file, or "" when it cannot be read.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A port nothing listens on now (bound to port 0 and released).
inline int free_port() {
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

// What one node's launcher printed and its exit code.
struct NodeRun {
  int code = -1;
  std::string out, err;
};

// One node's launcher as a shell command: "ENV timeout -s KILL SECONDS TESSERA launch ARGS"
// (`env` may be empty or start with `env -u ...`; `tessera` is the binary's path).
inline std::string launcher_command(const std::string& env, const std::string& tessera,
                                    int timeout_s, const std::string& args) {
  return env + " timeout -s KILL " + std::to_string(timeout_s) + " " + tessera + " launch " + args;
}

// Runs the launchers of nodes 1 and 0 at once (two shell commands, e.g. launcher_command's) and
// returns what each printed and its exit code, node 0 first. `tag` names the scratch folder
// (TempDir/tsr_TAG_PID, removed afterwards).
inline std::pair<NodeRun, NodeRun> run_two_launchers(const std::string& node0,
                                                     const std::string& node1,
                                                     const std::string& tag) {
  const std::string dir = ::testing::TempDir() + "/tsr_" + tag + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto line = [&](const std::string& launch, int node) {
    const std::string base = dir + "/n" + std::to_string(node);
    return "(" + launch + " >" + base + ".out 2>" + base + ".err; echo $? >" + base + ".code)";
  };
  {
    std::ofstream script(dir + "/run.sh");
    script << line(node1, 1) << " &\n" << line(node0, 0) << "\nwait\n";
  }
  const int status = std::system(("sh " + dir + "/run.sh").c_str());
  EXPECT_EQ(status, 0);
  std::pair<NodeRun, NodeRun> runs;
  for (int node = 0; node < 2; ++node) {
    NodeRun& r = node == 0 ? runs.first : runs.second;
    const std::string base = dir + "/n" + std::to_string(node);
    r.code = std::atoi(slurp(base + ".code").c_str());
    r.out = slurp(base + ".out");
    r.err = slurp(base + ".err");
  }
  std::filesystem::remove_all(dir);
  return runs;
}

}  // namespace tessera::coll::testing
