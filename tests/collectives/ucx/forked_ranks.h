// Test-only: runs the ranks of a UCX test as forked processes, with an allgather over a socketpair
// star whose hub is the test process itself. No part of the library uses this.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::coll::testing {

using Allgather = std::function<Result<std::vector<std::string>>(std::string_view mine)>;

// How a rank process ended: exit code, or the signal that killed it (0 when it exited).
struct RankExit {
  int code = -1;
  int signal = 0;
};

// Forks `size` processes; each runs `body(rank, allgather)` and exits with its return value. A
// rank that runs longer than `limit` is killed by SIGALRM (a hang fails the test, never blocks
// it). The parent serves allgather rounds until every rank has closed its socket, then reaps them.
std::vector<RankExit> run_forked_ranks(int size, const std::function<int(int, Allgather&)>& body,
                                       std::chrono::seconds limit = std::chrono::seconds(60));

// "rank 1: exit 0", "rank 1: killed by signal 9".
std::string describe(const std::vector<RankExit>& exits);

}  // namespace tessera::coll::testing

// In a rank process: prints where and why, and returns 1 from the rank body.
#define RANK_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      return 1;                                                                     \
    }                                                                               \
  } while (0)
