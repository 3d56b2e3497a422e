// `tessera plan`'s contract: JSON fields, exit code 2 with one line for bad input, the timeline
// file. Runs the built binary (TESSERA_BIN).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

using tessera::testing::CliRun;

CliRun run(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_BIN, "plan", args);
}

TEST(PlanCli, JsonCarriesTheContractFields) {
  const CliRun r =
      run("--model llama2-7b --cluster dgx-a100-80gb --devices 8 --global-batch 64 "
          "--seq-len 4096 --top 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"]["params"].get<int64_t>(), 6738415616);
  ASSERT_EQ(j["plans"].size(), 3u);
  for (const char* key :
       {"tp", "pp", "dp", "cp", "ep", "vp", "mbs", "num_microbatches", "zero", "recompute", "sp",
        "step_time_s", "tokens_per_s", "model_tflops_per_device", "mfu", "memory_gib_per_device",
        "breakdown", "memory_breakdown_gib"}) {
    EXPECT_TRUE(j["plans"][0].contains(key)) << key;
  }
  // Every term of the step, and nothing else: they add up to step_time_s.
  double sum = 0;
  for (const char* key :
       {"compute_s", "bubble_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "cp_comm_s", "ep_comm_s",
        "optimizer_s", "memory_bound_s", "launch_s", "grad_clip_s", "embedding_sync_s"}) {
    ASSERT_TRUE(j["plans"][0]["breakdown"].contains(key)) << key;
    sum += j["plans"][0]["breakdown"][key].get<double>();
  }
  EXPECT_EQ(j["plans"][0]["breakdown"].size(), 12u);
  EXPECT_NEAR(sum, j["plans"][0]["step_time_s"].get<double>(),
              1e-9 * j["plans"][0]["step_time_s"].get<double>());
  EXPECT_LE(j["plans"][0]["step_time_s"].get<double>(), j["plans"][1]["step_time_s"].get<double>());
  const auto& p = j["plans"][0];
  EXPECT_EQ(p["tp"].get<int>() * p["pp"].get<int>() * p["dp"].get<int>() * p["cp"].get<int>(), 8);
  EXPECT_GT(j["search"]["candidates"].get<int64_t>(), j["search"]["feasible"].get<int64_t>());
  EXPECT_TRUE(j["search"].contains("elapsed_ms"));
}

TEST(PlanCli, ModelNotesShowInTextAndJson) {
  // What the loader left out of the cost is said where the plan is read, not only in the IR.
  const std::string args =
      "--model deepseek-v3 --cluster dgx-h100 --devices 2048 --global-batch 4096 "
      "--seq-len 4096 --top 1 --fix tp=2,pp=16,ep=64,mbs=1,zero=1,recompute=full,sp=1";
  const CliRun text = run(args);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("note     the multi-token-prediction layer"), std::string::npos)
      << text.out;
  const CliRun json = run(args + " --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["model"]["notes"].size(), 1u);
  EXPECT_NE(j["model"]["notes"][0].get<std::string>().find("multi-token-prediction"),
            std::string::npos);
  // A model without notes has an empty list, so readers need not test for the key.
  const CliRun plain =
      run("--model llama2-7b --cluster dgx-a100-80gb --devices 8 --global-batch 64 --seq-len 4096 "
          "--top 1 --json");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_TRUE(nlohmann::json::parse(plain.out)["model"]["notes"].empty());
}

