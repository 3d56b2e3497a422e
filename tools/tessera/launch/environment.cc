#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

#include "options.h"
#include "tessera/common/env.h"

namespace tessera::tools::launch {
namespace {

void set_var(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  const std::string prefix = name + "=";
  for (std::string& entry : env) {
    if (entry.rfind(prefix, 0) == 0) {
      entry = prefix + value;
      return;
    }
  }
  env.push_back(prefix + value);
}

const std::string* find_var(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const std::string& entry : env) {
    if (entry.rfind(prefix, 0) == 0) return &entry;
  }
  return nullptr;
}

}  // namespace

Result<std::vector<std::string>> rank_environment(const LaunchOptions& options,
                                                  const NodePlacement& placement, int local_rank,
                                                  int generation,
                                                  const std::vector<std::string>& base) {
  std::vector<std::string> env = base;
  const int rank = local_rank;  // device slices and binding are per node
  const std::string n = std::to_string(options.nprocs);
  const std::string global = std::to_string(placement.global_rank(options.nprocs, local_rank));
  const std::string world = std::to_string(placement.nnodes * options.nprocs);
  set_var(env, "RANK", global);
  set_var(env, "WORLD_SIZE", world);
  set_var(env, "LOCAL_RANK", std::to_string(local_rank));
  set_var(env, "LOCAL_WORLD_SIZE", n);
  set_var(env, "GROUP_RANK", std::to_string(placement.group_rank()));
  set_var(env, "GROUP_WORLD_SIZE", std::to_string(placement.nnodes));
  set_var(env, "ROLE_RANK", global);
  set_var(env, "ROLE_WORLD_SIZE", world);
  set_var(env, "ROLE_NAME", "default");
  set_var(env, "MASTER_ADDR", placement.store_host);
  set_var(env, "MASTER_PORT", std::to_string(placement.store_port));
  set_var(env, "TESSERA_LAUNCHER", "tessera");
  set_var(env, "TESSERA_STORE_HOSTED", "1");
  set_var(env, "TESSERA_GENERATION", std::to_string(generation));
  // The store is the launcher's; a TESSERA_STORE_PORT meant for another job must not redirect,
  // and only this job's token opens it.
  std::erase_if(env, [](const std::string& e) { return e.rfind("TESSERA_STORE_PORT=", 0) == 0; });
  if (placement.token.empty()) {
    std::erase_if(env,
                  [](const std::string& e) { return e.rfind("TESSERA_STORE_TOKEN=", 0) == 0; });
  } else {
    set_var(env, "TESSERA_STORE_TOKEN", placement.token);
  }
  // A notice meant for an enclosing job's ranks must not abort this job's.
  if (placement.abort_notice.empty()) {
    std::erase_if(env,
                  [](const std::string& e) { return e.rfind("TESSERA_ABORT_NOTICE=", 0) == 0; });
  } else {
    set_var(env, "TESSERA_ABORT_NOTICE", placement.abort_notice);
  }
  const int k = options.devices_per_rank;
  if (k <= 0) return env;
  // The count changes; a mode after it ("N:discrete", device memory the CPU cannot touch) is the
  // job's choice and stays.
  std::string mode;
  if (const std::string* entry = find_var(env, "TESSERA_HOST_DEVICES")) {
    if (const size_t colon = entry->find(':'); colon != std::string::npos) {
      mode = entry->substr(colon);
    }
  }
  set_var(env, "TESSERA_HOST_DEVICES", std::to_string(k) + mode);
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"}) {
    std::vector<std::string> devices;
    if (const std::string* entry = find_var(env, name)) {
      devices = env::split(entry->substr(std::string(name).size() + 1), ",");
      if (devices.size() < static_cast<size_t>(options.nprocs) * static_cast<size_t>(k)) {
        return invalid_argument(std::string(name) + "='" + entry->substr(std::strlen(name) + 1) +
                                "' lists " + std::to_string(devices.size()) + " devices; -n " + n +
                                " --devices-per-rank " + std::to_string(k) + " needs " +
                                std::to_string(options.nprocs * k));
      }
    } else {
      for (int i = 0; i < options.nprocs * k; ++i) devices.push_back(std::to_string(i));
    }
    std::string slice;
    for (int i = rank * k; i < (rank + 1) * k; ++i) {
      slice += (slice.empty() ? "" : ",") + devices[static_cast<size_t>(i)];
    }
    set_var(env, name, slice);
  }
  return env;
}

