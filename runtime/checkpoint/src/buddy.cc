#include "buddy.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "tessera/common/env.h"

namespace tessera::ckpt {

std::string buddy_host_identity() {
  if (auto id = env::get("TESSERA_HOST_ID"); id && !id->empty()) return *id;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  // A hash, not the boot id: the identities travel through the job's store and logs.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : boot) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(name) + "/" + hex;
}

int buddies_on_same_host(const std::vector<std::string>& host_of_rank, int stride) {
  const int size = static_cast<int>(host_of_rank.size());
  int same = 0;
  for (int r = 0; r < size; ++r) {
    same += host_of_rank[size_t(r)] == host_of_rank[size_t((r + stride) % size)];
  }
  return same;
}

int replica_stride_for_hosts(const std::vector<std::string>& host_of_rank) {
  const int size = static_cast<int>(host_of_rank.size());
  int best = 1;
  int best_same = size + 1;
  for (int stride = 1; stride < size; ++stride) {
    const int same = buddies_on_same_host(host_of_rank, stride);
    if (same < best_same) {
      best = stride;
      best_same = same;
    }
    if (same == 0) break;
  }
  return best;
}

}  // namespace tessera::ckpt