TEST(PlanCli, FixedValuesShowUpInEveryPlan) {
  const CliRun r =
      run("--model llama2-13b --cluster dgx-a100-80gb --devices 16 --global-batch 64 "
          "--seq-len 4096 --fix tp=4,recompute=full --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // a named value: the loop must not outlive it
  for (const auto& p : j["plans"]) {
    EXPECT_EQ(p["tp"].get<int>(), 4);
    EXPECT_EQ(p["recompute"].get<std::string>(), "full");
  }
}

TEST(PlanCli, BadInputExitsTwoWithOneLine) {
  const std::string base = "--cluster dgx-a100-80gb --devices 48 --global-batch 96 --seq-len 4096 ";
  struct Case {
    std::string args, expect;
  };
  const std::string config = ::testing::TempDir() + "/tessera_bad_config.json";
  {
    std::ofstream out(config);
    out << R"({"hidden_size": 4096, "num_hidden_layers": 2, "intermediate_size": 8,
               "vocab_size": 10})";
  }
  for (const Case& c : {
           Case{base + "--model llama2-7b --fix tp=3",
                "tp=3 does not divide num_attention_heads 32"},
           Case{base + "--model llama2-7b --fix pp=48", "pp=48 exceeds the model's 32 layers"},
           Case{base + "--model " + config, "field 'num_attention_heads' missing"},
           Case{base + "--model llama2-7b --fix zero=5", "zero must be an integer in 0..3"},
           Case{base + "--model llama2-7b --bogus", "unexpected argument '--bogus'"},
           Case{base + "--model llama2-7b --zero3 fsdp",
                "--zero3 must be flat or hierarchical, got 'fsdp'"},
           Case{"--model llama3-405b --cluster dgx-a100-80gb --devices 8 --global-batch 8 "
                "--seq-len 4096",
                "the smallest needs"},
       }) {
    const CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

// The published ZeRO-3 runs' layout across hosts: flat (DeepSpeed, the default) is bound by one
// NIC per device, hierarchical by the compute; --explain names the ZeRO-3 traffic.
TEST(PlanCli, ZeroThreeFlatIsTheDefaultAndHierarchicalIsFaster) {
  const std::string args =
      "--model gpt3-175b --cluster dgx-a100-80gb --devices 768 --global-batch 768 --seq-len 2048 "
      "--attention materialized --fix tp=1,pp=1,dp=768,mbs=1,zero=3,recompute=full";
  auto step = [&](const std::string& extra) {
    const CliRun r = run(args + extra + " --json");
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["plans"][0]["step_time_s"].get<double>();
  };
  const double flat = step(""), hierarchical = step(" --zero3 hierarchical");
  EXPECT_EQ(step(" --zero3 flat"), flat);
  EXPECT_GT(flat, 2 * hierarchical);
  const CliRun r = run(args + " --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bound by ZeRO-3 gathers and reduce-scatters"), std::string::npos) << r.out;
}

TEST(PlanCli, TimelineAndExplain) {
  const std::string svg = ::testing::TempDir() + "/tessera_plan_timeline.svg";
  const CliRun r =
      run("--model llama2-13b --cluster dgx-a100-80gb --devices 32 --global-batch 64 "
          "--seq-len 4096 --fix pp=4 --explain --timeline " +
          svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Why plan 1"), std::string::npos);
  EXPECT_NE(r.out.find("bound by"), std::string::npos);
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("<svg", 0), 0u);
  EXPECT_NE(text.str().find("stage 3"), std::string::npos);
  std::remove(svg.c_str());
}

TEST(PlanCli, PhasesReportWhenSwitchingPays) {
  const std::string phases = ::testing::TempDir() + "/tessera_phases.json";
  {
    std::ofstream out(phases);
    out << R"({"switch_overhead_s": 60, "phases": [
      {"name": "short", "steps": 1000, "global_batch": 256, "seq_len": 2048},
      {"name": "long", "steps": 1000, "global_batch": 32, "seq_len": 16384},
      {"name": "lost host", "steps": 10, "global_batch": 32, "seq_len": 16384, "devices": 24}]})";
  }
  const CliRun r =
      run("--model llama2-13b --cluster dgx-a100-80gb --devices 32 --phases " + phases + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["phases"].size(), 3u);
  EXPECT_TRUE(j["phases"][0]["switched"].get<bool>());
  // Losing a host changes the device count: the old layout cannot be kept.
  EXPECT_TRUE(j["phases"][2].contains("keep_impossible"));
  EXPECT_TRUE(j["phases"][2]["switched"].get<bool>());
  std::remove(phases.c_str());
}

