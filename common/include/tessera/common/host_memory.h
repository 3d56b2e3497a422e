// How much RAM this process can really allocate: the smaller of the kernel's MemAvailable and the
// headroom of every memory cgroup (v2 or v1) it lives in, from the process's own cgroup up to the
// root. A limit a container sets is enforced by the OOM killer without a message and physical RAM
// beyond MemAvailable is reached by swapping, so neither sysconf's physical RAM nor MemTotal is
// the figure a program should size its buffers by.
//
// Dependency-free (the C++ standard library only), so the host backend links it too: a host
// device's memory is this RAM (the one use a backend makes of common/). Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::host_memory {

struct HostMemory {
  uint64_t usable = 0;    // bytes: the smallest of the known figures below (physical if none)
  uint64_t physical = 0;  // bytes: sysconf physical pages x page size (MemTotal); 0 if unknown
  std::optional<uint64_t> available;  // bytes: /proc/meminfo MemAvailable
  // The tightest memory cgroup: limit - (usage - inactive file cache, which the kernel reclaims
  // before it kills), and the directory that sets it. Unset when no level has a limit.
  std::optional<uint64_t> cgroup_free;
  uint64_t cgroup_limit = 0;
  std::string cgroup_dir;

  // "3.0 GiB (MemAvailable 20.1 GiB; cgroup /sys/fs/cgroup/job: limit 4.0 GiB, 3.0 GiB free)".
  std::string describe() const;
};

// Where the probe reads: `proc` holds meminfo and self/cgroup, `cgroup` is the cgroup file
// system's mount point (v2 unified, or v1 with a memory/ controller folder). Tests point them at
// sample trees.
struct Roots {
  std::string proc = "/proc";
  std::string cgroup = "/sys/fs/cgroup";
};

HostMemory probe(const Roots& roots = {});

// A "Name:   123 kB" field of /proc/meminfo, in bytes; nullopt when absent or malformed.
std::optional<uint64_t> meminfo_bytes(std::string_view meminfo, std::string_view field);

// A cgroup limit file (memory.max: "max" or bytes; memory.limit_in_bytes: bytes, with "no limit"
// written as a number near 2^63): the limit in bytes, nullopt when unlimited or malformed.
std::optional<uint64_t> parse_limit(std::string_view text);

// A "name value" field of a memory.stat file; nullopt when absent.
std::optional<uint64_t> stat_field(std::string_view stat, std::string_view name);

// "1.5 GiB", "512.0 MiB", "100 B": for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace tessera::host_memory
