// The launcher's watchdog: a small process outside the job that kills every rank's process group
// when the launcher dies, however it dies (SIGKILL, a crash, the OOM killer picking it alone).
//
// Why a process: PR_SET_PDEATHSIG kills a rank with its launcher, but not what the rank started
// (a pipeline, `sleep 1000 &`, a data loader), and a child subreaper dies with the launcher too.
// The watchdog holds the read end of a pipe whose only write end is the launcher's (O_CLOEXEC,
// so no rank inherits it); end of file on it means the launcher is gone, and the watchdog then
// sends SIGKILL to every process group it was told about and exits. It runs in its own process
// group and ignores the forwarded signals, so a Ctrl-C or `kill -9 -<launcher's group>` does
// not take it down before it has cleaned up. What it cannot catch: a descendant that left its
// rank's process group (setsid, a daemon), and the watchdog itself killed first; a cgroup would
// catch both but needs delegation this launcher cannot count on (docs/LAUNCH.md).
//
// Not thread-safe; one per launcher.
#pragma once

#include <sys/types.h>

#include "tessera/common/status.h"

namespace tessera::tools::launch {

class Watchdog {
 public:
  // Forks the watchdog. Call before the launcher starts any thread (the child allocates).
  static Result<Watchdog> start();

  Watchdog(Watchdog&& other) noexcept;
  Watchdog& operator=(Watchdog&&) = delete;
  // Closes the pipe (the watchdog kills the groups it still watches) and waits for it to exit.
  ~Watchdog();

  // From now on, the launcher's death kills process group `pgid`.
  void watch(pid_t pgid);
  // Group `pgid` is empty (killpg(pgid, 0) said ESRCH): stop watching it, since its id may now
  // be reused by an unrelated process group.
  void forget(pid_t pgid);
  pid_t pid() const { return pid_; }

 private:
  Watchdog(pid_t pid, int write_fd) : pid_(pid), write_fd_(write_fd) {}
  void send(int32_t message);

  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace tessera::tools::launch
