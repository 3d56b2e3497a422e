#include "tessera/common/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace tessera::host_memory {
namespace {

// Small kernel files only (meminfo, memory.*): at most 64 KiB is read.
std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(64 << 10, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  return text;
}

std::optional<uint64_t> parse_u64(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = uint64_t(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

// The process's cgroup path for `controller` from /proc/self/cgroup: the v2 line "0::/path" when
// `controller` is empty, else the v1 line "N:a,memory,b:/path".
std::optional<std::string> cgroup_path(std::string_view self_cgroup, std::string_view controller) {
  std::istringstream lines{std::string(self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    bool match = controller.empty() ? line.substr(0, first) == "0" && controllers.empty() : false;
    if (!controller.empty()) {
      std::istringstream names(controllers);
      for (std::string name; std::getline(names, name, ',');) match = match || name == controller;
    }
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

struct Level {
  uint64_t limit = 0;
  uint64_t free = 0;
};

// One cgroup directory's limit and headroom; nullopt when it has no limit (or no files).
std::optional<Level> read_level(const std::string& dir, const char* limit_file,
                                const char* usage_file, const char* inactive_field) {
  auto limit_text = read_file(dir + "/" + limit_file);
  if (!limit_text) return std::nullopt;
  auto limit = parse_limit(*limit_text);
  if (!limit) return std::nullopt;
  uint64_t usage = 0;
  if (auto text = read_file(dir + "/" + usage_file)) usage = parse_u64(*text).value_or(0);
  // The file cache the kernel drops before it reclaims anything else is not in the way.
  if (auto stat = read_file(dir + "/memory.stat")) {
    usage -= std::min(usage, stat_field(*stat, inactive_field).value_or(0));
  }
  return Level{*limit, *limit > usage ? *limit - usage : 0};
}

// The tightest level from `mount`/`path` up to `mount`. Inside a container the mount is often
// the container's own cgroup while /proc/self/cgroup still names the host's full path: the
// levels that do not exist are skipped and the mount root is always read.
void scan(const std::string& mount, std::string path, const char* limit_file,
          const char* usage_file, const char* inactive_field, HostMemory* out) {
  std::vector<std::string> dirs;
  while (!path.empty() && path != "/") {
    dirs.push_back(mount + path);
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  dirs.push_back(mount);
  for (const std::string& dir : dirs) {
    auto level = read_level(dir, limit_file, usage_file, inactive_field);
    if (!level) continue;
    if (!out->cgroup_free || level->free < *out->cgroup_free) {
      out->cgroup_free = level->free;
      out->cgroup_limit = level->limit;
      out->cgroup_dir = dir;
    }
  }
}

}  // namespace

std::optional<uint64_t> meminfo_bytes(std::string_view meminfo, std::string_view field) {
  std::istringstream lines{std::string(meminfo)};
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || std::string_view(line).substr(0, colon) != field) continue;
    std::string value = line.substr(colon + 1);
    const size_t unit = value.find("kB");
    if (unit == std::string::npos) return std::nullopt;
    auto kib = parse_u64(std::string_view(value).substr(0, unit));
    if (!kib || *kib > (UINT64_MAX >> 10)) return std::nullopt;
    return *kib << 10;
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_limit(std::string_view text) {
  auto value = parse_u64(text);
  // v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712).
  if (!value || *value >= (uint64_t(1) << 62)) return std::nullopt;
  return value;
}

std::optional<uint64_t> stat_field(std::string_view stat, std::string_view name) {
  std::istringstream lines{std::string(stat)};
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    if (space != std::string::npos && std::string_view(line).substr(0, space) == name) {
      return parse_u64(std::string_view(line).substr(space + 1));
    }
  }
  return std::nullopt;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buffer[64];
  if (bytes < 1024) {
    std::snprintf(buffer, sizeof buffer, "%llu B", static_cast<unsigned long long>(bytes));
    return buffer;
  }
  double value = double(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(buffer, sizeof buffer, "%.1f %s", value, kUnits[unit]);
  return buffer;
}

std::string HostMemory::describe() const {
  std::string text = format_bytes(usable) + " (";
  if (available) {
    text += "MemAvailable " + format_bytes(*available);
  } else {
    text += "physical RAM " + format_bytes(physical);
  }
  if (cgroup_free) {
    text += "; cgroup " + cgroup_dir + ": limit " + format_bytes(cgroup_limit) + ", " +
            format_bytes(*cgroup_free) + " free";
  }
  return text + ")";
}

HostMemory probe(const Roots& roots) {
  HostMemory m;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) m.physical = uint64_t(pages) * uint64_t(page_size);
  if (auto meminfo = read_file(roots.proc + "/meminfo")) {
    m.available = meminfo_bytes(*meminfo, "MemAvailable");
    if (auto total = meminfo_bytes(*meminfo, "MemTotal")) m.physical = *total;
  }
  if (auto self = read_file(roots.proc + "/self/cgroup")) {
    if (auto v2 = cgroup_path(*self, "")) {
      scan(roots.cgroup, *v2, "memory.max", "memory.current", "inactive_file", &m);
    }
    if (auto v1 = cgroup_path(*self, "memory")) {
      scan(roots.cgroup + "/memory", *v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
           "total_inactive_file", &m);
    }
  }
  m.usable = m.available.value_or(m.physical);
  if (m.cgroup_free) m.usable = std::min(m.usable, *m.cgroup_free);
  return m;
}

}  // namespace tessera::host_memory
