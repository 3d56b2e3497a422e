// Multi-process tests without a launcher: the test (parent) hosts a TCP store and forks+execs N
// copies of a rank program; each rank builds its Bootstrap from its command line and that store.
// The parent waits with its own deadline and kills whatever is left, so a hung rank fails the
// test instead of hanging it. Shared by tests/collectives/correctness and tests/collectives/faults.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/common/status.h"

namespace tessera::coll::testing {

// ---- parent side ------------------------------------------------------------------------------

struct SpawnOptions {
  std::string binary;  // the rank program
  int nranks = 2;
  std::vector<std::string> args;  // appended after --rank R --size N --store-port P
  std::vector<std::pair<std::string, std::string>> env;  // added to this process's environment
  std::chrono::milliseconds deadline{120000};            // for all ranks together, from the spawn
};

struct RankExit {
  bool exited = false;  // exited normally (code valid) rather than by a signal
  int code = -1;
  int signal = 0;
  bool killed_at_deadline = false;  // still running at the deadline, SIGKILLed by the parent
};

struct SpawnResult {
  std::vector<RankExit> ranks;
  bool timed_out = false;  // some rank was still running at the deadline
  double seconds = 0;
  // "rank 0 exited 0, rank 1 killed by signal 9, ..."
  std::string summary() const;
};

// Starts the store and the ranks and waits for all of them (stdout and stderr are inherited).
// Fails only when the store or a fork cannot be started.
Result<SpawnResult> spawn_ranks(const SpawnOptions& options);

// ---- rank side --------------------------------------------------------------------------------

struct RankArgs {
  int rank = 0;
  int size = 1;
  int store_port = 0;
  std::vector<std::string> rest;  // arguments after the three above
};
// Parses "--rank R --size N --store-port P [rest...]".
Result<RankArgs> parse_rank_args(int argc, char** argv);
// Connects to the parent's store and returns this rank's bootstrap (all ranks on this host).
Result<std::shared_ptr<Bootstrap>> connect_rank(const RankArgs& args);

}  // namespace tessera::coll::testing
