#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/common/env.h"

extern char** environ;

namespace tessera::tools::launch {
namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe = -1;  // write end; the handler only writes one byte to it

// Signals the launcher forwards to every rank (as torchrun does for TERM, INT, HUP and QUIT).
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Puts every signal the launcher handles back to its default (in a child before execve, and when
// the job is over).
void restore_default_handlers() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : kForwarded) sigaction(s, &dfl, nullptr);
  for (int s : {SIGCHLD, SIGPIPE}) sigaction(s, &dfl, nullptr);
}

void on_signal(int signo) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe, &byte, 1);
  errno = saved;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: drop the output, keep supervising
    text.remove_prefix(static_cast<size_t>(n));
  }
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

void say(const std::string& line) {
  write_all(2, "tessera launch: " + line + "\n");
}

// One pipe from a rank's stdout or stderr to ours.
struct Stream {
  int fd = -1;
  int rank = 0;
  int target = 1;  // 1 = our stdout, 2 = our stderr
  std::string partial;
};

struct RankProc {
  pid_t pid = -1;  // also the process group id
  bool running = false;
  int restarts = 0;
};

class Job {
 public:
  explicit Job(const LaunchOptions& options) : o_(options), ranks_(options.nprocs) {}
  ~Job();
  int run();

 private:
  Status spawn(int rank);
  void pump(Stream& s);
  void flush(Stream& s);
  void reap();
  void on_rank_exit(int rank, int status);
  void publish(std::string_view key, int value);
  void stop(int signo);
  void signal_groups(int signo);
  int running_count() const;

  const LaunchOptions& o_;
  std::vector<RankProc> ranks_;
  std::list<Stream> streams_;
  std::unique_ptr<coll::TcpStoreServer> store_;
  std::unique_ptr<coll::Store> self_store_;  // a client of store_, to publish restarts
  std::string program_;
  std::vector<std::string> base_env_;
  int generation_ = 0;
  int restarts_used_ = 0;
  int signal_read_ = -1;
  int exit_code_ = 0;
  bool stopping_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
  bool killed_ = false;
  Clock::time_point drain_until_ = Clock::time_point::max();
};

Job::~Job() {
  for (Stream& s : streams_) ::close(s.fd);
  if (signal_read_ >= 0) ::close(signal_read_);
  if (g_signal_pipe >= 0) ::close(g_signal_pipe);
  g_signal_pipe = -1;
  restore_default_handlers();
}

int Job::running_count() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const RankProc& r) { return r.running; }));
}

void Job::signal_groups(int signo) {
  for (const RankProc& r : ranks_) {
    if (r.pid > 0) ::killpg(r.pid, signo);  // ESRCH (group already empty) is fine
  }
}

// Stops every rank: `signo` now, SIGKILL after the grace period.
void Job::stop(int signo) {
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = Clock::now() + o_.grace;
  }
  signal_groups(signo);
}

Status Job::spawn(int rank) {
  auto env = rank_environment(o_, rank, store_->port(), generation_, base_env_);
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
    for (int fd : {out[0], out[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return internal_error(std::string("pipe: ") + std::strerror(saved));
  }
  // CPU binding, computed before fork: rank r gets the r-th equal share of the CPUs this
  // launcher may use.
  cpu_set_t allowed, mine;
  CPU_ZERO(&mine);
  bool bind = false;
  if (o_.bind_to != "none" && sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
    const int n = o_.nprocs;
    if (!cpus.empty() && (o_.bind_to == "core" || int(cpus.size()) >= n)) {
      const size_t share = std::max<size_t>(1, cpus.size() / size_t(n));
      for (size_t k = 0; k < share; ++k) {
        CPU_SET(cpus[(size_t(rank) * share + k) % cpus.size()], &mine);
      }
      bind = true;
    }
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int saved = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return internal_error(std::string("fork: ") + std::strerror(saved));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until execve (the store thread is running).
    ::setpgid(0, 0);
    // A launcher that dies (even by SIGKILL) takes its ranks with it instead of leaving them
    // running without their store; if it died before prctl took effect, go now.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(1);
    if (bind) sched_setaffinity(0, sizeof mine, &mine);
    if (o_.tag_output) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
    }
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) ::dup2(devnull, 0);
    restore_default_handlers();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(program_.c_str(), argv.data(), envp.data());
    const char msg[] = "tessera launch: execve failed\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so killpg works even before the child ran
  ranks_[static_cast<size_t>(rank)].pid = pid;
  ranks_[static_cast<size_t>(rank)].running = true;
  if (o_.tag_output) {
    ::close(out[1]);
    ::close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    streams_.push_back({out[0], rank, 1, {}});
    streams_.push_back({err[0], rank, 2, {}});
  }
  return {};
}

void Job::flush(Stream& s) {
  if (s.partial.empty()) return;
  write_all(s.target, "[rank " + std::to_string(s.rank) + "] " + s.partial + "\n");
  s.partial.clear();
}

// Reads what is available; writes every complete line with its prefix. At EOF, flushes the rest
// and closes the pipe (fd -1).
void Job::pump(Stream& s) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      flush(s);
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    std::string out;
    const std::string prefix = "[rank " + std::to_string(s.rank) + "] ";
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += prefix;
      out.append(s.partial, start, nl + 1 - start);
    }
    s.partial.erase(0, start);
    write_all(s.target, out);
    if (s.partial.size() > 1 << 20) flush(s);  // a megabyte without newline: pass it on anyway
  }
}

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
    ++restarts_used_;
    ++generation_;
    ++r.restarts;
    // Survivors keep running: they see the death as a collective error, abort, and wait in
    // Bootstrap::next_generation for tessera/generation to move. Published before the spawn so
    // the restarted rank never reaches the new generation's exchanges before they know of it.
    publish(coll::kRestartedRankKey, rank);
    publish(coll::kRestartsKey, restarts_used_);
    publish(coll::kGenerationKey, generation_);
    say("rank " + std::to_string(rank) + " " + how + "; restarting it (restart " +
        std::to_string(restarts_used_) + " of " + std::to_string(o_.max_restarts) +
        ", TESSERA_GENERATION=" + std::to_string(generation_) + ")");
    Status spawned = spawn(rank);
    if (spawned.ok()) return;
    say("rank " + std::to_string(rank) + ": restart failed: " + spawned.message());
  }
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const int others = running_count();
  say("rank " + std::to_string(rank) + " " + how +
      (others > 0
           ? "; stopping the other " + std::to_string(others) + " rank" + (others > 1 ? "s" : "")
           : ""));
  stop(SIGTERM);
}

