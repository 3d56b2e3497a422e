// A rank program started by the real `tessera launch` (the elastic tests' elastic_rank.cc and
// shrink_rank.cc): its flags, joining the job, checked allreduces, and leaving a failed generation
// the way a trainer does (docs/COLLECTIVES.md, "Elastic recovery"). Failures print one line
// "rank R: WHAT: STATUS" on stdout, which the launcher prefixes and the test reads. Header-only.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"

namespace tessera::coll::testing {

// Prints "rank R: WHAT: STATUS" and returns 1, the rank program's exit code for any error.
inline int fail(int rank, const std::string& what, const Status& s) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), s.to_string().c_str());
  return 1;
}

// Reads "--name VALUE" (int) and "--name" (bool) flags. An unknown flag prints "unknown flag X"
// and returns false; an int flag without a value reads as 0.
inline bool parse_flags(int argc, char** argv,
                        std::initializer_list<std::pair<const char*, int*>> ints,
                        std::initializer_list<std::pair<const char*, bool*>> bools = {}) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool known = false;
    for (const auto& [name, value] : ints) {
      if (a == name) {
        *value = i + 1 < argc ? std::atoi(argv[++i]) : 0;
        known = true;
      }
    }
    for (const auto& [name, value] : bools) {
      if (a == name) *value = known = true;
    }
    if (!known) {
      std::printf("unknown flag %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

// The rank's bootstrap (from the launcher's environment) and its first communicator.
struct LaunchedRank {
  std::shared_ptr<Bootstrap> bootstrap;
  std::shared_ptr<Communicator> comm;
  int rank = -1;
};

// Line-buffers stdout (the launcher interleaves the ranks' lines), then joins the job. Returns 0,
// or fail()'s 1 after printing what failed.
inline int join_job(LaunchedRank* out) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto boot = Bootstrap::from_environment();
  if (!boot.ok()) return fail(-1, "bootstrap", boot.status());
  out->bootstrap = *boot;
  out->rank = out->bootstrap->info().rank;
  auto created = Communicator::create(out->bootstrap);
  if (!created.ok()) return fail(out->rank, "communicator", created.status());
  out->comm = *created;
  return 0;
}

// Every rank contributes rank + 1 + step to each element; the sum is known.
inline Status checked_allreduce(Communicator& comm, int step, std::vector<float>& buf) {
  const int n = comm.size();
  for (float& x : buf) x = float(comm.rank() + 1 + step);
  Status s = comm.allreduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kSum);
  if (!s.ok()) return s;
  const float want = float(n * (n + 1) / 2 + n * step);
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] != want) {
      return internal_error("step " + std::to_string(step) + ": element " + std::to_string(i) +
                            " is " + std::to_string(buf[i]) + ", expected " + std::to_string(want));
    }
  }
  return Status();
}

// Leaves the generation whose collective failed with `error`: aborts and destroys the
// communicator (an aborted one is destroyed without waiting for anyone) and waits up to `wait`
// for the launcher's next generation. Returns that generation; the caller creates the new
// communicator.
inline Result<int> leave_generation(LaunchedRank& r, const Status& error,
                                    std::chrono::milliseconds wait) {
  r.comm->abort("rank " + std::to_string(r.rank) + " re-forms after: " + error.message());
  r.comm.reset();
  return r.bootstrap->next_generation(wait);
}

}  // namespace tessera::coll::testing
