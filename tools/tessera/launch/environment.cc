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

Result<std::vector<std::string>> rank_environment(const LaunchOptions& options, int rank,
                                                  int store_port, int generation,
                                                  const std::vector<std::string>& base) {
  std::vector<std::string> env = base;
  const std::string n = std::to_string(options.nprocs);
  set_var(env, "RANK", std::to_string(rank));
  set_var(env, "WORLD_SIZE", n);
  set_var(env, "LOCAL_RANK", std::to_string(rank));
  set_var(env, "LOCAL_WORLD_SIZE", n);
  set_var(env, "MASTER_ADDR", "127.0.0.1");
  set_var(env, "MASTER_PORT", std::to_string(store_port));
  set_var(env, "TESSERA_LAUNCHER", "tessera");
  set_var(env, "TESSERA_STORE_HOSTED", "1");
  set_var(env, "TESSERA_GENERATION", std::to_string(generation));
  // The store is the launcher's; a TESSERA_STORE_PORT meant for another job must not redirect.
  std::erase_if(env, [](const std::string& e) { return e.rfind("TESSERA_STORE_PORT=", 0) == 0; });
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
