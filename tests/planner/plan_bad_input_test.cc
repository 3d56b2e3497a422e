// `tessera plan` on the inputs a new user or an adversary tries (issue 20): each is refused with
// exit code 2 and one line naming the field or flag, quickly, instead of a wrong plan, a crash
// or minutes of work. Runs the built binary (TESSERA_BIN).
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cli_run.h"

namespace {

using tessera::testing::CliRun;

CliRun run(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_BIN, "plan", args);
}

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << content;
  return path;
}

void expect_refused(const std::string& args, const std::string& expect) {
  const CliRun r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.err.find(expect), std::string::npos) << args << ": " << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_TRUE(r.out.empty()) << args;
}

const std::string kWorkload = " --global-batch 8 --seq-len 128";

std::string cluster_json(const std::string& counts, const std::string& peak,
                         const std::string& intra_gbps) {
  return R"({"name": "c", )" + counts + R"(, "device": {"name": "x", "memory_gib": 80,
            "peak_tflops": )" +
         peak + R"(, "memory_bandwidth_gbps": 2000},
            "intra_host": {"link": "nvswitch", "bandwidth_gbps": )" +
         intra_gbps + "}}";
}

TEST(PlanBadInput, ALayerWhoseParameterCountWouldWrapIsRefusedByField) {
  // vocab x hidden = 1.4e19 wrapped to a negative count: the model "fit" in 0 GiB.
  const std::string model = temp_file("wrap.json", R"({"name": "wrap", "hidden": 64, "layers": [
      {"type": "embedding", "vocab": 216172782113783808}, {"type": "attention", "heads": 4},
      {"type": "mlp"}, {"type": "norm"}, {"type": "lm_head", "vocab": 100}]})");
  expect_refused("--model " + model + " --cluster dgx-h100" + kWorkload,
                 "layers[0]: field 'vocab' must be an integer in 0..16777216");
  const std::string config = temp_file("huge_hf.json", R"({"hidden_size": 4611686018427387904,
      "num_hidden_layers": 2, "num_attention_heads": 1, "intermediate_size": 8,
      "vocab_size": 10})");
  expect_refused("--model " + config + " --cluster dgx-h100" + kWorkload,
                 "field 'hidden_size' must be a positive integer (at most 16777216)");
}

TEST(PlanBadInput, AnAbsurdRepeatIsRefusedBeforeItIsAllocated) {
  const std::string model = temp_file("repeat.json", R"({"name": "r", "hidden": 64, "layers": [
      {"type": "embedding", "vocab": 100},
      {"repeat": 65536, "layers": [{"type": "attention", "heads": 4}, {"type": "mlp"}]},
      {"type": "lm_head", "vocab": 100}]})");
  expect_refused("--model " + model + " --cluster dgx-h100" + kWorkload,
                 "layers[1]: repeat 65536 x 2 layers exceeds the limit of 65536");
}

TEST(PlanBadInput, AZeroPeakOrLinkBandwidthIsRefusedNotPricedAsNaN) {
  const std::string counts = R"("hosts": 1, "devices_per_host": 8)";
  const std::string no_bf16 =
      temp_file("no_bf16.json", cluster_json(counts, R"({"bf16": 0, "fp16": 100})", "300"));
  expect_refused("--model llama2-7b --cluster " + no_bf16 + kWorkload,
                 "device.peak_tflops.bf16 is 0");
  // The fp16 figure is there: planning in fp16 works.
  EXPECT_EQ(run("--model llama2-7b --cluster " + no_bf16 + kWorkload + " --dtype fp16").code, 0);
  const std::string no_link =
      temp_file("no_link.json", cluster_json(counts, R"({"bf16": 100})", "0"));
  expect_refused("--model llama2-7b --cluster " + no_link + kWorkload,
                 "intra_host.bandwidth_gbps must be a positive finite number");
}

TEST(PlanBadInput, FractionalCountsAreRefusedNotTruncated) {
  const std::string c =
      temp_file("frac.json",
                cluster_json(R"("hosts": 1, "devices_per_host": 8.5)", R"({"bf16": 100})", "300"));
  expect_refused("--model llama2-7b --cluster " + c + kWorkload,
                 "field 'devices_per_host' must be an integer in 1..4096, got 8.5");
}

TEST(PlanBadInput, AHugeGlobalBatchIsRefusedAtTheFlag) {
  // 2^63-1 divided by zero (SIGFPE); 735134400 enumerated divisors for minutes.
  for (const char* batch : {"9223372036854775807", "735134400"}) {
    expect_refused(std::string("--model llama2-7b --cluster dgx-h100 --devices 64 --seq-len 4096 "
                               "--global-batch ") +
                       batch,
                   "--global-batch must be an integer in 1..16777216");
  }
}

TEST(PlanBadInput, ASearchTooLargeIsRefusedUpFrontWithWhatToFix) {
  // 2000 attention + 2000 MLP blocks that differ: the exact partition DP would run ~90 s.
  std::string layers = R"({"type": "embedding", "vocab": 100})";
  for (int i = 0; i < 2000; ++i)
    layers += R"(, {"type": "attention", "heads": 4}, {"type": "mlp"})";
  const std::string model =
      temp_file("deep.json", R"({"name": "deep", "hidden": 64, "layers": [)" + layers +
                                 R"(, {"type": "norm"}, {"type": "lm_head", "vocab": 100}]})");
  expect_refused("--model " + model +
                     " --cluster dgx-h100 --devices 64 --global-batch 64 "
                     "--seq-len 128",
                 "the search is too large");
  // Narrowed by fixed values, the same model plans.
  EXPECT_EQ(run("--model " + model +
                " --cluster dgx-h100 --devices 64 --global-batch 64 "
                "--seq-len 128 --fix pp=2,tp=4,cp=1,vp=1,sp=0,mbs=1,recompute=none,zero=1")
                .code,
            0);
}

TEST(PlanBadInput, ADuplicateFixKeyIsRefused) {
  expect_refused("--model llama2-7b --cluster dgx-h100" + kWorkload + " --fix tp=8,tp=1",
                 "--fix: 'tp' given twice");
}

TEST(PlanBadInput, NonRegularModelAndClusterFilesAreRefusedByName) {
  expect_refused("--model /dev/zero --cluster dgx-h100" + kWorkload,
                 "/dev/zero: not a regular file");
  const std::string dir = ::testing::TempDir();
  expect_refused("--model " + dir + " --cluster dgx-h100" + kWorkload, ": is a directory");
  expect_refused("--model llama2-7b --cluster " + dir + kWorkload, ": is a directory");
}

TEST(PlanBadInput, ControlCharactersInNamesAreEscapedInTheTable) {
  const std::string c =
      temp_file("ctrl.json", R"({"name": "evil\u001b[2J", "hosts": 1, "devices_per_host": 8,
      "device": {"name": "x\ny", "memory_gib": 80, "peak_tflops": {"bf16": 100},
                 "memory_bandwidth_gbps": 2000},
      "intra_host": {"link": "nvswitch", "bandwidth_gbps": 300}})");
  const CliRun r = run("--model llama2-7b --cluster " + c + kWorkload + " --top 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("evil\\x1b[2J"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x\\x0ay"), std::string::npos) << r.out;
}

}  // namespace
