// This launcher's place among the job's nodes. Node rank 0 (or a launcher alone) hosts the
// job's TCP store and every launcher connects to it; on several nodes each launcher joins the
// others, keeps a NodeWatch on the store (rendezvous.h), turns its events into stops (another
// node failed, the store is gone, a node fell silent) and, when its own ranks are done, says so;
// node 0 then waits for every node, since their ranks may still use its store.
//
// With --nnodes MIN:MAX a silent node does not fail the job while at least MIN nodes are left:
// node 0 re-forms it on the others (docs/LAUNCH.md, "Re-forming on fewer nodes"). It publishes,
// in this order, the new members (rendezvous.h), the new generation's old ranks
// (coll::generation_old_ranks_key) and the generation itself, so a survivor that sees the
// generation in Bootstrap::next_generation also finds its new place; the other surviving
// launchers read the members before they restart a rank, and when their watch reports them.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "job.h"

namespace tessera::tools::launch {

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
  for (int node = 0; node < o_.nnodes_max; ++node) members_.push_back(node);
  say("node rank " + std::to_string(o_.node_rank) + " of " + std::to_string(o_.nnodes_max) +
      " joined the job at " + where + " (ranks " + std::to_string(global(0)) + ".." +
      std::to_string(global(o_.nprocs - 1)) + " of " + std::to_string(o_.nnodes_max * o_.nprocs) +
      ")");
  return std::nullopt;
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
  std::vector<int> silent;  // nodes that fell silent together re-form the job once
  std::string silence;
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
        silent.push_back(e->node);
        silence += (silence.empty() ? "" : "; ") + e->message;
        break;
      case NodeWatch::Kind::kReformed: refresh_members(); break;
      case NodeWatch::Kind::kNodeLost:
        say(e->message);
        if (exit_code_ == 0) exit_code_ = 1;
        nodes_done_ = true;
        break;
      case NodeWatch::Kind::kNodesDone: nodes_done_ = true; break;
    }
  }
  if (silent.empty() || stopping_ || reform_without(silent, silence)) return;
  const int left = static_cast<int>(members_.size() - silent.size());
  failure_ = silence + "; " + std::to_string(left) + " of " + std::to_string(o_.nnodes_max) +
             " nodes left, fewer than --nnodes minimum " + std::to_string(o_.nnodes_min);
  say(failure_ + "; stopping " + std::to_string(running_count()) + " rank(s) on this node");
  if (exit_code_ == 0) exit_code_ = 1;
  stop(SIGTERM, failure_notice());
}

// Node 0, --nnodes MIN:MAX: the job goes on without the `lost` nodes while at least MIN are left.
// The new world is the survivors' ranks in their old order; the ranks running now learn it in
// Bootstrap::next_generation, a rank restarted later from its environment. False (nothing
// changed) when the job cannot shrink or the store refuses the new generation.
bool Job::reform_without(const std::vector<int>& lost, const std::string& why) {
  if (!elastic_nodes() || placement_.node_rank != 0 || !self_store_) return false;
  std::vector<int> left;
  std::string old_ranks;
  for (size_t index = 0; index < members_.size(); ++index) {
    const int node = members_[index];
    if (std::find(lost.begin(), lost.end(), node) != lost.end()) continue;
    left.push_back(node);
    for (int l = 0; l < o_.nprocs; ++l) {
      old_ranks += (old_ranks.empty() ? "" : ",") + std::to_string(index * o_.nprocs + l);
    }
  }
  if (static_cast<int>(left.size()) < o_.nnodes_min) return false;
  const int generation = next_generation();
  Status published = publish_members(*self_store_, {generation, left});
  if (published.ok()) {
    published = self_store_->set(coll::generation_old_ranks_key(generation), old_ranks);
  }
  if (published.ok()) {
    published = self_store_->set(coll::kGenerationKey, std::to_string(generation));
  }
  if (!published.ok()) {
    say("cannot re-form the job on the nodes left: " + published.message());
    return false;
  }
  generation_ = generation;
  members_ = std::move(left);
  placement_.node_index = 0;  // node 0 stays first
  placement_.nnodes = static_cast<int>(members_.size());
  const int world = placement_.nnodes * o_.nprocs;
  say(why + "; the job re-forms on " + std::to_string(placement_.nnodes) + " of " +
      std::to_string(o_.nnodes_max) + " nodes (--nnodes " + std::to_string(o_.nnodes_min) + ":" +
      std::to_string(o_.nnodes_max) + "): ranks 0.." + std::to_string(world - 1) + " were ranks " +
      old_ranks + ", TESSERA_GENERATION=" + std::to_string(generation));
  return true;
}

// Not node 0: takes the job's nodes node 0 published after a node loss, so that the ranks this
// launcher restarts from now on get their new RANK and WORLD_SIZE. A node left out (node 0 found
// it silent) stops its ranks without failing the re-formed job.
void Job::refresh_members() {
  if (!multi_node() || !elastic_nodes() || placement_.node_rank == 0 || !self_store_) return;
  auto members = read_members(*self_store_);
  if (!members.ok()) {
    say(members.status().message());
    return;
  }
  if (!*members || (*members)->generation == members_generation_) return;
  const std::vector<int>& nodes = (*members)->nodes;
  members_generation_ = (*members)->generation;
  const auto mine = std::find(nodes.begin(), nodes.end(), placement_.node_rank);
  if (mine == nodes.end()) {
    if (stopping_) return;
    failure_ = "node rank " + std::to_string(placement_.node_rank) +
               " was left out when node rank 0 re-formed the job (generation " +
               std::to_string(members_generation_) + ")";
    say(failure_ + "; stopping " + std::to_string(running_count()) + " rank(s) on this node");
    remote_stop_ = true;  // the job goes on without this node: nothing to publish
    if (exit_code_ == 0) exit_code_ = 1;
    stop(SIGTERM, failure_);
    return;
  }
  members_ = nodes;
  placement_.node_index = static_cast<int>(mine - nodes.begin());
  placement_.nnodes = static_cast<int>(nodes.size());
  say("node rank 0 re-formed the job on " + std::to_string(placement_.nnodes) +
      " nodes (generation " + std::to_string(members_generation_) + "): this node's ranks are " +
      std::to_string(global(0)) + ".." + std::to_string(global(o_.nprocs - 1)) + " of " +
      std::to_string(placement_.nnodes * o_.nprocs));
}

}  // namespace tessera::tools::launch