TEST(PlanCli, CalibratesTheHostBackendAndPlansForIt) {
  const std::string file = ::testing::TempDir() + "/tessera_calibration.json";
  const CliRun cal = run("--calibrate --device host:0 --calibration-out " + file + " --json");
  ASSERT_EQ(cal.code, 0) << cal.err;
  const auto c = nlohmann::json::parse(cal.out);
  EXPECT_EQ(c["backend"], "host");
  // The training dtype's GEMMs (--dtype, bf16 by default), sizes doubling from 128.
  EXPECT_EQ(c["dtype"], "bf16");
  ASSERT_GE(c["gemm"].size(), 2u);
  EXPECT_EQ(c["gemm"][0]["n"], 128);
  EXPECT_EQ(c["gemm"][1]["n"], 256);
  for (const auto& point : c["gemm"]) EXPECT_GT(point["tflops"].get<double>(), 0);
  EXPECT_GT(c["d2d_copy_gbps"].get<double>(), 0);
  EXPECT_GT(c["fit"]["peak_tflops"].get<double>(), 0);
  // Without --cluster the plan is for the calibrated local devices; a model small enough for one.
  const std::string model = ::testing::TempDir() + "/tessera_tiny_gpt2.json";
  {
    std::ofstream out(model);
    out << R"({"n_embd": 256, "n_layer": 2, "n_head": 4, "n_positions": 128,
               "vocab_size": 1000})";
  }
  const CliRun r = run("--calibration " + file + " --model " + model +
                       " --global-batch 8 --seq-len 128 --top 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["plans"].size(), 1u);
  EXPECT_GT(j["plans"][0]["step_time_s"].get<double>(), 0);
  std::remove(file.c_str());
  std::remove(model.c_str());
}

TEST(PlanCli, CalibrationMeasuresTheDtypeAskedForAndRefusesOthers) {
  const std::string file = ::testing::TempDir() + "/tessera_calibration_fp16.json";
  const CliRun fp16 = run("--calibrate --dtype fp16 --calibration-out " + file + " --json");
  ASSERT_EQ(fp16.code, 0) << fp16.err;
  EXPECT_EQ(nlohmann::json::parse(fp16.out)["dtype"], "fp16");
  const CliRun bad = run("--calibrate --dtype int8 --calibration-out " + file);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("dtype must be bf16, fp16 or f32, got 'int8'"), std::string::npos)
      << bad.err;
  std::remove(file.c_str());
}

TEST(PlanCli, ABadCalibrationFileIsOneLineAndExitTwo) {
  const std::string file = ::testing::TempDir() + "/tessera_bad_calibration.json";
  {
    std::ofstream out(file);
    out << R"({"version": 1, "devices": 1})";
  }
  const CliRun r =
      run("--calibration " + file + " --model llama2-7b --global-batch 8 --seq-len 128");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(file + ": field 'memory_gib' missing"), std::string::npos) << r.err;
  std::remove(file.c_str());
}

TEST(PlanCli, PlansForAClusterSpecWrittenByTesseraProbe) {
  // What `tessera probe --preset ... --json` writes is a topology cluster spec (a list of host
  // groups); the planner converts it.
  const std::string spec =
      ::testing::TempDir() + "/tessera_probe_cluster." + std::to_string(getpid()) + ".json";
  const std::string probe =
      std::string(TESSERA_BIN) + " probe --preset dgx-a100-80gb --json > " + spec + " 2>/dev/null";
  const int status = std::system(probe.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && std::ifstream(spec).peek() == EOF) {
    GTEST_SKIP() << "this build has no topology layer (tessera probe)";
  }
  ASSERT_EQ(status, 0);
  const CliRun r = run("--model llama2-7b --cluster " + spec +
                       " --global-batch 64 --seq-len 4096 --top 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cluster"]["devices_per_host"], 8);
  EXPECT_DOUBLE_EQ(j["cluster"]["memory_gib"].get<double>(), 80.0);
  ASSERT_EQ(j["plans"].size(), 1u);
  std::remove(spec.c_str());
}

}  // namespace