namespace {

// Why `path` cannot be run, checked before fork so the common mistakes get their reason: a
// directory passes access(X_OK) (its search bit) and execve would only say EACCES.
Status check_executable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return not_found("command '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return not_found("command '" + path + "' is a directory");
  if (::access(path.c_str(), X_OK) != 0) {
    return not_found("command '" + path + "' is not executable: " + std::strerror(errno));
  }
  return {};
}

// The interpreter named by the file's "#!" line, or "" when it has none.
std::string shebang_interpreter(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[256] = {};
  in.read(head, sizeof head - 1);
  const std::string_view text(head, static_cast<size_t>(in.gcount()));
  if (!text.starts_with("#!")) return "";
  std::string_view line = text.substr(2, text.find('\n') - 2);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  return std::string(line.substr(0, line.find_first_of(" \t\r")));
}

}  // namespace

std::optional<cpu_set_t> rank_cpus(const LaunchOptions& options, int rank,
                                   const cpu_set_t& allowed) {
  if (options.bind_to == "none") return std::nullopt;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  const int n = options.nprocs;
  if (cpus.empty() || (options.bind_to != "core" && int(cpus.size()) < n)) return std::nullopt;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  const size_t share = std::max<size_t>(1, cpus.size() / size_t(n));
  for (size_t k = 0; k < share; ++k) {
    CPU_SET(cpus[(size_t(rank) * share + k) % cpus.size()], &mine);
  }
  return mine;
}

Result<std::string> resolve_program(const std::string& program) {
  if (program.empty()) return invalid_argument("empty command");
  if (program.find('/') != std::string::npos) {
    TSR_RETURN_IF_ERROR(check_executable(program));
    return program;
  }
  const auto path = env::get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  for (const std::string& dir : env::split(path, ":")) {
    const std::string candidate = dir + "/" + program;
    if (check_executable(candidate).ok()) return candidate;
  }
  return not_found("command '" + program + "' not found on PATH");
}

std::string describe_exec_failure(const std::string& path, int error) {
  const char* name = strerrorname_np(error);
  const std::string why =
      std::string(std::strerror(error)) + ", " + (name != nullptr ? name : std::to_string(error));
  std::string reason;
  switch (error) {
    case ENOENT: {
      // The file was there a moment ago (resolve_program): what is missing is its interpreter.
      const std::string interpreter = shebang_interpreter(path);
      reason = !interpreter.empty()
                   ? "its interpreter '" + interpreter + "' (from the #! line) was not found"
                   : "the file or its program interpreter (the dynamic loader) was not found";
      break;
    }
    case ENOEXEC:
      reason = "not a program this machine can run (no #! line and not a binary for it)";
      break;
    case EACCES: {
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        reason = "it is a directory";
      } else {
        const std::string interpreter = shebang_interpreter(path);
        reason = "permission denied (no execute permission on it" +
                 (interpreter.empty() ? std::string() : " or on '" + interpreter + "'") +
                 ", or its file system is mounted noexec)";
      }
      break;
    }
    default: reason = "execve failed";
  }
  return "cannot execute '" + path + "': " + reason + " (" + why + ")";
}

Status parse_endpoint(const std::string& text, std::string* out_host, int* out_port) {
  const std::string bad = "--rdzv-endpoint '" + text + "' is not HOST:PORT";
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return invalid_argument(bad);
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return invalid_argument(bad);
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return invalid_argument(bad + " (write an IPv6 address as [ADDR]:PORT)");
  }
  auto port = env::parse_int(text.substr(colon + 1));
  if (!port.ok() || *port < 1 || *port > 65535) {
    return invalid_argument(bad + " (the port must be in 1..65535)");
  }
  *out_host = host;
  *out_port = static_cast<int>(*port);
  return {};
}

