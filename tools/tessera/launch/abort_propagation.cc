// Stopping every rank once the job fails, is timed out or is signalled. The ranks hear why
// before they are signalled: the abort notice (abort_notice.h) goes out first and they get
// kNoticeGrace to fail with its reason; then `signo` reaches every rank's process group, and
// SIGKILL after --grace. On several nodes the failure is also published in the store so that
// the other nodes' launchers stop their ranks with the same reason (rendezvous.h).
#include <signal.h>

#include <chrono>
#include <string>

#include "job.h"

namespace tessera::tools::launch {
namespace {

// How long the ranks have to read the abort notice (communicators check it every 10 ms while they
// wait) and fail with its reason before a failure's SIGTERM reaches them. A rank whose transfers
// to a cut-off host must be cancelled spends up to 2 s in UCX (two 1 s cancel waits) first.
constexpr auto kNoticeGrace = std::chrono::milliseconds(3000);

}  // namespace

// Why this node fails the job, as the other nodes and the ranks are told.
std::string Job::failure_notice() const {
  const std::string why = failure_.empty() ? "stopped" : failure_;
  return multi_node() ? "node rank " + std::to_string(placement_.node_rank) + ": " + why : why;
}

// Stops every rank: `signo` now, SIGKILL after the grace period. After a failure (`notice` not
// empty) the ranks first get the notice and kNoticeGrace to fail with its reason (a rank
// blocked on a peer on another host learns from it which rank died); then `signo`. A restart
// still waiting out its backoff is dropped.
void Job::stop(int signo, const std::string& notice) {
  const auto now = Clock::now();
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = now + o_.grace;
    if (multi_node() && !remote_stop_ && self_store_) {
      publish_abort(*self_store_, exit_code_ != 0 ? exit_code_ : 1, failure_notice());
    }
  }
  for (RankProc& r : ranks_) r.restart_at = Clock::time_point::max();
  if (!notice.empty() && notice_ && !notice_->published() && running_count() > 0) {
    if (Status told = notice_->publish(notice); told.ok()) {
      term_at_ = now + kNoticeGrace;
      kill_at_ = term_at_ + o_.grace;
      return;
    } else {
      say(told.message());
    }
  }
  term_at_ = Clock::time_point::max();
  signal_groups(signo);
}

// Every group, not only the current ranks': a restarted rank's predecessor may have left
// processes behind.
void Job::signal_groups(int signo) {
  for (pid_t g : groups_) ::killpg(g, signo);  // ESRCH (group already empty) is fine
}

}  // namespace tessera::tools::launch
