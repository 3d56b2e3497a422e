// Checks inside a forked rank (testing::run_ranks): gtest's assertions do not reach the parent, so
// a rank prints what failed and returns non-zero, which the parent's exit-code check
// (expect_all_exited_zero) reports. Header-only; the macros need a `rank` in scope and a function
// returning int.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/socket_rank_group.h"
#include "tessera/common/status.h"

namespace tessera::ckpt::testing {

// In the parent: every rank of run_ranks exited 0 (each failure names the rank and its signal).
inline void expect_all_exited_zero(const std::vector<RankExit>& exits) {
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_EQ(exits[r].code, 0) << "rank " << r << " (signal " << exits[r].signal << ")";
  }
}

inline int rank_fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}
inline const Status& status_of(const Status& s) {
  return s;
}
template <typename T>
const Status& status_of(const Result<T>& r) {
  return r.status();
}

}  // namespace tessera::ckpt::testing

#define RANK_OK(expr)                                                                    \
  do {                                                                                   \
    const ::tessera::Status rank_ok_status_ = ::tessera::ckpt::testing::status_of(expr); \
    if (!rank_ok_status_.ok()) {                                                         \
      return ::tessera::ckpt::testing::rank_fail(                                        \
          rank, std::string(#expr) + ": " + rank_ok_status_.to_string());                \
    }                                                                                    \
  } while (0)
#define RANK_CHECK(cond, what)                                           \
  do {                                                                   \
    if (!(cond)) return ::tessera::ckpt::testing::rank_fail(rank, what); \
  } while (0)
