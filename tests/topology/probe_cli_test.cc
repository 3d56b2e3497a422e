// `tessera probe` as a user runs it: JSON that replays to the same bytes, the human views, and
// one line with exit code 2 for bad input. Runs the built binary (TESSERA_BIN).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

CliRun probe(const std::string& args) {
  // One file per process: CTest runs these tests in parallel processes.
  const std::string err_path =
      ::testing::TempDir() + "/tessera_probe_err." + std::to_string(getpid()) + ".txt";
  const std::string cmd = std::string(TESSERA_BIN) + " probe " + args + " 2>" + err_path;
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  r.err = text.str();
  std::remove(err_path.c_str());
  return r;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(ProbeCli, JsonOfTheSyntheticHostReplaysToTheSameBytes) {
  const CliRun first = probe("--synthetic 'pack:2 numa:2 core:4 pu:2' --no-ucx --json");
  ASSERT_EQ(first.code, 0) << first.err;
  const auto j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["host"]["cores"], 16);
  EXPECT_EQ(j["host"]["pus"], 32);
  const std::string saved = temp_file("probe.json", first.out);
  const CliRun replay = probe("--from-json " + saved + " --json");
  ASSERT_EQ(replay.code, 0) << replay.err;
  EXPECT_EQ(replay.out, first.out);
  std::remove(saved.c_str());
}

TEST(ProbeCli, PrintsAMatrixWithALegendAndWritesAGraph) {
  const std::string dot = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_probe.dot";
  const CliRun r = probe(std::string("--hwloc-xml ") + TESSERA_TOPOLOGY_TEST_DATA +
                         "/two_numa_4gpu.xml --no-ucx --dot " + dot);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Legend"), std::string::npos) << r.out;
  std::ifstream graph(dot);
  std::stringstream text;
  text << graph.rdbuf();
  EXPECT_EQ(text.str().rfind("graph", 0), 0u) << text.str().substr(0, 80);
  std::remove(dot.c_str());
}

TEST(ProbeCli, BadInputIsOneLineAndExitTwo) {
  const std::string bad_json = temp_file("bad_topology.json", R"({"version": 99})");
  for (const std::string& args :
       {"--from-json " + bad_json, std::string("--hwloc-xml /nonexistent.xml"),
        std::string("--cluster hosts=zero")}) {
    const CliRun r = probe(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    ASSERT_FALSE(r.err.empty()) << args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
  std::remove(bad_json.c_str());
}

}  // namespace
