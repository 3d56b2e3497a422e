// This launcher's place among the job's nodes. Node rank 0 (or a launcher alone) hosts the
// job's TCP store and every launcher connects to it; on several nodes each launcher joins the
// others, keeps a NodeWatch on the store (rendezvous.h), turns its events into stops (another
// node failed, the store is gone, a node fell silent) and, when its own ranks are done, says so;
// node 0 then waits for every node, since their ranks may still use its store.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

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

}  // namespace tessera::tools::launch
