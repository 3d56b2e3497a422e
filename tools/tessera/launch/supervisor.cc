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
#include <initializer_list>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abort_notice.h"
#include "rendezvous.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/env.h"
#include "watchdog.h"

extern char** environ;

namespace tessera::tools::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the ranks have to read the abort notice (communicators check it every 10 ms while they
// wait) and fail with its reason before a failure's SIGTERM reaches them. A rank whose transfers
// to a cut-off host must be cancelled spends up to 2 s in UCX (two 1 s cancel waits) first.
constexpr auto kNoticeGrace = std::chrono::milliseconds(3000);

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
  int rank = 0;    // global
  int target = 1;  // 1 = our stdout, 2 = our stderr
  std::string partial;
};

struct RankProc {
  pid_t pid = -1;  // also the process group id
  bool running = false;
  int restarts = 0;
  Clock::time_point restart_at = Clock::time_point::max();  // a restart waiting out its backoff
};

class Job {
 public:
  explicit Job(const LaunchOptions& options) : o_(options), ranks_(options.nprocs) {}
  ~Job();
  int run();

 private:
  std::optional<int> prepare();
  std::optional<int> host_or_join_store();
  std::optional<int> install_signal_handlers();
  Status start_guards();
  void handle_signals();
  void finish();
  // run()'s phases.
  void start_ranks();
  bool all_done();
  bool nodes_done();
  void handle_node_events();
  int next_generation();
  int global(int local_rank) const { return placement_.global_rank(o_.nprocs, local_rank); }
  bool multi_node() const { return o_.nnodes_max > 1; }
  bool enforce_deadlines(Clock::time_point now, Clock::time_point job_deadline);
  void wait_for_events(Clock::time_point now, Clock::time_point job_deadline);
  Status spawn(int rank);
  void pump(Stream& s);
  void flush(Stream& s);
  void reap();
  void on_rank_exit(int rank, int status);
  void restart_due(Clock::time_point now);
  void restart(int rank);
  void publish(std::string_view key, int value);
  // `notice` (a failure's reason) goes to the ranks first (abort_notice.h); empty: signal now.
  void stop(int signo, const std::string& notice = {});
  std::string failure_notice() const;
  void signal_groups(int signo);
  void forget_empty_groups();
  int running_count() const;
  Clock::time_point next_restart() const;

