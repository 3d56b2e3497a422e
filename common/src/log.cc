#include "tessera/common/log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/common/env.h"

namespace tessera::log {
namespace {

struct Config {
  Level level = Level::kWarn;
  bool exclude = false;                 // TESSERA_LOG_SUBSYS started with ^
  std::vector<std::string> subsystems;  // empty: all
};

std::mutex g_mutex;
Config g_config;
std::atomic<bool> g_loaded{false};

void apply_config(Level level, std::string_view subsystems) {
  g_config.level = level;
  g_config.exclude = !subsystems.empty() && subsystems.front() == '^';
  if (g_config.exclude) subsystems.remove_prefix(1);
  g_config.subsystems = env::split(subsystems, ",");
}

Status check_level(Level* out) {
  auto text = env::get("TESSERA_LOG");
  if (text && !parse_level(*text, out)) {
    return env::bad_value("TESSERA_LOG", *text, "expected error, warn, info, debug or trace");
  }
  return Status();
}

Status check_subsystems(std::string_view text) {
  if (!text.empty() && text.front() == '^') text.remove_prefix(1);
  for (const std::string& name : env::split(text, ",")) {
    bool known = false;
    for (std::string_view s : kSubsystems) known = known || s == name;
    if (known) continue;
    std::string list;
    for (std::string_view s : kSubsystems) list += (list.empty() ? "" : ", ") + std::string(s);
    return invalid_argument("'" + name + "' is not a subsystem (expected a comma list of " + list +
                            ", optionally after a leading ^)");
  }
  return Status();
}

// A bad value is reported once and replaced by the default: a log call has no way to fail, and
// a typo in a debugging aid should not take the logger down with it (check_environment() is
// where programs turn it into an error).
void load_once() {
  if (g_loaded.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded.load(std::memory_order_relaxed)) return;
  Level level = Level::kWarn;
  if (Status s = check_level(&level); !s.ok()) {
    level = Level::kWarn;
    std::fprintf(stderr, "[tessera error log] %s; logging at warn\n", s.message().c_str());
  }
  std::string subsystems = env::get("TESSERA_LOG_SUBSYS").value_or("");
  if (Status s = check_subsystems(subsystems); !s.ok()) {
    std::fprintf(stderr,
                 "[tessera error log] TESSERA_LOG_SUBSYS='%s': %s; logging every subsystem\n",
                 subsystems.c_str(), s.message().c_str());
    subsystems.clear();
  }
  apply_config(level, subsystems);
  g_loaded.store(true, std::memory_order_release);
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
    case Level::kTrace: return "trace";
  }
  return "?";
}

}  // namespace

bool parse_level(std::string_view text, Level* out) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i) {
    if (lower == kNames[i] || (i == 1 && lower == "warning")) {
      *out = static_cast<Level>(i);
      return true;
    }
  }
  return false;
}

Level threshold() {
  load_once();
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_config.level;
}

bool enabled(Level level, std::string_view subsystem) {
  load_once();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (level > g_config.level) return false;
  if (g_config.subsystems.empty()) return true;
  bool listed = false;
  for (const auto& s : g_config.subsystems) listed = listed || s == subsystem;
  return listed != g_config.exclude;
}

void configure(Level level, std::string_view subsystems) {
  load_once();
  std::lock_guard<std::mutex> lock(g_mutex);
  apply_config(level, subsystems);
}

Status check_environment() {
  Level level = Level::kWarn;
  TSR_RETURN_IF_ERROR(check_level(&level));
  if (auto text = env::get("TESSERA_LOG_SUBSYS")) {
    if (Status s = check_subsystems(*text); !s.ok()) {
      return env::bad_value("TESSERA_LOG_SUBSYS", *text, s.message());
    }
  }
  return Status();
}

void write(Level level, std::string_view subsystem, std::string_view message) {
  std::string line = "[tessera ";
  line += level_name(level);
  line += ' ';
  line += subsystem;
  line += " pid=" + std::to_string(::getpid()) + "] ";
  line += message;
  if (line.empty() || line.back() != '\n') line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace tessera::log
