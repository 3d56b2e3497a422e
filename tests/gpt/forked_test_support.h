// Running a GPT test body on forked ranks (tests/collectives/support/multiprocess.h): every rank
// must exit 0 within the deadline. Each body prints why it failed (CHILD_CHECK) before exiting.
#pragma once

#include <chrono>
#include <functional>

#include "support/device_rank.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {

inline void expect_ranks_pass(int n, const std::function<int(int rank, int size)>& body,
                              std::chrono::milliseconds deadline) {
  coll::testing::MultiprocessOptions options;
  options.deadline = deadline;
  coll::testing::expect_all_ok(coll::testing::run_ranks(n, body, options), n);
}

// body(rank, size, grid) on grid.tp * grid.dp * grid.pp forked ranks: a test's grid of parallel
// sizes (its own struct, with at least those three fields).
template <typename Grid>
void expect_grid_ranks_pass(const Grid& grid, int (*body)(int rank, int size, Grid grid),
                            std::chrono::milliseconds deadline) {
  expect_ranks_pass(
      grid.tp * grid.dp * grid.pp,
      [grid, body](int rank, int size) { return body(rank, size, grid); }, deadline);
}

}  // namespace tessera::gpt::testing
