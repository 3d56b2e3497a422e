// detect_launch(): who started this process, read from the environment. The order of the checks
// is the precedence documented in bootstrap.h; every error names the variable and its value.
#include <unistd.h>

#include <climits>

#include "internal.h"
#include "tessera/common/env.h"

namespace tessera::coll {
namespace {

std::string quoted(const char* name, const std::string& value) {
  return std::string(name) + "='" + value + "'";
}

// A required non-negative integer variable.
Result<int> read_int(const char* name, const char* launcher_desc) {
  auto text = env::get(name);
  if (!text) {
    return invalid_argument(std::string(launcher_desc) + " launch without " + name +
                            " in the environment");
  }
  auto parsed = env::parse_int(*text);
  if (!parsed.ok() || *parsed > INT_MAX) {
    return invalid_argument(quoted(name, *text) + " is not a non-negative integer");
  }
  return static_cast<int>(*parsed);
}

// An optional non-negative integer variable; `fallback` when unset.
Result<int> read_int_or(const char* name, int fallback) {
  auto text = env::get(name);
  if (!text) return fallback;
  auto parsed = env::parse_int(*text);
  if (!parsed.ok() || *parsed > INT_MAX) {
    return invalid_argument(quoted(name, *text) + " is not a non-negative integer");
  }
  return static_cast<int>(*parsed);
}

Status check_layout(const LaunchInfo& info, const char* rank_var, const char* size_var,
                    const char* local_rank_var, const char* local_size_var) {
  if (info.size < 1) {
    return invalid_argument(quoted(size_var, std::to_string(info.size)) + ": must be at least 1");
  }
  if (info.rank >= info.size) {
    return invalid_argument(quoted(rank_var, std::to_string(info.rank)) + " is not below " +
                            quoted(size_var, std::to_string(info.size)));
  }
  if (info.local_size < 1 || info.local_size > info.size) {
    return invalid_argument(quoted(local_size_var, std::to_string(info.local_size)) +
                            " must be in 1.." + std::to_string(info.size));
  }
  if (info.local_rank >= info.local_size) {
    return invalid_argument(quoted(local_rank_var, std::to_string(info.local_rank)) +
                            " is not below " +
                            quoted(local_size_var, std::to_string(info.local_size)));
  }
  return {};
}

// RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT (tessera launch, torchrun).
Status read_torchrun(LaunchInfo& info, const char* desc) {
  TSR_ASSIGN_OR_RETURN(info.rank, read_int("RANK", desc));
  TSR_ASSIGN_OR_RETURN(info.size, read_int("WORLD_SIZE", desc));
  // Without the local variables the job is taken to be on one host.
  TSR_ASSIGN_OR_RETURN(info.local_rank, read_int_or("LOCAL_RANK", info.rank));
  TSR_ASSIGN_OR_RETURN(info.local_size, read_int_or("LOCAL_WORLD_SIZE", info.size));
  TSR_RETURN_IF_ERROR(check_layout(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  if (info.size == 1 && !env::get("MASTER_ADDR")) return {};  // one rank needs no store
  auto addr = env::get("MASTER_ADDR");
  if (!addr || addr->empty()) {
    return invalid_argument(std::string(desc) + " launch (RANK, WORLD_SIZE set) without " +
                            "MASTER_ADDR: the ranks cannot find the TCP store");
  }
  info.store_host = *addr;
  // TESSERA_STORE_PORT moves Tessera's store off MASTER_PORT, which PyTorch's own store may use.
  const char* port_var = env::get("TESSERA_STORE_PORT") ? "TESSERA_STORE_PORT" : "MASTER_PORT";
  TSR_ASSIGN_OR_RETURN(info.store_port, read_int(port_var, desc));
  if (info.store_port < 1 || info.store_port > 65535) {
    return invalid_argument(quoted(port_var, std::to_string(info.store_port)) +
                            " is not a TCP port (1..65535)");
  }
  auto hosted = env::get("TESSERA_STORE_HOSTED");
  if (hosted) {
    if (*hosted != "0" && *hosted != "1") {
      return invalid_argument(quoted("TESSERA_STORE_HOSTED", *hosted) + ": expected 0 or 1");
    }
    info.store_hosted_by_launcher = *hosted == "1";
  }
  return {};
}

Status read_openmpi(LaunchInfo& info) {
  TSR_ASSIGN_OR_RETURN(info.rank, read_int("OMPI_COMM_WORLD_RANK", "mpirun"));
  TSR_ASSIGN_OR_RETURN(info.size, read_int("OMPI_COMM_WORLD_SIZE", "mpirun"));
  TSR_ASSIGN_OR_RETURN(info.local_rank, read_int("OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"));
  TSR_ASSIGN_OR_RETURN(info.local_size, read_int("OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"));
  return check_layout(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
}

Status read_pmix(LaunchInfo& info) {
  const std::string text = *env::get("PMIX_RANK");
  auto parsed = env::parse_int(text);
  if (!parsed.ok() || *parsed > INT_MAX) {
    return invalid_argument(quoted("PMIX_RANK", text) + " is not a non-negative integer");
  }
  if (!detail::pmix_available()) {
    return failed_precondition(quoted("PMIX_RANK", text) +
                               " says a PMIx launcher started this process, but this Tessera "
                               "was built without PMIx (install libpmix-dev and rebuild)");
  }
  TSR_ASSIGN_OR_RETURN(detail::PmixIdentity id, detail::pmix_identity());
  info.rank = id.rank;
  info.size = id.size;
  info.local_rank = id.local_rank;
  info.local_size = id.local_size;
  return check_layout(info, "PMIX_RANK", "PMIx job size", "PMIx local rank", "PMIx local size");
}

Status read_slurm(LaunchInfo& info) {
  TSR_ASSIGN_OR_RETURN(info.rank, read_int("SLURM_PROCID", "srun"));
  const char* size_var = env::get("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  TSR_ASSIGN_OR_RETURN(info.size, read_int(size_var, "srun"));
  TSR_ASSIGN_OR_RETURN(info.local_rank, read_int("SLURM_LOCALID", "srun"));
  TSR_ASSIGN_OR_RETURN(int node_id, read_int_or("SLURM_NODEID", 0));
  const char* local_var = nullptr;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (env::get(name)) {
      local_var = name;
      break;
    }
  }
  if (local_var != nullptr) {
    auto tasks = detail::slurm_tasks_on_node(*env::get(local_var), node_id);
    if (!tasks.ok()) return tasks.status().with_context(quoted(local_var, *env::get(local_var)));
    info.local_size = *tasks;
  } else {
    local_var = "SLURM_NTASKS_PER_NODE";
    TSR_ASSIGN_OR_RETURN(info.local_size, read_int("SLURM_NTASKS_PER_NODE", "srun"));
  }
  TSR_RETURN_IF_ERROR(check_layout(info, "SLURM_PROCID", size_var, "SLURM_LOCALID", local_var));
  if (env::get("PMIX_RANK")) return {};  // srun --mpi=pmix: the store is PMIx
  if (info.size == 1) return {};
  const char* list_var =
      env::get("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  auto list = env::get(list_var);
  if (!list) {
    return invalid_argument(
        "srun launch without PMIx and without SLURM_STEP_NODELIST: cannot place the TCP store");
  }
  auto host = detail::slurm_first_host(*list);
  if (!host.ok()) return host.status().with_context(quoted(list_var, *list));
  info.store_host = *host;
  if (env::get("TESSERA_STORE_PORT")) {
    TSR_ASSIGN_OR_RETURN(info.store_port, read_int("TESSERA_STORE_PORT", "srun"));
    if (info.store_port < 1 || info.store_port > 65535) {
      return invalid_argument(quoted("TESSERA_STORE_PORT", std::to_string(info.store_port)) +
                              " is not a TCP port (1..65535)");
    }
  } else {
    TSR_ASSIGN_OR_RETURN(int job, read_int("SLURM_JOB_ID", "srun"));
    TSR_ASSIGN_OR_RETURN(int step, read_int_or("SLURM_STEP_ID", 0));
    info.store_port = detail::slurm_derived_port(job, step);
  }
  return {};
}

}  // namespace

std::string_view launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone: return "none";
    case Launcher::kTessera: return "tessera";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kOpenMpi: return "openmpi";
    case Launcher::kPmix: return "pmix";
    case Launcher::kSlurm: return "slurm";
  }
  return "unknown";
}

Result<LaunchInfo> detect_launch() {
  LaunchInfo info;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) info.hostname = host;
  auto generation = env::get_int("TESSERA_GENERATION", 0);
  if (!generation.ok() || *generation > INT_MAX) {
    return invalid_argument(quoted("TESSERA_GENERATION", env::get("TESSERA_GENERATION").value()) +
                            " is not a non-negative integer");
  }
  info.generation = static_cast<int>(*generation);

  Status status;
  if (auto launcher = env::get("TESSERA_LAUNCHER")) {
    if (*launcher != "tessera") {
      return invalid_argument(quoted("TESSERA_LAUNCHER", *launcher) +
                              ": the only value is 'tessera' (set by `tessera launch`)");
    }
    info.launcher = Launcher::kTessera;
    status = read_torchrun(info, "tessera");
  } else if (env::get("RANK") || env::get("WORLD_SIZE")) {
    info.launcher = Launcher::kTorchrun;
    status = read_torchrun(info, "torchrun-style");
  } else if (env::get("OMPI_COMM_WORLD_RANK")) {
    info.launcher = Launcher::kOpenMpi;
    status = read_openmpi(info);
  } else if (env::get("PMIX_RANK")) {
    info.launcher = Launcher::kPmix;
    status = read_pmix(info);
  } else if (env::get("SLURM_PROCID")) {
    info.launcher = Launcher::kSlurm;
    status = read_slurm(info);
  }
  if (!status.ok()) return status;
  return info;
}

}  // namespace tessera::coll
