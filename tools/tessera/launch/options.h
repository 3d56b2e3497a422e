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
  int nprocs = 1;  // ranks on this node (--nproc-per-node, -n)
  // Multi-node (torchrun's conventions, docs/LAUNCH.md): --nnodes N or MIN:MAX (the job starts
  // on MAX nodes and, losing one, re-forms on the survivors while they are at least MIN), this
  // launcher's --node-rank, and the store's
  // --rdzv-endpoint HOST:PORT, hosted by node rank 0. node_rank and the node counts come from
  // SLURM_NODEID / SLURM_NNODES when not given (resolve_nodes). No endpoint: one node, a store on
  // 127.0.0.1 at a free port.
  int nnodes_min = 1;
  int nnodes_max = 1;
  bool nnodes_given = false;
  int node_rank = -1;  // -1: not given
  std::string rdzv_endpoint;
  std::string rdzv_bind;        // address node 0's store binds; "" = the endpoint's host
  int rdzv_timeout_s = 120;     // joining the store and waiting for every node
  std::string rdzv_token_file;  // node 0 writes the generated token here, the others read it
  int devices_per_rank = 0;     // 0: leave TESSERA_HOST_DEVICES and *_VISIBLE_DEVICES alone
  int timeout_s = 0;            // wall-clock limit of the whole job; 0: none
  bool tag_output = true;       // prefix each line with "[rank R] "
  int max_restarts = 0;         // restarts of failed ranks allowed in the whole job
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

// Where this launcher sits in the job and where its ranks find the store.
struct NodePlacement {
  int node_rank = 0;
  int nnodes = 1;       // the job's nodes now (fewer than --nnodes MAX after a node loss)
  int node_index = -1;  // this node's place among them after a node loss; -1: node_rank
  std::string store_host = "127.0.0.1";  // MASTER_ADDR
  int store_port = 0;                    // MASTER_PORT
  std::string token;                     // TESSERA_STORE_TOKEN; empty: none
  std::string abort_notice;              // TESSERA_ABORT_NOTICE (abort_notice.h); empty: none
  int group_rank() const { return node_index >= 0 ? node_index : node_rank; }
  int global_rank(int nprocs, int local_rank) const { return group_rank() * nprocs + local_rank; }
};

// The environment of local rank `local_rank`: `base` ("NAME=value" entries, the launcher's own)
// with torchrun's RANK (group_rank() * nprocs + local_rank), WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK (group_rank(): the node rank until a node loss re-forms the job),
// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE,
// ROLE_NAME, MASTER_ADDR, MASTER_PORT, and TESSERA_LAUNCHER, TESSERA_STORE_HOSTED,
// TESSERA_STORE_TOKEN (removed when the placement has none), TESSERA_ABORT_NOTICE (likewise),
// TESSERA_GENERATION and, with
// devices_per_rank K, TESSERA_HOST_DEVICES=K (K:discrete when the parent's value is discrete)
// and the rank's K-wide slice of CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and
// ZE_AFFINITY_MASK: a slice of the list already in `base` when set there, else of 0,1,2,...
// An error names a device list too short for nprocs * K.
Result<std::vector<std::string>> rank_environment(const LaunchOptions& options,
                                                  const NodePlacement& placement, int local_rank,
                                                  int generation,
                                                  const std::vector<std::string>& base);

// Fills the node counts and node rank from SLURM_NNODES / SLURM_NODEID when the options leave
// them unset, and checks the multi-node options together: an error names the option or variable
// (a node rank not below the node count, several nodes without --rdzv-endpoint, ...).
Status resolve_nodes(LaunchOptions& options);

// "host:port" or "[v6]:port" -> host and port (1..65535). An error quotes the text.
Status parse_endpoint(const std::string& text, std::string* out_host, int* out_port);

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