namespace {

// A Slurm variable as a count or index; `what` says which option it stands for.
Result<int> slurm_number(const char* name, const char* what) {
  auto text = env::get(name);
  auto parsed = env::parse_int(*text);
  if (!parsed.ok() || *parsed > 1000000) {
    return invalid_argument(std::string(name) + "='" + *text + "' (standing for " + what +
                            ") is not a non-negative integer");
  }
  return static_cast<int>(*parsed);
}

}  // namespace

Status resolve_nodes(LaunchOptions& options) {
  if (!options.nnodes_given && env::get("SLURM_NNODES")) {
    TSR_ASSIGN_OR_RETURN(options.nnodes_max, slurm_number("SLURM_NNODES", "--nnodes"));
    options.nnodes_min = options.nnodes_max;
  }
  if (options.node_rank < 0 && env::get("SLURM_NODEID")) {
    TSR_ASSIGN_OR_RETURN(options.node_rank, slurm_number("SLURM_NODEID", "--node-rank"));
  }
  if (options.node_rank < 0) options.node_rank = 0;
  if (options.nnodes_min < 1 || options.nnodes_min > options.nnodes_max ||
      options.nnodes_max > 4096) {
    return invalid_argument("--nnodes " + std::to_string(options.nnodes_min) + ":" +
                            std::to_string(options.nnodes_max) +
                            ": expected N or MIN:MAX with 1 <= MIN <= MAX <= 4096");
  }
  if (options.node_rank >= options.nnodes_max) {
    return invalid_argument("--node-rank " + std::to_string(options.node_rank) +
                            " is not below --nnodes " + std::to_string(options.nnodes_max));
  }
  if (int64_t{options.nnodes_max} * options.nprocs > 1 << 20) {
    return invalid_argument("--nnodes " + std::to_string(options.nnodes_max) +
                            " x --nproc-per-node " + std::to_string(options.nprocs) +
                            " ranks is more than 2^20");
  }
  if (options.nnodes_max > 1 && options.rdzv_endpoint.empty()) {
    return invalid_argument("--nnodes " + std::to_string(options.nnodes_max) +
                            " needs --rdzv-endpoint HOST:PORT (node rank 0's address, where it "
                            "hosts the store)");
  }
  if (!options.rdzv_endpoint.empty()) {
    std::string host;
    int port = 0;
    TSR_RETURN_IF_ERROR(parse_endpoint(options.rdzv_endpoint, &host, &port));
  }
  if (options.rdzv_timeout_s < 1 || options.rdzv_timeout_s > 86400) {
    return invalid_argument("--rdzv-timeout-s must be in 1..86400");
  }
  return {};
}

std::chrono::milliseconds restart_delay(const LaunchOptions& options, int restart) {
  if (restart <= 1) return std::chrono::milliseconds(0);
  // Doubling, saturated at the cap (64 doublings would overflow; 40 already pass any cap).
  const int64_t cap = options.restart_backoff_max.count();
  int64_t delay = options.restart_backoff.count();
  for (int k = 2; k < restart && delay > 0 && delay < cap; ++k) delay *= 2;
  return std::chrono::milliseconds(std::min(delay, cap));
}

Result<int> starting_generation(int max_restarts) {
  auto generation = env::get_int("TESSERA_GENERATION", 0);
  if (!generation.ok()) return generation.status();
  // Each restart adds one; the sum must stay an int (it is passed on as TESSERA_GENERATION).
  if (*generation > std::numeric_limits<int>::max() - max_restarts) {
    return out_of_range("environment variable TESSERA_GENERATION: " + std::to_string(*generation) +
                        " is too large (with --max-restarts " + std::to_string(max_restarts) +
                        " it must stay below 2^31)");
  }
  return static_cast<int>(*generation);
}

}  // namespace tessera::tools::launch
