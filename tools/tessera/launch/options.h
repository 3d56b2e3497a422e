// `tessera launch`: what the user asked for, and the environment each rank gets.
#pragma once

#include <sched.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::tools::launch {

struct LaunchOptions {
  int nprocs = 1;
  int devices_per_rank = 0;  // 0: leave TESSERA_HOST_DEVICES and *_VISIBLE_DEVICES alone
  int timeout_s = 0;         // wall-clock limit of the whole job; 0: none
  bool tag_output = true;    // prefix each line with "[rank R] "
  int max_restarts = 0;      // restarts of failed ranks allowed in the whole job
  // The first restart is immediate (elastic recovery stays fast for one fault); restart k >= 2
  // waits min(backoff * 2^(k-2), backoff_max), so a rank that keeps crashing does not spin.
  std::chrono::milliseconds restart_backoff{1000};
  std::chrono::milliseconds restart_backoff_max{30000};
  std::chrono::milliseconds grace{3000};  // SIGTERM, then SIGKILL after this
  // "core": each rank bound to its own share of the launcher's CPUs (as mpirun --bind-to core);
  // "none"; "auto": core when there are at least as many CPUs as ranks, else none.
  std::string bind_to = "auto";
  std::vector<std::string> command;  // program and arguments
};

// The environment of local rank `rank`: `base` ("NAME=value" entries, the launcher's own) with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TESSERA_LAUNCHER,
// TESSERA_STORE_HOSTED, TESSERA_GENERATION and, with devices_per_rank K, TESSERA_HOST_DEVICES=K
// (K:discrete when the parent's value is discrete)
// and the rank's K-wide slice of CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and
// ZE_AFFINITY_MASK: a slice of the list already in `base` when set there, else of 0,1,2,...
// An error names a device list too short for nprocs * K.
Result<std::vector<std::string>> rank_environment(const LaunchOptions& options, int rank,
                                                  int store_port, int generation,
                                                  const std::vector<std::string>& base);

// The CPUs rank `rank` is bound to: its equal share of `allowed` (the launcher's own affinity)
// under --bind-to core, or auto with at least as many CPUs as ranks; nullopt: leave it alone.
std::optional<cpu_set_t> rank_cpus(const LaunchOptions& options, int rank,
                                   const cpu_set_t& allowed);

// `program` itself when it contains '/', else the first executable of that name on PATH. An
// error says why: missing, a directory, not executable.
Result<std::string> resolve_program(const std::string& program);

// One line saying why execve(`path`) failed with errno `error`: a missing #! interpreter or
// dynamic loader (ENOENT), an unknown format (ENOEXEC), a directory or a missing permission
// (EACCES), with the errno's text and name.
std::string describe_exec_failure(const std::string& path, int error);

// The job's first generation: the launcher's own TESSERA_GENERATION, 0 when unset. An error
// names the variable when it is not a non-negative integer or would overflow after
// `max_restarts` restarts.
Result<int> starting_generation(int max_restarts);

// How long the launcher waits before restart number `restart` (1 for the first) of the job.
std::chrono::milliseconds restart_delay(const LaunchOptions& options, int restart);

}  // namespace tessera::tools::launch
