// One rank of the node-loss test (shrink_test.cc), started by two `tessera launch --nnodes MIN:2
// --nproc-per-node 2` on this host. Every rank runs checked allreduces; before step --kill-at the
// victim (a rank of node 1) SIGKILLs its own launcher, whose ranks then die with it (their
// parent-death signal): node 1 is lost. The survivors see the collective error, abort, wait in
// Bootstrap::next_generation for node 0's launcher to re-form the job, print their new identity
// and old ranks, and run --after checked allreduces on a communicator of the new generation.
//
// Flags: --victim R (2) --kill-at S (3) --steps N (50) --after N (5) --wait-ms MS (40000).
// Exit: 0 on success, 1 on any error (printed).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/launched_rank.h"

namespace {

using namespace tessera;
using namespace tessera::coll;
using testing::checked_allreduce;
using testing::fail;

struct Flags {
  int victim = 2, kill_at = 3, steps = 50, after = 5, wait_ms = 40000;
};

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!testing::parse_flags(argc, argv,
                            {{"--victim", &f.victim},
                             {"--kill-at", &f.kill_at},
                             {"--steps", &f.steps},
                             {"--after", &f.after},
                             {"--wait-ms", &f.wait_ms}})) {
    return 1;
  }
  testing::LaunchedRank job;
  if (int code = testing::join_job(&job); code != 0) return code;
  const int rank = job.rank;
  std::vector<float> buf(1024);
  Status error;
  for (int step = 0; step < f.steps && error.ok(); ++step) {
    if (rank == f.victim && step == f.kill_at) {
      std::printf("rank %d: killing node %d's launcher (pid %d)\n", rank,
                  job.bootstrap->info().rank / job.bootstrap->info().local_size, int(getppid()));
      kill(getppid(), SIGKILL);
      std::this_thread::sleep_for(std::chrono::seconds(30));  // the parent-death signal ends it
      return 1;
    }
    error = checked_allreduce(*job.comm, step, buf);
  }
  if (error.ok()) {
    std::printf("rank %d: finished without seeing a node fail\n", rank);
    return 1;
  }
  std::printf("rank %d: generation 0 allreduce failed: %s\n", rank, error.message().c_str());
  auto next = testing::leave_generation(job, error, std::chrono::milliseconds(f.wait_ms));
  if (!next.ok()) return fail(rank, "next_generation", next.status());
  const LaunchInfo& info = job.bootstrap->info();
  std::string old;
  for (int r : job.bootstrap->old_ranks()) old += (old.empty() ? "" : ",") + std::to_string(r);
  std::printf("rank %d: generation %d: rank %d of %d, local rank %d of %d, old ranks [%s]%s\n",
              rank, *next, info.rank, info.size, info.local_rank, info.local_size, old.c_str(),
              job.bootstrap->shrunk() ? ", shrunk" : "");
  auto again = Communicator::create(job.bootstrap);
  if (!again.ok())
    return fail(rank, "communicator of generation " + std::to_string(*next), again.status());
  job.comm = *again;
  for (int step = 0; step < f.after; ++step) {
    if (Status s = checked_allreduce(*job.comm, 100 + step, buf); !s.ok()) {
      return fail(rank, "generation " + std::to_string(*next) + " allreduce", s);
    }
  }
  std::printf("rank %d: generation %d: %d allreduces correct across %d ranks\n", rank, *next,
              f.after, job.comm->size());
  return 0;
}
