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
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"

namespace {

using namespace tessera;
using namespace tessera::coll;

struct Flags {
  int victim = 2, kill_at = 3, steps = 50, after = 5, wait_ms = 40000;
};

// Every rank contributes rank + 1 + step to each element; the sum is known.
Status checked_allreduce(Communicator& comm, int step, std::vector<float>& buf) {
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

int fail(int rank, const std::string& what, const Status& s) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {  // "--flag value" pairs
    const std::string a = argv[i];
    const int value = i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    if (a == "--victim") {
      f.victim = value;
    } else if (a == "--kill-at") {
      f.kill_at = value;
    } else if (a == "--steps") {
      f.steps = value;
    } else if (a == "--after") {
      f.after = value;
    } else if (a == "--wait-ms") {
      f.wait_ms = value;
    } else {
      std::printf("unknown flag %s\n", a.c_str());
      return 1;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto boot = Bootstrap::from_environment();
  if (!boot.ok()) return fail(-1, "bootstrap", boot.status());
  std::shared_ptr<Bootstrap> bootstrap = *boot;
  const int rank = bootstrap->info().rank;
  auto created = Communicator::create(bootstrap);
  if (!created.ok()) return fail(rank, "communicator", created.status());
  std::shared_ptr<Communicator> comm = *created;
  std::vector<float> buf(1024);
  Status error;
  for (int step = 0; step < f.steps && error.ok(); ++step) {
    if (rank == f.victim && step == f.kill_at) {
      std::printf("rank %d: killing node %d's launcher (pid %d)\n", rank,
                  bootstrap->info().rank / bootstrap->info().local_size, int(getppid()));
      kill(getppid(), SIGKILL);
      std::this_thread::sleep_for(std::chrono::seconds(30));  // the parent-death signal ends it
      return 1;
    }
    error = checked_allreduce(*comm, step, buf);
  }
  if (error.ok()) {
    std::printf("rank %d: finished without seeing a node fail\n", rank);
    return 1;
  }
  std::printf("rank %d: generation 0 allreduce failed: %s\n", rank, error.message().c_str());
  comm->abort("rank " + std::to_string(rank) + " re-forms after: " + error.message());
  comm.reset();
  auto next = bootstrap->next_generation(std::chrono::milliseconds(f.wait_ms));
  if (!next.ok()) return fail(rank, "next_generation", next.status());
  const LaunchInfo& info = bootstrap->info();
  std::string old;
  for (int r : bootstrap->old_ranks()) old += (old.empty() ? "" : ",") + std::to_string(r);
  std::printf("rank %d: generation %d: rank %d of %d, local rank %d of %d, old ranks [%s]%s\n",
              rank, *next, info.rank, info.size, info.local_rank, info.local_size, old.c_str(),
              bootstrap->shrunk() ? ", shrunk" : "");
  auto again = Communicator::create(bootstrap);
  if (!again.ok())
    return fail(rank, "communicator of generation " + std::to_string(*next), again.status());
  comm = *again;
  for (int step = 0; step < f.after; ++step) {
    if (Status s = checked_allreduce(*comm, 100 + step, buf); !s.ok()) {
      return fail(rank, "generation " + std::to_string(*next) + " allreduce", s);
    }
  }
  std::printf("rank %d: generation %d: %d allreduces correct across %d ranks\n", rank, *next,
              f.after, comm->size());
  return 0;
}
