#include <unistd.h>

#include <cstring>

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

Result<std::string> resolve_program(const std::string& program) {
  if (program.empty()) return invalid_argument("empty command");
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) != 0) {
      return not_found("command '" + program + "' is not an executable file");
    }
    return program;
  }
  const auto path = env::get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  for (const std::string& dir : env::split(path, ":")) {
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return not_found("command '" + program + "' not found on PATH");
}

}  // namespace tessera::tools::launch
