// `tessera launch -n N [--devices-per-rank K] [--timeout-s S] [--max-restarts R]
//  [--restart-backoff-ms B] [--restart-backoff-max-ms M] [--tag-output|--no-tag-output]
//  -- CMD ARGS...`: starts N local ranks of CMD with the
// torchrun-style environment, hosts their TCP store, relays their output prefixed by
// "[rank R] ", forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and stops the job when a rank fails
// (docs/LAUNCH.md).
// Exit status: 0 when every rank succeeded, else the failed rank's code (128 + signal when it
// was killed), 124 for --timeout-s, 127 when CMD cannot be found or executed, 2 for bad options
// or a malformed TESSERA_GENERATION.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "launch/supervisor.h"

namespace tessera::tools {

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<launch::LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start N local ranks of a command (multi-host: mpirun or srun, docs/LAUNCH.md)");
  cmd->add_option("-n,--nprocs", o->nprocs, "Number of ranks")->required();
  cmd->add_option("--devices-per-rank", o->devices_per_rank,
                  "Devices per rank: sets TESSERA_HOST_DEVICES and each rank's slice of "
                  "CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK");
  cmd->add_option("--timeout-s", o->timeout_s,
                  "Stop the whole job after this many seconds (exit 124); 0 = no limit");
  cmd->add_option("--max-restarts", o->max_restarts,
                  "Restart a failed rank (same RANK, TESSERA_GENERATION+1) up to this many times "
                  "in the whole job");
  auto backoff_ms = std::make_shared<int64_t>(o->restart_backoff.count());
  auto backoff_max_ms = std::make_shared<int64_t>(o->restart_backoff_max.count());
  cmd->add_option("--restart-backoff-ms", *backoff_ms,
                  "The first restart is immediate; the second waits this long and each later "
                  "one twice as long as the one before (default 1000)");
  cmd->add_option("--restart-backoff-max-ms", *backoff_max_ms,
                  "The longest wait before a restart (default 30000)");
  cmd->add_option("--bind-to", o->bind_to,
                  "core: bind each rank to its own share of the CPUs (spinning collectives then "
                  "never wait for a descheduled peer); none; auto (default): core when there "
                  "are at least as many CPUs as ranks")
      ->check(CLI::IsMember({"auto", "core", "none"}));
  cmd->add_flag("--tag-output,!--no-tag-output", o->tag_output,
                "Prefix each output line with [rank R] (default on)");
  cmd->add_option("command", o->command, "The command each rank runs, after --")->required();
  cmd->callback([o, backoff_ms, backoff_max_ms] {
    auto fail = [](const std::string& message) {
      std::fprintf(stderr, "tessera launch: %s\n", message.c_str());
      throw CLI::RuntimeError(2);
    };
    if (o->nprocs < 1 || o->nprocs > 4096) fail("-n must be in 1..4096");
    if (o->devices_per_rank < 0) fail("--devices-per-rank must not be negative");
    if (o->timeout_s < 0) fail("--timeout-s must not be negative");
    if (o->max_restarts < 0) fail("--max-restarts must not be negative");
    // An hour bounds the doubling (restart_delay) and any wait a typo could ask for.
    constexpr int64_t kMaxBackoffMs = 3600 * 1000;
    if (*backoff_ms < 0 || *backoff_ms > kMaxBackoffMs) {
      fail("--restart-backoff-ms must be in 0..3600000");
    }
    if (*backoff_max_ms < 0 || *backoff_max_ms > kMaxBackoffMs) {
      fail("--restart-backoff-max-ms must be in 0..3600000");
    }
    o->restart_backoff = std::chrono::milliseconds(*backoff_ms);
    o->restart_backoff_max = std::chrono::milliseconds(*backoff_max_ms);
    const int code = launch::run_job(*o);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace tessera::tools
