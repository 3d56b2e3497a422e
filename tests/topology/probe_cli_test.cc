// `tessera probe` as a user runs it: JSON that replays to the same bytes, the human views, and
// one line with exit code 2 for bad input. Runs the built binary (TESSERA_BIN).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
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

// Issue 20: inputs a new user or an adversary tries, each refused by name with exit code 2.
namespace {

void expect_refused(const std::string& args, const std::string& expect) {
  const CliRun r = probe(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out.substr(0, 200);
  EXPECT_NE(r.err.find(expect), std::string::npos) << args << ": " << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
}

// The synthetic host's JSON with `edit` applied: a valid file to break one field of.
std::string replayable(const std::function<void(nlohmann::json&)>& edit) {
  const CliRun first = probe("--synthetic 'pack:1 numa:1 pu:2' --no-ucx --json");
  EXPECT_EQ(first.code, 0) << first.err;
  auto j = nlohmann::json::parse(first.out);
  edit(j);
  return j.dump();
}

TEST(ProbeBadInput, NonRegularFilesAreRefusedByNameWithoutReading) {
  expect_refused("--from-json /dev/zero", "/dev/zero: not a regular file");
  expect_refused("--from-json " + ::testing::TempDir(), ": is a directory");
}

TEST(ProbeBadInput, AnEmptySyntheticDescriptionIsNotTheLiveMachine) {
  expect_refused("--synthetic '' --no-ucx", "--synthetic: empty description");
  expect_refused("--from-json '' --no-ucx", "--from-json: empty file name");
}

TEST(ProbeBadInput, AHugeSyntheticHostIsRefusedInsteadOfHanging) {
  expect_refused("--synthetic 'pack:1000000 pu:1' --no-ucx", "more than 16384 objects");
}

TEST(ProbeBadInput, NegativeCountsAndUnknownLinkEndpointsAreRefusedByField) {
  const std::string negative =
      temp_file("negative.json", replayable([](auto& j) { j["host"]["packages"] = -3; }));
  expect_refused("--from-json " + negative, "field 'host.packages': expected an integer >= 0");
  const std::string link =
      temp_file("bad_link.json", replayable([](auto& j) {
                  j["links"] = nlohmann::json::array({{{"a", "gpu:7"},
                                                       {"b", "numa:0"},
                                                       {"type", "host-bridge"},
                                                       {"path", "PHB"},
                                                       {"bandwidth_gbps", 1.0},
                                                       {"bandwidth_source", "defaults"},
                                                       {"measured_bandwidth_gbps", nullptr},
                                                       {"measured_latency_us", nullptr}}});
                }));
  expect_refused("--from-json " + link, "field 'links[0].a': expected an accelerator id");
  std::remove(negative.c_str());
  std::remove(link.c_str());
}

TEST(ProbeBadInput, ControlCharactersInTheHostNameAreEscaped) {
  const std::string file = temp_file(
      "ctrl.json", replayable([](auto& j) { j["host"]["hostname"] = "evil\x1b[2J\nfake"; }));
  const CliRun r = probe("--from-json " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("Host evil\\x1b[2J\\x0afake"), std::string::npos) << r.out;
  std::remove(file.c_str());
}

}  // namespace
