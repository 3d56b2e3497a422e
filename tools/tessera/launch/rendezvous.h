// Multi-node `tessera launch` (docs/LAUNCH.md, "Several hosts"): the job's store token, the
// launchers of every node joining node rank 0's store, and the watch each launcher keeps on that
// store while the job runs, so that a failure on one node stops the job on every node.
//
// Keys, all under "tessera/launch/" (decimal strings unless said otherwise):
//   node/<R>/claims   add()ed by the launcher of node R: a second launcher of R sees 2 and stops
//   node/<R>/layout   "<nnodes_min>:<nnodes_max>,<nproc_per_node>": every node checks they agree
//   node/<R>/host     its host name, for messages
//   node/<R>/alive    a counter it bumps every kBeat while it runs
//   node/<R>/done     its exit code, once its ranks are gone
//   aborts, abort     the count of failed nodes; the first sets abort = "<exit code> <why>"
//   members           "<generation> <node>,<node>,...": the nodes the job runs on from that
//                     generation on, set by node 0 when it re-forms the job without a lost node
//                     (--nnodes MIN:MAX); absent while every node is in it
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "options.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/status.h"

namespace tessera::tools::launch {

using SteadyTime = std::chrono::steady_clock::time_point;

// The job's store token: TESSERA_STORE_TOKEN when set (the same on every node); else node 0
// generates 128 random bits (hex) and writes them to --rdzv-token-file when given (mode 0600),
// where the other nodes wait for it until `deadline`. A multi-node job with neither is an
// error that says what to set.
Result<std::string> job_token(const LaunchOptions& options, SteadyTime deadline);

// Joins the job: claims this node's rank, publishes its layout and host name, and waits until
// `deadline` for every node's. Errors name the node rank that claimed twice, disagrees, or did
// not arrive.
Status join_nodes(coll::Store& store, const LaunchOptions& options, const std::string& hostname,
                  SteadyTime deadline);

// Tells every node that this one failed (only the job's first failure is kept) and that its
// ranks are gone. Best effort: a store that is gone cannot be told.
void publish_abort(coll::Store& store, int exit_code, const std::string& why);
void publish_done(coll::Store& store, int node_rank, int exit_code);

// The job's nodes after a re-forming (node 0 publishes them before the new generation).
struct Members {
  int generation = 0;
  std::vector<int> nodes;  // node ranks, ascending
};
Status publish_members(coll::Store& store, const Members& members);
// nullopt while the job was never re-formed; an error when the store fails or holds garbage.
Result<std::optional<Members>> read_members(coll::Store& store);

// A thread that keeps this node's heartbeat in the store and watches it for another node's
// failure; node 0 also waits, once asked, for every node to be done. Events are queued and
// announced on fd() (readable while one waits). Thread-safe.
class NodeWatch {
 public:
  enum class Kind {
    kAbort,       // another node failed: exit_code is its code, message says why
    kStoreLost,   // the store stopped answering (node 0's launcher is gone)
    kNodesDone,   // node 0 only, after await_nodes(): every node is done
    kNodeLost,    // node 0 only, after await_nodes(): a node stopped beating before it was done
    kNodeSilent,  // node 0 only, while the job runs: a node stopped beating (host or link lost)
    kReformed,    // not node 0: node 0 re-formed the job on fewer nodes (message: the members)
  };
  struct Event {
    Kind kind;
    int exit_code = 1;
    std::string message;
    int node = -1;  // kNodeSilent: the silent node
  };

  // `store` is this watch's own client; `options` supplies node_rank and nnodes_max. With
  // nnodes_min < nnodes_max (the job may shrink) node 0 goes on watching after a kNodeSilent and
  // never reports that node again (nor waits for it in await_nodes); the other nodes report
  // each new "members" value.
  static Result<std::unique_ptr<NodeWatch>> start(std::unique_ptr<coll::Store> store,
                                                  const LaunchOptions& options);
  ~NodeWatch();  // stops the thread (bounded by one store round trip)
  NodeWatch(const NodeWatch&) = delete;
  NodeWatch& operator=(const NodeWatch&) = delete;

  int fd() const { return pipe_read_; }
  std::optional<Event> take();  // the next event, if any; drains fd()
  void await_nodes();           // node 0: report kNodesDone / kNodeLost from now on

 private:
  NodeWatch(std::unique_ptr<coll::Store> store, int node_rank, int nnodes, bool elastic,
            int pipe_read, int pipe_write);
  void check_members();  // not node 0, elastic: posts kReformed when "members" changed
  void run();
  bool check_nodes(SteadyTime now);  // true once an event ended the wait
  // Node 0: updates the others' done flags and heartbeats; the first node silent for
  // kNodeSilence before it was done (-1: none), and in *all_done whether every node is done.
  int silent_node(SteadyTime now, bool* all_done);
  std::string silence_message(int node);
  void post(Event event);
  void post_all(std::vector<Event> events);  // queued together: one take() loop sees them all

  std::unique_ptr<coll::Store> store_;
  const int node_rank_;
  const int nnodes_;
  const bool elastic_;
  const int pipe_read_;
  const int pipe_write_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> awaiting_{false};
  std::mutex mutex_;
  std::deque<Event> events_;
  // Node 0's view of the others while it waits: last heartbeat seen and when it changed.
  std::vector<std::string> last_beat_;
  std::vector<SteadyTime> beat_changed_;
  std::vector<bool> done_;
  std::vector<bool> lost_;    // elastic: reported silent, no longer watched
  std::string members_seen_;  // elastic, not node 0: the last "members" value reported
  std::thread thread_;
};

}  // namespace tessera::tools::launch