  const LaunchOptions& o_;
  std::vector<RankProc> ranks_;
  std::list<Stream> streams_;
  std::unique_ptr<coll::TcpStoreServer> store_;
  std::unique_ptr<coll::Store> self_store_;  // a client of the job's store, to publish restarts
  NodePlacement placement_;
  std::unique_ptr<NodeWatch> watch_;   // several nodes: the other nodes' failures, node 0's wait
  std::optional<AbortNotice> notice_;  // tells the ranks why the job fails (TESSERA_ABORT_NOTICE)
  Clock::time_point term_at_ = Clock::time_point::max();  // a stop's signal, after the notice
  std::string failure_;       // why this node stops the job, for the other nodes
  bool remote_stop_ = false;  // stopped for another node (nothing to publish)
  bool done_published_ = false;
  bool nodes_awaited_ = false;
  bool nodes_done_ = false;
  int first_generation_ = 0;
  std::string program_;
  std::vector<std::string> base_env_;
  std::optional<Watchdog> watchdog_;
  // Every process group a rank was started in whose members may still run (a rank's leftovers
  // outlive it); a group leaves once it is empty (forget_empty_groups).
  std::vector<pid_t> groups_;
  int generation_ = 0;
  int restarts_used_ = 0;
  int signal_read_ = -1;
  int exit_code_ = 0;
  int forwarded_ = 0;  // signals received so far
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

Clock::time_point Job::next_restart() const {
  Clock::time_point next = Clock::time_point::max();
  for (const RankProc& r : ranks_) next = std::min(next, r.restart_at);
  return next;
}

// Every group, not only the current ranks': a restarted rank's predecessor may have left
// processes behind.
void Job::signal_groups(int signo) {
  for (pid_t g : groups_) ::killpg(g, signo);  // ESRCH (group already empty) is fine
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
    generation_ = next_generation();
    ++r.restarts;
    const auto delay = restart_delay(o_, restarts_used_);
    say("rank " + std::to_string(global(rank)) + " " + how + "; restarting it " +
        (delay.count() > 0 ? "in " + std::to_string(delay.count()) + " ms" : "now") + " (restart " +
        std::to_string(restarts_used_) + " of " + std::to_string(o_.max_restarts) +
        ", TESSERA_GENERATION=" + std::to_string(generation_) + ")");
    r.restart_at = Clock::now() + delay;  // run() calls restart() when it is due
    if (delay.count() == 0) restart_due(Clock::now());
    return;
  }
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
  publish(coll::kRestartedRankKey, rank);
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

// Node rank 0 (or a launcher alone) hosts the store, at --rdzv-endpoint's address (or
// --rdzv-bind) or on 127.0.0.1 at a free port; every launcher then connects to it with the job
// token and, on several nodes, joins the other nodes and starts watching the store.
std::optional<int> Job::host_or_join_store() {
  const auto deadline = Clock::now() + std::chrono::seconds(o_.rdzv_timeout_s);
  auto token = job_token(o_, deadline);
  if (!token.ok()) {
    say(token.status().message());
    return token.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  placement_.token = *token;
  placement_.node_rank = o_.node_rank;
  placement_.nnodes = o_.nnodes_max;
  int port = 0;
  if (!o_.rdzv_endpoint.empty()) {
    // resolve_nodes checked it.
    (void)parse_endpoint(o_.rdzv_endpoint, &placement_.store_host, &port).ok();
  }
  if (o_.node_rank == 0) {
    const std::string bind = !o_.rdzv_bind.empty() ? o_.rdzv_bind : placement_.store_host;
    auto store = coll::start_tcp_store_server(bind, port, {}, placement_.token);
    if (!store.ok()) {
      say("cannot host the TCP store: " + store.status().message());
      return 1;
    }
    store_ = std::move(*store);
    port = store_->port();
  }
  placement_.store_port = port;
  const std::string where = placement_.store_host + ":" + std::to_string(port);
  auto self = coll::connect_tcp_store(placement_.store_host, port,
                                      std::chrono::seconds(o_.rdzv_timeout_s), placement_.token);
  if (!self.ok()) {
    say("cannot connect to the job's store at " + where + ": " + self.status().message());
    return 1;
  }
  self_store_ = std::move(*self);
  if (!multi_node()) return std::nullopt;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  if (Status joined = join_nodes(*self_store_, o_, host, deadline); !joined.ok()) {
    say("node rank " + std::to_string(o_.node_rank) + " cannot join the job at " + where + ": " +
        joined.message());
    return joined.code() == StatusCode::kDeadlineExceeded ? 1 : 2;
  }
  auto watch_client = coll::connect_tcp_store(placement_.store_host, port, std::chrono::seconds(10),
                                              placement_.token);
  if (!watch_client.ok()) {
    say("cannot connect to the job's store at " + where + ": " + watch_client.status().message());
    return 1;
  }
  auto watch = NodeWatch::start(std::move(*watch_client), o_);
  if (!watch.ok()) {
    say(watch.status().message());
    return 1;
  }
  watch_ = std::move(*watch);
  say("node rank " + std::to_string(o_.node_rank) + " of " + std::to_string(o_.nnodes_max) +
      " joined the job at " + where + " (ranks " + std::to_string(global(0)) + ".." +
      std::to_string(global(o_.nprocs - 1)) + " of " + std::to_string(o_.nnodes_max * o_.nprocs) +
      ")");
  return std::nullopt;
}

std::optional<int> Job::install_signal_handlers() {
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
  return std::nullopt;
}

// Reads the signal pipe: the first forwarded signal stops the job with it, a second kills.
void Job::handle_signals() {
  unsigned char sigs[64];
  const ssize_t n = ::read(signal_read_, sigs, sizeof sigs);
  for (ssize_t k = 0; k < n; ++k) {
    const int signo = sigs[k];
    if (signo == SIGCHLD) continue;
    if (forwarded_++ == 0) {
      say("got " + signal_name(signo) + ", forwarding it to " + std::to_string(running_count()) +
          " rank(s)");
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

// True once no rank runs or waits for a restart and every output pipe is closed. When the last
// rank is gone, the pipes (held by the ranks' leftovers) get the grace period to drain.
bool Job::all_done() {
  if (running_count() != 0 || next_restart() != Clock::time_point::max()) return false;
  if (streams_.empty()) return nodes_done();
  if (drain_until_ == Clock::time_point::max()) drain_until_ = Clock::now() + o_.grace;
  return false;
}

// Several nodes: this node's ranks are gone. It says so in the store; node 0, whose store the
// others' ranks may still use, then waits until every node is done (or has stopped beating).
bool Job::nodes_done() {
  if (!multi_node() || !self_store_) return true;
  if (!done_published_) {
    done_published_ = true;
    publish_done(*self_store_, placement_.node_rank, exit_code_);
  }
  if (placement_.node_rank != 0 || !watch_) return true;
  if (!nodes_awaited_) {
    nodes_awaited_ = true;
    watch_->await_nodes();
  }
  return nodes_done_;
}

// What the node watch saw: another node's failure or the store's loss stops this node's ranks;
// on node 0, the end of the wait for the others.
void Job::handle_node_events() {
  while (std::optional<NodeWatch::Event> e = watch_->take()) {
    switch (e->kind) {
      case NodeWatch::Kind::kAbort:
      case NodeWatch::Kind::kStoreLost:
        if (stopping_) break;  // this node's own abort, or already stopping
        say((e->kind == NodeWatch::Kind::kAbort ? "the job failed on " + e->message
                                                : "lost the job's store: " + e->message) +
            "; stopping " + std::to_string(running_count()) + " rank(s) on this node");
        remote_stop_ = true;
        if (exit_code_ == 0) exit_code_ = e->exit_code != 0 ? e->exit_code : 1;
        stop(SIGTERM, e->kind == NodeWatch::Kind::kAbort ? e->message
                                                         : "lost the job's store: " + e->message);
        break;
      case NodeWatch::Kind::kNodeSilent:
        if (stopping_) break;
        failure_ = e->message;
        say(e->message + "; stopping " + std::to_string(running_count()) + " rank(s) on this node");
        if (exit_code_ == 0) exit_code_ = 1;
        stop(SIGTERM, failure_notice());
        break;
      case NodeWatch::Kind::kNodeLost:
        say(e->message);
        if (exit_code_ == 0) exit_code_ = 1;
        nodes_done_ = true;
        break;
      case NodeWatch::Kind::kNodesDone: nodes_done_ = true; break;
    }
  }
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

}  // namespace

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace tessera::tools::launch
