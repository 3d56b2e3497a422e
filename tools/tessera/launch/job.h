// The launcher's Job (run_job, supervisor.h), private to tools/tessera/launch. One class whose
// methods are split by phase so each file reads on its own:
//   supervisor.cc         run_job: prepare, start the ranks, the event loop and its deadlines
//   rank_spawn.cc         starting a rank (fork, its own process group, execve) and reaping
//   rank_output.cc        relaying each rank's output with its "[rank R] " prefix
//   restart_policy.cc     a rank's exit: restart it after its backoff, or fail the job
//   abort_propagation.cc  stopping every rank: the abort notice first, then the signals
//   signal_forwarding.cc  SIGINT/TERM/HUP/QUIT reach the launcher through a pipe and the ranks
//   node_membership.cc    the job's store, joining the other nodes and their watch's events,
//                         re-forming the job on fewer nodes after a node loss (--nnodes MIN:MAX)
// Not thread-safe (see supervisor.h); one Job per launcher process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abort_notice.h"
#include "options.h"
#include "rendezvous.h"
#include "tessera/coll/bootstrap.h"
#include "watchdog.h"

namespace tessera::tools::launch {

using Clock = std::chrono::steady_clock;

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
  // Before the first rank (supervisor.cc, node_membership.cc, signal_forwarding.cc).
  std::optional<int> prepare();
  std::optional<int> host_or_join_store();
  std::optional<int> install_signal_handlers();
  Status start_guards();
  // run()'s phases.
  void start_ranks();
  bool all_done();
  bool nodes_done();
  void handle_node_events();
  bool reform_without(const std::vector<int>& lost, const std::string& why);
  void refresh_members();
  bool enforce_deadlines(Clock::time_point now, Clock::time_point job_deadline);
  void wait_for_events(Clock::time_point now, Clock::time_point job_deadline);
  void handle_signals();
  void finish();
  // Ranks: starting, output, exits and restarts.
  Status spawn(int rank);
  void pump(Stream& s);
  void flush(Stream& s);
  void reap();
  void on_rank_exit(int rank, int status);
  void schedule_restart(int rank, const std::string& how);
  void fail_job(int rank, int status, const std::string& how);
  int next_generation();
  void restart_due(Clock::time_point now);
  void restart(int rank);
  void publish(std::string_view key, int value);
  // Stopping. `notice` (a failure's reason) goes to the ranks first (abort_notice.h); empty:
  // signal now.
  void stop(int signo, const std::string& notice = {});
  std::string failure_notice() const;
  void signal_groups(int signo);
  void forget_empty_groups();
  // Small queries.
  int running_count() const;
  Clock::time_point next_restart() const;
  int global(int local_rank) const { return placement_.global_rank(o_.nprocs, local_rank); }
  bool multi_node() const { return o_.nnodes_max > 1; }
  bool elastic_nodes() const { return o_.nnodes_min < o_.nnodes_max; }

  const LaunchOptions& o_;
  std::vector<RankProc> ranks_;
  std::list<Stream> streams_;
  std::unique_ptr<coll::TcpStoreServer> store_;
  std::unique_ptr<coll::Store> self_store_;  // a client of the job's store, to publish restarts
  NodePlacement placement_;
  std::unique_ptr<NodeWatch> watch_;   // several nodes: the other nodes' failures, node 0's wait
  std::vector<int> members_;           // several nodes: the job's node ranks now, ascending
  int members_generation_ = -1;        // not node 0: the re-forming members_ comes from; -1: none
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

// Writes all of `text` to `fd`, retrying EINTR; drops the rest when fd is gone (rank_output.cc).
void write_all(int fd, std::string_view text);
// One line on stderr prefixed "tessera launch: " (rank_output.cc).
void say(const std::string& line);
// "SIGTERM", or "signal N" for a number without a name (signal_forwarding.cc).
std::string signal_name(int signo);
// Puts every signal the launcher handles back to its default: in a child before execve, and
// when the job is over (signal_forwarding.cc).
void restore_default_handlers();
// Closes the signal pipe's write end that the handler writes to (signal_forwarding.cc).
void close_signal_pipe();

}  // namespace tessera::tools::launch
