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

#include "cli_run.h"

namespace {

using tessera::testing::CliRun;

CliRun probe(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_BIN, "probe", args);
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
