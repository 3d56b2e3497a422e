// The launcher's job from start to end (run_job, supervisor.h): everything before the first
// rank starts, then the event loop that waits for the ranks' output, signals and the other
// nodes' events while it enforces the job's deadlines, then the clean-up that leaves nothing
// running. The Job's other phases live beside it (job.h lists the files); this file holds the
// order in which they run.
#include "supervisor.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "job.h"

extern char** environ;

namespace tessera::tools::launch {

Job::~Job() {
  for (Stream& s : streams_) ::close(s.fd);
  if (signal_read_ >= 0) ::close(signal_read_);
  close_signal_pipe();
  restore_default_handlers();
}

int Job::running_count() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const RankProc& r) { return r.running; }));
}

Clock::time_point Job::next_restart() const {
  Clock::time_point next = Clock::time_point::max();
  for (const RankProc& r : ranks_) next = std::min(next, r.restart_at);
  return next;
}

// Everything before the first rank starts; returns the launcher's exit code when the job cannot
// start (127: the command, 2: bad input, 1: the system), else nullopt.
std::optional<int> Job::prepare() {
  auto program = resolve_program(o_.command.front());
  if (!program.ok()) {
    say(program.status().message());
    return 127;
  }
  program_ = *program;
  auto gen = starting_generation(o_.max_restarts);
  if (!gen.ok()) {
    say(gen.status().message());
    return 2;
  }
  generation_ = *gen;
  first_generation_ = *gen;
  if (auto notice = AbortNotice::create(); notice.ok()) {
    notice_.emplace(std::move(*notice));
    placement_.abort_notice = notice_->path();
  } else {
    say(notice.status().message() + "; ranks will learn of failures elsewhere only by timeout");
  }
  for (char** e = environ; *e != nullptr; ++e) base_env_.emplace_back(*e);
  for (int r = 0; r < o_.nprocs; ++r) {  // bad device lists are found before anything starts
    auto env = rank_environment(o_, placement_, r, generation_, base_env_);
    if (!env.ok()) {
      say(env.status().message());
      return 2;
    }
  }
  if (Status guards = start_guards(); !guards.ok()) {  // before the store's thread
    say(guards.message());
    return 1;
  }
  if (std::optional<int> failed = host_or_join_store()) return failed;
  publish(coll::kGenerationKey, generation_);
  publish(coll::kRestartsKey, 0);
  return install_signal_handlers();
}

// Nothing outlives the launcher: whatever is left in the ranks' groups (a background process
// that ignored SIGTERM and let go of the pipes) gets SIGKILL. A group sent SIGKILL cannot grow
// again, so the watchdog has nothing left to guard and is let go.
void Job::finish() {
  reap();
  signal_groups(SIGKILL);
  for (pid_t g : groups_) {
    if (watchdog_) watchdog_->forget(g);
  }
  groups_.clear();
  watchdog_.reset();
  reap();
}

// True once no rank runs or waits for a restart and every output pipe is closed. When the last
// rank is gone, the pipes (held by the ranks' leftovers) get the grace period to drain.
bool Job::all_done() {
  if (running_count() != 0 || next_restart() != Clock::time_point::max()) return false;
  if (streams_.empty()) return nodes_done();
  if (drain_until_ == Clock::time_point::max()) drain_until_ = Clock::now() + o_.grace;
  return false;
}

// The job's --timeout-s, the grace period of a stop, due restarts and the drain period. False
// once the drain period ran out (the pipes are then closed: the job is over).
bool Job::enforce_deadlines(Clock::time_point now, Clock::time_point job_deadline) {
  if (now >= job_deadline && !stopping_) {
    say("the job ran past --timeout-s " + std::to_string(o_.timeout_s) + "; stopping " +
        std::to_string(running_count()) + " rank(s)");
    exit_code_ = 124;
    failure_ = "the job ran past --timeout-s " + std::to_string(o_.timeout_s);
    stop(SIGTERM, failure_notice());
  }
  if (now >= term_at_) {
    term_at_ = Clock::time_point::max();
    signal_groups(SIGTERM);
  }
  if (now >= kill_at_ && !killed_) {
    killed_ = true;
    signal_groups(SIGKILL);
  }
  restart_due(now);
  if (now < drain_until_) return true;
  signal_groups(SIGKILL);  // background leftovers still holding the pipes
  for (Stream& s : streams_) {
    flush(s);
    ::close(s.fd);
  }
  streams_.clear();
  drain_until_ = Clock::time_point::max();  // drained; node 0 may still wait for the others
  return false;
}

// Waits until the next deadline for the ranks' output or a signal, and handles what came.
void Job::wait_for_events(Clock::time_point now, Clock::time_point job_deadline) {
  auto next = std::min({job_deadline, killed_ ? Clock::time_point::max() : kill_at_, drain_until_,
                        next_restart(), term_at_});
  int timeout_ms = -1;
  if (next != Clock::time_point::max()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    timeout_ms = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000000));
  }
  std::vector<pollfd> fds;
  fds.push_back({signal_read_, POLLIN, 0});
  fds.push_back({watch_ ? watch_->fd() : -1, POLLIN, 0});
  for (const Stream& s : streams_) fds.push_back({s.fd, POLLIN, 0});
  const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) {
    say(std::string("poll: ") + std::strerror(errno));
    stop(SIGKILL);
    return;
  }
  if (rc <= 0) return;
  size_t i = 2;
  for (Stream& s : streams_) {
    if (fds[i++].revents != 0) pump(s);
  }
  streams_.remove_if([](const Stream& s) { return s.fd < 0; });
  if (fds[0].revents != 0) handle_signals();
  if (fds[1].revents != 0) handle_node_events();
}

int Job::run() {
  if (std::optional<int> failed = prepare()) return *failed;
  start_ranks();
  const auto job_deadline = o_.timeout_s > 0 ? Clock::now() + std::chrono::seconds(o_.timeout_s)
                                             : Clock::time_point::max();
  while (!all_done()) {
    const auto now = Clock::now();
    if (!enforce_deadlines(now, job_deadline) && nodes_done()) break;
    wait_for_events(now, job_deadline);
  }
  finish();
  return exit_code_;
}

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace tessera::tools::launch
