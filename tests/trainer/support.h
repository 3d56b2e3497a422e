// Runs tessera-train under the real `tessera launch` and reads back its final parameters.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dump.h"

namespace tessera::trainer::testing {

// This process's scratch directory (removed when the test program ends).
inline std::filesystem::path scratch_root() {
  return std::filesystem::temp_directory_path() / ("tessera-trainer-" + std::to_string(getpid()));
}

class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(scratch_root(), ec);
  }
};

// A fresh directory under the test's temporary directory.
inline std::string fresh_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir =
      scratch_root() / (std::string(info ? info->name() : "x") + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The small model every test trains (fast on two cores): 4 blocks so that two stages exist.
inline const char* kModelArgs =
    "--hidden 32 --blocks 4 --classes 8 --global-batch 16 --lr 0.01 --seed 7 --log-every 0";

struct TrainRun {
  int exit_code = -1;
  std::string log;
  std::vector<NamedTensor> params;
};

// `tessera launch -n ranks [launch_args] tessera-train kModelArgs args --params-out ...`.
inline TrainRun train(const std::string& dir, int ranks, const std::string& args,
                      const std::string& launch_args = "") {
  TrainRun run;
  const std::string params = dir + "/final.bin", log = dir + "/log.txt";
  const std::string cmd = std::string(TESSERA_LAUNCH_BIN) + " launch -n " + std::to_string(ranks) +
                          " --timeout-s 100 " + launch_args + " -- " + TESSERA_TRAIN_BIN + " " +
                          kModelArgs + " " + args + " --params-out " + params + " > " + log +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.log = read_file(log);
  auto p = read_params_file(params);
  if (p.ok()) run.params = std::move(p).value();
  return run;
}

}  // namespace tessera::trainer::testing
