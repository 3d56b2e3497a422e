// Starting and reaping the ranks. Each rank is forked into a process group of its own (so one
// signal reaches everything it started) and execs the command with its environment, CPU
// binding and output pipes; a failed execve is reported back through a pipe so the launcher can
// say why. The launcher is the subreaper of every rank's descendants and a watchdog process
// guards their groups, so nothing a rank starts can outlive the job (watchdog.h).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "job.h"

namespace tessera::tools::launch {
namespace {

void close_fds(std::initializer_list<int> fds) {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

// What a forked child needs to become a rank; prepared before fork (the child may only make
// async-signal-safe calls).
struct ChildPlan {
  pid_t launcher = -1;
  std::optional<cpu_set_t> cpus;
  bool tag_output = false;
  int out = -1, err = -1;  // write ends of the output pipes (tag_output)
  int exec_status = -1;    // write end: a failed execve's errno goes here
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

// The child: only async-signal-safe calls until execve (the store thread is running), and no
// output: anything it wrote would read as the rank's own.
[[noreturn]] void become_rank(const ChildPlan& plan) {
  ::setpgid(0, 0);
  // A launcher that dies (even by SIGKILL) takes its ranks with it instead of leaving them
  // running without their store; if it died before prctl took effect, go now.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.launcher) ::_exit(1);
  if (plan.cpus) sched_setaffinity(0, sizeof *plan.cpus, &*plan.cpus);
  if (plan.tag_output) {
    ::dup2(plan.out, 1);
    ::dup2(plan.err, 2);
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, 0);
  restore_default_handlers();
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.program, plan.argv, plan.envp);
  const int error = errno;
  [[maybe_unused]] ssize_t n = ::write(plan.exec_status, &error, sizeof error);
  ::_exit(127);
}

// The child's execve errno from the read end of its exec-status pipe; 0 when it succeeded (the
// pipe, O_CLOEXEC, closed without a word).
int read_exec_error(int fd) {
  int exec_error = 0;
  ssize_t got;
  while ((got = ::read(fd, &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
  }
  return got == static_cast<ssize_t>(sizeof exec_error) ? exec_error : 0;
}

}  // namespace

// Makes sure nothing the ranks start outlives the launcher: it becomes the subreaper of their
// descendants (orphans are reparented to it, not to init, so it reaps them and knows when a
// process group is empty), and the watchdog kills every rank's group if the launcher dies
// without cleaning up. Runs before any thread starts (the watchdog is forked).
Status Job::start_guards() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return internal_error(std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno));
  }
  auto watchdog = Watchdog::start();
  if (!watchdog.ok()) return watchdog.status();
  watchdog_.emplace(std::move(*watchdog));
  return {};
}

Status Job::spawn(int rank) {
  auto env = rank_environment(o_, placement_, rank, generation_, base_env_);
  if (!env.ok()) return env.status();
  std::vector<char*> envp;
  for (std::string& e : *env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o_.command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (o_.tag_output && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
    const int saved = errno;
    close_fds({out[0], out[1]});
    return internal_error(std::string("pipe: ") + std::strerror(saved));
  }
  ChildPlan plan;
  // CPU binding, computed before fork.
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) plan.cpus = rank_cpus(o_, rank, allowed);
  // The child reports a failed execve by writing its errno here; a successful one closes the
  // pipe (O_CLOEXEC), so the launcher reads either 4 bytes or end of file.
  int exec_status[2] = {-1, -1};
  if (::pipe2(exec_status, O_CLOEXEC) != 0) {
    const int saved = errno;
    close_fds({out[0], out[1], err[0], err[1]});
    return internal_error(std::string("pipe: ") + std::strerror(saved));
  }
  plan.launcher = ::getpid();
  plan.tag_output = o_.tag_output;
  plan.out = out[1];
  plan.err = err[1];
  plan.exec_status = exec_status[1];
  plan.program = program_.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int saved = errno;
    close_fds({out[0], out[1], err[0], err[1], exec_status[0], exec_status[1]});
    return internal_error(std::string("fork: ") + std::strerror(saved));
  }
  if (pid == 0) become_rank(plan);
  ::setpgid(pid, pid);  // also here, so killpg works even before the child ran
  groups_.push_back(pid);
  if (watchdog_) watchdog_->watch(pid);
  ::close(exec_status[1]);
  const int exec_error = read_exec_error(exec_status[0]);
  ::close(exec_status[0]);
  if (exec_error != 0) {
    // The child exits 127 and is reaped as an unknown pid; its group empties with it.
    close_fds({out[0], out[1], err[0], err[1]});
    return failed_precondition(describe_exec_failure(program_, exec_error));
  }
  ranks_[static_cast<size_t>(rank)].pid = pid;
  ranks_[static_cast<size_t>(rank)].running = true;
  if (o_.tag_output) {
    ::close(out[1]);
    ::close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    streams_.push_back({out[0], global(rank), 1, {}});
    streams_.push_back({err[0], global(rank), 2, {}});
  }
  return {};
}

// Starts every rank; the first that cannot start stops the job (the others already started).
void Job::start_ranks() {
  for (int r = 0; r < o_.nprocs; ++r) {
    Status spawned = spawn(r);
    if (!spawned.ok()) {
      say("rank " + std::to_string(global(r)) + ": " + spawned.message());
      // A command that exists but cannot be executed exits 127, like one that is not found.
      exit_code_ = spawned.code() == StatusCode::kFailedPrecondition ? 127 : 1;
      failure_ = "rank " + std::to_string(global(r)) + " could not be started";
      stop(SIGTERM, failure_notice());
      return;
    }
  }
}

void Job::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (watchdog_ && pid == watchdog_->pid()) {
      say("the watchdog (pid " + std::to_string(pid) +
          ") died; a launcher killed now would leave the ranks' children running");
    }
    // Other unknown pids: orphans the launcher adopted as subreaper, or a child whose execve
    // failed (spawn reported it).
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].pid == pid && ranks_[i].running) on_rank_exit(static_cast<int>(i), status);
    }
  }
  forget_empty_groups();
}

// An empty group's id can be reused by an unrelated process group once its last member is
// reaped; the launcher is the subreaper of every rank's descendants, so ESRCH here is final.
void Job::forget_empty_groups() {
  std::erase_if(groups_, [this](pid_t g) {
    const bool current = std::any_of(ranks_.begin(), ranks_.end(),
                                     [g](const RankProc& r) { return r.running && r.pid == g; });
    if (current || ::killpg(g, 0) == 0 || errno != ESRCH) return false;
    if (watchdog_) watchdog_->forget(g);
    return true;
  });
}

}  // namespace tessera::tools::launch
