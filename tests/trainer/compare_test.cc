// `tessera-train --compare A B --tolerance T`, the parameters files' comparison that the script
// tests (node_loss_test.sh) use: exit 0 within the tolerance, 1 beyond it naming the worst
// element, 2 for a file that cannot be read or two files holding other parameters, named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cli_run.h"
#include "dump.h"
#include "support.h"

namespace tessera::trainer {
namespace {

using tessera::testing::CliRun;

std::vector<NamedTensor> two_tensors() {
  return {{"embed.w", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"head.b", {4}, {0.5f, -0.5f, 0.25f, 0}}};
}

// Writes `tensors` as DIR/NAME and returns the path.
std::string dump_file(const std::string& dir, const std::string& name,
                      const std::vector<NamedTensor>& tensors) {
  const std::string path = dir + "/" + name;
  EXPECT_TRUE(write_params_file(path, tensors).ok()) << path;
  return path;
}

CliRun run_compare(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_TRAIN_BIN, "--compare", args);
}

TEST(ParamsCompare, ADifferenceBeyondTheToleranceExitsOneNamingTheElement) {
  const std::string dir = testing::fresh_dir("compare");
  std::vector<NamedTensor> moved = two_tensors();
  moved[1].values[2] = 0.375f;  // head.b[2], 0.25 before: exact in binary
  const std::string a = dump_file(dir, "a.bin", two_tensors());
  const std::string b = dump_file(dir, "b.bin", moved);
  const CliRun beyond = run_compare(a + " " + b + " --tolerance 0.1");
  EXPECT_EQ(beyond.code, 1) << beyond.out << beyond.err;
  EXPECT_NE(beyond.out.find("max |diff| 0.125 at head.b[2]: 0.25 vs 0.375 (tolerance 0.1)"),
            std::string::npos)
      << beyond.out;
  EXPECT_NE(beyond.out.find("beyond the tolerance"), std::string::npos) << beyond.out;
  // The same files within a looser tolerance, and a file against itself (bitwise).
  const CliRun within = run_compare(a + " " + b + " --tolerance 0.125");
  EXPECT_EQ(within.code, 0) << within.out << within.err;
  EXPECT_NE(within.out.find("): within"), std::string::npos) << within.out;
  const CliRun same = run_compare(a + " " + a);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("max |diff| 0 (tolerance 0): bitwise equal"), std::string::npos)
      << same.out;
  // Without --tolerance any difference is beyond it.
  EXPECT_EQ(run_compare(a + " " + b).code, 1);
}

TEST(ParamsCompare, ANotANumberIsBeyondAnyTolerance) {
  const std::string dir = testing::fresh_dir("compare_nan");
  std::vector<NamedTensor> nan = two_tensors();
  nan[0].values[4] = std::numeric_limits<float>::quiet_NaN();
  const CliRun r = run_compare(dump_file(dir, "a.bin", two_tensors()) + " " +
                               dump_file(dir, "nan.bin", nan) + " --tolerance 1e30");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("embed.w[4]"), std::string::npos) << r.out;
}

TEST(ParamsCompare, MismatchedOrUnreadableDumpsAreRefusedNamingTheFileAndTensor) {
  const std::string dir = testing::fresh_dir("compare_bad");
  const std::string a = dump_file(dir, "a.bin", two_tensors());
  std::vector<NamedTensor> reshaped = two_tensors();
  reshaped[1].shape = {2, 2};
  std::vector<NamedTensor> shorter = two_tensors();
  shorter.pop_back();
  const std::string truncated = dump_file(dir, "truncated.bin", two_tensors());
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 4);
  std::ofstream(dir + "/text.bin") << "not parameters\n";
  struct Case {
    std::string b, says;
  };
  const Case cases[] = {
      {dump_file(dir, "reshaped.bin", reshaped),
       "parameter 1 is 'head.b' [4] in the first, 'head.b' [2,2] in the second"},
      {dump_file(dir, "shorter.bin", shorter), "2 vs 1 parameters; 'head.b' is only in " + a},
      {truncated, "truncated.bin: values of head.b truncated"},
      {dir + "/text.bin", "text.bin: not a parameters file"},
      {dir + "/missing.bin", "missing.bin: cannot open the parameters file"},
  };
  for (const Case& c : cases) {
    const CliRun r = run_compare(a + " " + c.b + " --tolerance 1");
    EXPECT_EQ(r.code, 2) << c.b << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.b << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.b;
  }
}

TEST(ParamsCompare, TrainingFlagsOneFileOrABadToleranceAreRefusedByName) {
  const std::string dir = testing::fresh_dir("compare_flags");
  const std::string a = dump_file(dir, "a.bin", two_tensors());
  const CliRun steps = run_compare(a + " " + a + " --steps 3");
  EXPECT_EQ(steps.code, 2) << steps.out << steps.err;
  EXPECT_NE(steps.err.find("--steps is a training flag: not with --compare"), std::string::npos)
      << steps.err;
  const CliRun alone = tessera::testing::run_cli(TESSERA_TRAIN_BIN, "--tolerance", "1e-4");
  EXPECT_EQ(alone.code, 2) << alone.out << alone.err;
  EXPECT_NE(alone.err.find("--tolerance goes with --compare A B"), std::string::npos) << alone.err;
  const CliRun one = run_compare(a);
  EXPECT_EQ(one.code, 2) << one.out << one.err;
  EXPECT_NE(one.err.find("--compare takes two parameters files"), std::string::npos) << one.err;
  const CliRun negative = run_compare(a + " " + a + " --tolerance -1");
  EXPECT_EQ(negative.code, 2) << negative.out << negative.err;
  EXPECT_NE(negative.err.find("--tolerance -1: must be 0 or more"), std::string::npos)
      << negative.err;
}

}  // namespace
}  // namespace tessera::trainer
