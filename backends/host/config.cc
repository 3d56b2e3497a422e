#include "config.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "errors.h"
#include "tessera/common/host_memory.h"

namespace tessera::host {
namespace {

std::string trim(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

bool parse_device_count(const std::string& text, int32_t* out) {
  if (text.empty() || text.size() > 9) return false;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > kMaxDevices) return false;
  *out = static_cast<int32_t>(value);
  return true;
}

tsr_status bad_devices(const char* where, const std::string& value) {
  return fail(TSR_INVALID_ARGUMENT,
              "init: %s='%s' is not a device count (expected an integer in [0, %d])", where,
              value.c_str(), kMaxDevices);
}

// "0" or "1" (also "false"/"true", "off"/"on", "no"/"yes").
bool parse_flag(const std::string& text, bool* out) {
  if (text == "1" || text == "true" || text == "on" || text == "yes") {
    *out = true;
    return true;
  }
  if (text == "0" || text == "false" || text == "off" || text == "no") {
    *out = false;
    return true;
  }
  return false;
}

tsr_status bad_flag(const char* where, const std::string& value) {
  return fail(TSR_INVALID_ARGUMENT, "init: %s='%s' is not 0 or 1", where, value.c_str());
}

// "0" (a callback thread per stream) or "1" (one shared callback thread).
bool parse_callback_threads(const std::string& text, int32_t* out) {
  if (text != "0" && text != "1") return false;
  *out = text == "1" ? 1 : 0;
  return true;
}

tsr_status bad_callback_threads(const char* where, const std::string& value) {
  return fail(TSR_INVALID_ARGUMENT,
              "init: %s='%s' is not a callback thread count (0: one per stream, the default; 1: "
              "one shared by every stream)",
              where, value.c_str());
}

tsr_status bad_memory(const char* where, const std::string& value) {
  return fail(TSR_INVALID_ARGUMENT,
              "init: %s='%s' is not a byte count (expected e.g. 1073741824, 512M, 16G or 16GiB)",
              where, value.c_str());
}

}  // namespace

bool parse_bytes(const std::string& raw, uint64_t* out) {
  std::string text = trim(raw);
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 20) return false;
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    uint64_t digit = uint64_t(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  std::string suffix = trim(std::string_view(text).substr(digits));
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'B': shift = 0; break;
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return false;
    }
    std::string rest = suffix.substr(1);
    bool ok = suffix[0] == 'B' ? rest.empty() : (rest.empty() || rest == "B" || rest == "IB");
    if (!ok) return false;
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return false;
  value <<= shift;
  if (value == 0) return false;
  *out = value;
  return true;
}

std::string format_bytes(uint64_t bytes) {
  return host_memory::format_bytes(bytes);
}

uint64_t usable_memory_bytes(const std::string& probe_root) {
  host_memory::Roots roots;
  if (!probe_root.empty()) roots = {probe_root + "/proc", probe_root + "/sys/fs/cgroup"};
  const host_memory::HostMemory m = host_memory::probe(roots);
  if (m.physical == 0 && !m.available) return uint64_t(16) << 30;  // nothing known: a guess
  return m.usable;
}

tsr_status load_config(const char* options, Config* out) {
  Config config;
  config.memory_per_device = 0;  // set from the environment, the options or the probe below
  config.memory_source = kUsableMemorySource;
  std::string probe_root;

  if (const char* env = std::getenv(kDevicesEnv); env != nullptr && env[0] != '\0') {
    // "N" or "N:discrete"
    std::string text = trim(env);
    size_t colon = text.find(':');
    if (colon != std::string::npos) {
      std::string mode = trim(std::string_view(text).substr(colon + 1));
      if (mode != "discrete") {
        return fail(TSR_INVALID_ARGUMENT,
                    "init: %s='%s': unknown mode '%s' after the device count (expected N or "
                    "N:discrete)",
                    kDevicesEnv, env, mode.c_str());
      }
      config.discrete = true;
      text = trim(std::string_view(text).substr(0, colon));
    }
    if (!parse_device_count(text, &config.devices)) return bad_devices(kDevicesEnv, env);
  }
  if (const char* env = std::getenv(kCallbackThreadsEnv); env != nullptr && env[0] != '\0') {
    if (!parse_callback_threads(trim(env), &config.callback_threads)) {
      return bad_callback_threads(kCallbackThreadsEnv, env);
    }
  }
  if (const char* env = std::getenv(kCollectivesEnv); env != nullptr && env[0] != '\0') {
    if (!parse_flag(trim(env), &config.collectives)) return bad_flag(kCollectivesEnv, env);
  }
  if (const char* env = std::getenv(kMemoryEnv); env != nullptr && env[0] != '\0') {
    if (!parse_bytes(env, &config.memory_per_device)) return bad_memory(kMemoryEnv, env);
    config.memory_source = kMemoryEnv;
  }

  // "key=value;key=value": whitespace around keys and values is ignored, empty items skipped.
  std::string_view rest = options ? std::string_view(options) : std::string_view();
  while (!rest.empty()) {
    size_t end = rest.find(';');
    std::string item = trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return fail(TSR_INVALID_ARGUMENT,
                  "init: option '%s' is not key=value (the host backend reads devices=N, "
                  "memory=BYTES, discrete=0|1, callback_threads=0|1 and collectives=0|1)",
                  item.c_str());
    }
    std::string key = trim(std::string_view(item).substr(0, eq));
    std::string value = trim(std::string_view(item).substr(eq + 1));
    if (key == "devices") {
      if (!parse_device_count(value, &config.devices)) return bad_devices("option devices", value);
    } else if (key == "memory") {
      if (!parse_bytes(value, &config.memory_per_device)) {
        return bad_memory("option memory", value);
      }
      config.memory_source = "init option memory=";
    } else if (key == "discrete") {
      if (!parse_flag(value, &config.discrete)) return bad_flag("option discrete", value);
    } else if (key == "collectives") {
      if (!parse_flag(value, &config.collectives)) return bad_flag("option collectives", value);
    } else if (key == "memory_probe_root") {
      probe_root = value;
    } else if (key == "callback_threads") {
      if (!parse_callback_threads(value, &config.callback_threads)) {
        return bad_callback_threads("option callback_threads", value);
      }
    } else {
      return fail(TSR_INVALID_ARGUMENT,
                  "init: unknown option '%s' (the host backend reads devices=N, memory=BYTES, "
                  "discrete=0|1, callback_threads=0|1 and collectives=0|1)",
                  key.c_str());
    }
  }
  // A host device's memory is the RAM this process can really use, not the machine's: past a
  // cgroup limit the OOM killer strikes without a message, past MemAvailable the machine swaps.
  if (config.memory_per_device == 0) config.memory_per_device = usable_memory_bytes(probe_root);
  *out = config;
  return TSR_OK;
}

}  // namespace tessera::host
