// `tessera launch -n N [--nnodes N|MIN:MAX --node-rank R --rdzv-endpoint HOST:PORT
//  [--rdzv-bind ADDR] [--rdzv-timeout-s T] [--rdzv-token-file F]] [--devices-per-rank K]
//  [--timeout-s S] [--max-restarts R] [--restart-backoff-ms B] [--restart-backoff-max-ms M]
//  [--tag-output|--no-tag-output] -- CMD ARGS...`: starts N local ranks of CMD with the
// torchrun-style environment, hosts their TCP store (node rank 0) or joins it, relays their
// output prefixed by "[rank R] ", forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and stops the job on
// every node when a rank fails (docs/LAUNCH.md).
// Exit status: 0 when every rank succeeded, else the failed rank's code (128 + signal when it
// was killed), 124 for --timeout-s, 127 when CMD cannot be found or executed, 2 for bad options
// or a malformed TESSERA_GENERATION.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "launch/supervisor.h"

namespace tessera::tools {

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<launch::LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start the ranks of a command on this node; one launcher per node (docs/LAUNCH.md)");
  cmd->add_option("-n,--nprocs,--nproc-per-node", o->nprocs, "Ranks on this node (default 1)");
  auto nnodes = std::make_shared<std::string>();
  cmd->add_option("--nnodes", *nnodes,
                  "Nodes in the job, N or MIN:MAX (starts on MAX, re-forms on the nodes left after "
                  "a node loss while at least MIN); default "
                  "SLURM_NNODES, else 1");
  CLI::Option* node_rank =
      cmd->add_option("--node-rank", o->node_rank,
                      "This node's rank, 0..nnodes-1; default SLURM_NODEID, else 0. Node 0 hosts "
                      "the store");
  cmd->add_option("--rdzv-endpoint", o->rdzv_endpoint,
                  "HOST:PORT of node rank 0's store, which it binds (required with several "
                  "nodes)");
  cmd->add_option("--rdzv-bind", o->rdzv_bind,
                  "The address node 0's store binds instead of the endpoint's host (0.0.0.0: "
                  "every interface)");
  cmd->add_option("--rdzv-timeout-s", o->rdzv_timeout_s,
                  "How long a launcher waits for the store and for every node (default 120)");
  cmd->add_option("--rdzv-token-file", o->rdzv_token_file,
                  "Without TESSERA_STORE_TOKEN: node 0 writes the job token to this file (mode "
                  "0600) and the other nodes read it (a shared file system)");
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
  cmd->callback([o, backoff_ms, backoff_max_ms, nnodes, node_rank] {
    auto fail = [](const std::string& message) {
      std::fprintf(stderr, "tessera launch: %s\n", message.c_str());
      throw CLI::RuntimeError(2);
    };
    if (o->nprocs < 1 || o->nprocs > 4096) fail("-n must be in 1..4096");
    if (node_rank->count() > 0 && o->node_rank < 0) fail("--node-rank must not be negative");
    if (!nnodes->empty()) {
      const size_t colon = nnodes->find(':');
      const std::string low = nnodes->substr(0, colon);
      const std::string high = colon == std::string::npos ? low : nnodes->substr(colon + 1);
      char* end_low = nullptr;
      char* end_high = nullptr;
      const long min = std::strtol(low.c_str(), &end_low, 10);
      const long max = std::strtol(high.c_str(), &end_high, 10);
      if (low.empty() || high.empty() || *end_low != '\0' || *end_high != '\0' || min < 1 ||
          max < min || max > 4096) {
        fail("--nnodes '" + *nnodes + "': expected N or MIN:MAX with 1 <= MIN <= MAX <= 4096");
      }
      o->nnodes_min = static_cast<int>(min);
      o->nnodes_max = static_cast<int>(max);
      o->nnodes_given = true;
    }
    if (Status nodes = launch::resolve_nodes(*o); !nodes.ok()) fail(nodes.message());
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
