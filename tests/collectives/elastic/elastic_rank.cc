// One rank of the elastic-recovery test, started by `tessera launch -n N --max-restarts K`.
//
// Generation 0: every rank runs a sequence of checked allreduces; the victim rank SIGKILLs itself
// before step --kill-at. The survivors see the collective error (it must name the victim), abort,
// wait in Bootstrap::next_generation for the launcher's restart, and create a new communicator.
// The restarted victim starts in the new generation and just creates its communicator. Then every
// rank runs --after more checked allreduces. The survivors print the timing split: detection
// (kill -> error) and re-formation (error -> new communicator ready); nothing asserts them.
//
// Flags: --victim R (1) --kill-at S (5) --steps N (20) --after N (10) --wait-ms MS (10000)
//        --count ELEMENTS (65536) --kill-again (the restarted victim dies too, after 2 steps).
// Exit: 0 on success, 1 on any error (printed), 3 when the error does not name the victim.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/launched_rank.h"

namespace {

using namespace tessera;
using namespace tessera::coll;
using testing::checked_allreduce;
using testing::fail;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: comparable across local processes

constexpr const char* kKillTimeKey = "elastic_test/kill_ns";

struct Flags {
  int victim = 1, kill_at = 5, steps = 20, after = 10, wait_ms = 10000, count = 65536;
  bool kill_again = false;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(Bootstrap& boot) {
  (void)boot.store().set(kKillTimeKey, std::to_string(now_ns()));
  std::fflush(stdout);
  kill(getpid(), SIGKILL);
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!testing::parse_flags(argc, argv,
                            {{"--victim", &f.victim},
                             {"--kill-at", &f.kill_at},
                             {"--steps", &f.steps},
                             {"--after", &f.after},
                             {"--wait-ms", &f.wait_ms},
                             {"--count", &f.count}},
                            {{"--kill-again", &f.kill_again}})) {
    return 1;
  }
  testing::LaunchedRank job;
  if (int code = testing::join_job(&job); code != 0) return code;
  const std::shared_ptr<Bootstrap>& bootstrap = job.bootstrap;
  std::shared_ptr<Communicator>& comm = job.comm;
  const int rank = job.rank;
  const int generation = bootstrap->info().generation;
  std::vector<float> buf(size_t(f.count));
  // A sub-communicator in every generation: its exchanges must not meet the old generation's.
  auto halves = [&](int step) -> Status {
    auto sub = comm->split(comm->rank() % 2, comm->rank());
    if (!sub.ok()) return sub.status();
    return checked_allreduce(**sub, step, buf);
  };
  if (generation == 0) {
    if (Status s = halves(0); !s.ok()) return fail(rank, "split of generation 0", s);
  }

  if (generation == 0) {
    Status error;
    int failed_at = -1;
    for (int step = 0; step < f.steps && error.ok(); ++step) {
      if (rank == f.victim && step == f.kill_at) die(*bootstrap);
      error = checked_allreduce(*comm, step, buf);
      failed_at = step;
    }
    const int64_t error_ns = now_ns();
    if (error.ok()) {
      std::printf("rank %d: generation 0 finished without seeing rank %d fail\n", rank, f.victim);
      return 1;
    }
    std::printf("rank %d: generation 0 allreduce %d failed: %s\n", rank, failed_at,
                error.message().c_str());
    if (error.message().find("rank " + std::to_string(f.victim)) == std::string::npos) {
      std::printf("rank %d: the error does not name rank %d\n", rank, f.victim);
      return 3;
    }
    // The recovery sequence a trainer runs (docs/COLLECTIVES.md, "Elastic recovery").
    auto next = testing::leave_generation(job, error, std::chrono::milliseconds(f.wait_ms));
    if (!next.ok()) return fail(rank, "next_generation", next.status());
    auto again = Communicator::create(bootstrap);
    if (!again.ok())
      return fail(rank, "communicator of generation " + std::to_string(*next), again.status());
    comm = *again;
    const int64_t ready_ns = now_ns();
    auto kill_ns = bootstrap->store().get(kKillTimeKey, std::chrono::milliseconds(1000));
    auto restarted = bootstrap->store().get(kRestartedRankKey, std::chrono::milliseconds(1000));
    const double detection_ms = kill_ns.ok() ? double(error_ns - std::stoll(*kill_ns)) / 1e6 : -1.0;
    std::printf(
        "rank %d: timing: detection %.1f ms (kill -> error), re-formation %.1f ms (error -> "
        "generation %d communicator ready), restarted rank %s\n",
        rank, detection_ms, double(ready_ns - error_ns) / 1e6, *next,
        restarted.ok() ? restarted->c_str() : "?");
  } else {
    std::printf("rank %d: restarted in generation %d\n", rank, generation);
  }

  for (int step = 0; step < f.after; ++step) {
    if (f.kill_again && rank == f.victim && generation > 0 && step == 2) die(*bootstrap);
    if (Status s = checked_allreduce(*comm, 100 + step, buf); !s.ok()) {
      return fail(rank,
                  "generation " + std::to_string(bootstrap->info().generation) + " allreduce " +
                      std::to_string(step),
                  s);
    }
  }
  if (Status s = halves(200); !s.ok()) {
    return fail(rank, "split of generation " + std::to_string(bootstrap->info().generation), s);
  }
  std::printf("rank %d: generation %d: %d allreduces correct across %d ranks\n", rank,
              bootstrap->info().generation, f.after, comm->size());
  return 0;
}
