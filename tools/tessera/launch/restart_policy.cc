// What happens when a rank exits. A clean exit only clears what it left running. A failure is
// restarted while the job's --max-restarts allow, in the next generation and after the backoff
// of restart_delay (the first restart is immediate), with the survivors told through the store
// before the new rank starts; past the limit, the failure stops the whole job.
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <string_view>

#include "job.h"

namespace tessera::tools::launch {

void Job::on_rank_exit(int rank, int status) {
  RankProc& r = ranks_[static_cast<size_t>(rank)];
  r.running = false;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    ::killpg(r.pid, SIGTERM);  // whatever the rank left running in the background
    return;
  }
  ::killpg(r.pid, SIGKILL);  // its leftovers
  if (stopping_) return;     // a rank we are stopping; the cause was already reported
  const std::string how = WIFEXITED(status)
                              ? "exited with code " + std::to_string(WEXITSTATUS(status))
                              : "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                    signal_name(WTERMSIG(status)) + ")";
  if (restarts_used_ < o_.max_restarts) {
    schedule_restart(rank, how);
  } else {
    fail_job(rank, status, how);
  }
}

// Spends one of the job's restarts on `rank` (which `how` failed): a new generation now, the
// rank itself once its backoff has passed (run() calls restart() when it is due).
void Job::schedule_restart(int rank, const std::string& how) {
  RankProc& r = ranks_[static_cast<size_t>(rank)];
  ++restarts_used_;
  generation_ = next_generation();
  ++r.restarts;
  const auto delay = restart_delay(o_, restarts_used_);
  say("rank " + std::to_string(global(rank)) + " " + how + "; restarting it " +
      (delay.count() > 0 ? "in " + std::to_string(delay.count()) + " ms" : "now") + " (restart " +
      std::to_string(restarts_used_) + " of " + std::to_string(o_.max_restarts) +
      ", TESSERA_GENERATION=" + std::to_string(generation_) + ")");
  r.restart_at = Clock::now() + delay;
  if (delay.count() == 0) restart_due(Clock::now());
}

// No restart left: the failed rank's exit code (or 128 + its signal) becomes the job's, and
// every other rank is stopped with the reason.
void Job::fail_job(int rank, int status, const std::string& how) {
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const int others = running_count();
  failure_ = "rank " + std::to_string(global(rank)) + " " + how;
  say("rank " + std::to_string(global(rank)) + " " + how +
      (others > 0
           ? "; stopping the other " + std::to_string(others) + " rank" + (others > 1 ? "s" : "")
           : ""));
  stop(SIGTERM, failure_notice());
}

// One node: the next generation. Several: each node's launcher restarts its own ranks, so the
// generation is drawn from a counter in the store (two nodes restarting at once get two).
int Job::next_generation() {
  if (!multi_node() || !self_store_) return generation_ + 1;
  auto drawn = self_store_->add("tessera/launch/generations", 1);
  if (!drawn.ok()) {
    say("cannot draw a generation from the store: " + drawn.status().message());
    return generation_ + 1;
  }
  return first_generation_ + static_cast<int>(*drawn);
}

void Job::restart_due(Clock::time_point now) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].restart_at <= now && !stopping_) {
      ranks_[i].restart_at = Clock::time_point::max();
      restart(static_cast<int>(i));
    }
  }
}

// Starts `rank` again in the job's current generation.
void Job::restart(int rank) {
  // Survivors keep running: they see the death as a collective error, abort, and wait in
  // Bootstrap::next_generation for tessera/generation to move. Published before the spawn so
  // the restarted rank never reaches the new generation's exchanges before they know of it.
  refresh_members();  // a re-forming node 0 did since gives the rank another RANK and WORLD_SIZE
  if (stopping_) return;
  publish(coll::kRestartedRankKey, global(rank));
  publish(coll::kRestartsKey, restarts_used_);
  publish(coll::kGenerationKey, generation_);
  Status spawned = spawn(rank);
  if (spawned.ok()) return;
  say("rank " + std::to_string(global(rank)) + ": restart failed: " + spawned.message());
  exit_code_ = spawned.code() == StatusCode::kFailedPrecondition ? 127 : 1;
  failure_ = "rank " + std::to_string(global(rank)) + " could not be restarted";
  stop(SIGTERM, failure_notice());
}

void Job::publish(std::string_view key, int value) {
  if (!self_store_) return;
  Status s = self_store_->set(key, std::to_string(value));
  if (!s.ok()) say("cannot publish " + std::string(key) + " in the store: " + s.message());
}

}  // namespace tessera::tools::launch