void Job::publish(std::string_view key, int value) {
  if (!self_store_) return;
  Status s = self_store_->set(key, std::to_string(value));
  if (!s.ok()) say("cannot publish " + std::string(key) + " in the store: " + s.message());
}

void Job::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].pid == pid && ranks_[i].running) on_rank_exit(static_cast<int>(i), status);
    }
  }
}

int Job::run() {
  auto program = resolve_program(o_.command.front());
  if (!program.ok()) {
    say(program.status().message());
    return 127;
  }
  program_ = *program;
  auto store = coll::start_tcp_store_server("127.0.0.1", 0);
  if (!store.ok()) {
    say("cannot host the TCP store: " + store.status().message());
    return 1;
  }
  store_ = std::move(*store);
  auto gen = env::get_int("TESSERA_GENERATION", 0);
  generation_ = gen.ok() ? static_cast<int>(*gen) : 0;
  auto self = coll::connect_tcp_store("127.0.0.1", store_->port(), std::chrono::seconds(5));
  if (!self.ok()) {
    say("cannot connect to the store it hosts: " + self.status().message());
    return 1;
  }
  self_store_ = std::move(*self);
  publish(coll::kGenerationKey, generation_);
  publish(coll::kRestartsKey, 0);
  for (char** e = environ; *e != nullptr; ++e) base_env_.emplace_back(*e);
  for (int r = 0; r < o_.nprocs; ++r) {  // bad device lists are found before anything starts
    auto env = rank_environment(o_, r, store_->port(), generation_, base_env_);
    if (!env.ok()) {
      say(env.status().message());
      return 2;
    }
  }

  int sig_pipe[2];
  if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    say(std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  signal_read_ = sig_pipe[0];
  g_signal_pipe = sig_pipe[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  for (int s : kForwarded) sigaction(s, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, nullptr);

  for (int r = 0; r < o_.nprocs; ++r) {
    Status spawned = spawn(r);
    if (!spawned.ok()) {
      say("rank " + std::to_string(r) + ": " + spawned.message());
      exit_code_ = 1;
      stop(SIGTERM);
      break;
    }
  }
  const auto job_deadline = o_.timeout_s > 0 ? Clock::now() + std::chrono::seconds(o_.timeout_s)
                                             : Clock::time_point::max();
  int forwarded = 0;
  for (;;) {
    if (running_count() == 0) {
      if (streams_.empty()) break;
      if (drain_until_ == Clock::time_point::max()) drain_until_ = Clock::now() + o_.grace;
    }
    const auto now = Clock::now();
    if (now >= job_deadline && !stopping_) {
      say("the job ran past --timeout-s " + std::to_string(o_.timeout_s) + "; stopping " +
          std::to_string(running_count()) + " rank(s)");
      exit_code_ = 124;
      stop(SIGTERM);
    }
    if (now >= kill_at_ && !killed_) {
      killed_ = true;
      signal_groups(SIGKILL);
    }
    if (now >= drain_until_) {
      signal_groups(SIGKILL);  // background leftovers still holding the pipes
      for (Stream& s : streams_) {
        flush(s);
        ::close(s.fd);
      }
      streams_.clear();
      break;
    }
    auto next =
        std::min({job_deadline, killed_ ? Clock::time_point::max() : kill_at_, drain_until_});
    int timeout_ms = -1;
    if (next != Clock::time_point::max()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000000));
    }
    std::vector<pollfd> fds;
    fds.push_back({signal_read_, POLLIN, 0});
    for (const Stream& s : streams_) fds.push_back({s.fd, POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      say(std::string("poll: ") + std::strerror(errno));
      stop(SIGKILL);
      continue;
    }
    if (rc <= 0) continue;
    size_t i = 1;
    for (Stream& s : streams_) {
      if (fds[i++].revents != 0) pump(s);
    }
    streams_.remove_if([](const Stream& s) { return s.fd < 0; });
    if (fds[0].revents != 0) {
      unsigned char sigs[64];
      const ssize_t n = ::read(signal_read_, sigs, sizeof sigs);
      for (ssize_t k = 0; k < n; ++k) {
        const int signo = sigs[k];
        if (signo == SIGCHLD) continue;
        if (forwarded++ == 0) {
          say("got " + signal_name(signo) + ", forwarding it to " +
              std::to_string(running_count()) + " rank(s)");
          if (exit_code_ == 0) exit_code_ = 128 + signo;
          stop(signo);
        } else {
          say("got " + signal_name(signo) + " again; killing every rank");
          killed_ = true;
          signal_groups(SIGKILL);
        }
      }
      reap();
    }
  }
  reap();
  return exit_code_;
}

}  // namespace

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace tessera::tools::launch
