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

}  // namespace tessera::gpt::testing
