// Clears every launcher variable for the life of a test and restores the previous values after,
// so detect_launch() sees only what the test sets.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace tessera::testing {

class LaunchEnvGuard {
 public:
  LaunchEnvGuard() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
  }
  ~LaunchEnvGuard() {
    for (const char* name : kNames) {
      auto it = saved_.find(name);
      if (it == saved_.end()) {
        unsetenv(name);
      } else {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }
  LaunchEnvGuard(const LaunchEnvGuard&) = delete;
  LaunchEnvGuard& operator=(const LaunchEnvGuard&) = delete;

  void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {"TESSERA_LAUNCHER",
                                           "RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "TESSERA_STORE_PORT",
                                           "TESSERA_STORE_HOSTED",
                                           "TESSERA_GENERATION",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "PMIX_RANK",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_NPROCS",
                                           "SLURM_LOCALID",
                                           "SLURM_NODEID",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_NTASKS_PER_NODE",
                                           "SLURM_STEP_NODELIST",
                                           "SLURM_JOB_NODELIST",
                                           "SLURM_JOB_ID",
                                           "SLURM_STEP_ID"};
  std::map<std::string, std::string> saved_;
};

}  // namespace tessera::testing
