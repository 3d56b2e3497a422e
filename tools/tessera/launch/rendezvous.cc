#include "rendezvous.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "tessera/common/env.h"

namespace tessera::tools::launch {
namespace {

using namespace std::chrono_literals;

// How often a launcher beats and looks for an abort, and how long node 0 waits for a node whose
// heartbeat stopped before it gives that node up.
constexpr auto kBeat = 200ms;
constexpr auto kNodeSilence = 10s;

std::string node_key(int node, const char* what) {
  return "tessera/launch/node/" + std::to_string(node) + "/" + what;
}
constexpr const char* kAbortsKey = "tessera/launch/aborts";
constexpr const char* kAbortKey = "tessera/launch/abort";
constexpr const char* kMembersKey = "tessera/launch/members";

std::chrono::milliseconds left_until(SteadyTime deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : 0ms;
}

Result<std::string> random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return internal_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  char two[3];
  for (unsigned char b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

// Written to a temporary file of mode 0600 and renamed, so a reader never sees half a token.
Status write_token_file(const std::string& path, const std::string& token) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unavailable("--rdzv-token-file: cannot create '" + tmp + "': " + std::strerror(errno));
  }
  const std::string line = token + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return unavailable("--rdzv-token-file: cannot write '" + path + "': " + std::strerror(errno));
  }
  return {};
}

// Polls for the file node 0 writes (a shared file system may show it late).
Result<std::string> read_token_file(const std::string& path, SteadyTime deadline) {
  for (;;) {
    std::ifstream in(path);
    std::string token;
    if (in && std::getline(in, token) && !token.empty()) return token;
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("--rdzv-token-file '" + path +
                               "': node rank 0 did not write the job token before "
                               "--rdzv-timeout-s passed");
    }
    std::this_thread::sleep_for(100ms);
  }
}

}  // namespace

Result<std::string> job_token(const LaunchOptions& options, SteadyTime deadline) {
  if (auto token = env::get(coll::kStoreTokenEnv); token && !token->empty()) return *token;
  const std::string& file = options.rdzv_token_file;
  if (options.node_rank == 0) {
    TSR_ASSIGN_OR_RETURN(std::string token, random_token());
    if (!file.empty()) TSR_RETURN_IF_ERROR(write_token_file(file, token));
    if (file.empty() && options.nnodes_max > 1) {
      return invalid_argument(
          "a job on several nodes needs the same store token on every node: export "
          "TESSERA_STORE_TOKEN (e.g. $(openssl rand -hex 16)) before starting the launchers, or "
          "give --rdzv-token-file PATH on a file system every node shares");
    }
    return token;
  }
  if (file.empty()) {
    return invalid_argument("node rank " + std::to_string(options.node_rank) +
                            " has no store token: export the job's TESSERA_STORE_TOKEN on every "
                            "node, or give every node the same --rdzv-token-file PATH");
  }
  return read_token_file(file, deadline);
}

Status join_nodes(coll::Store& store, const LaunchOptions& options, const std::string& hostname,
                  SteadyTime deadline) {
  const int me = options.node_rank;
  TSR_ASSIGN_OR_RETURN(int64_t claims, store.add(node_key(me, "claims"), 1));
  if (claims > 1) {
    return already_exists("node rank " + std::to_string(me) +
                          " has already joined this job (two launchers with --node-rank " +
                          std::to_string(me) + "?)");
  }
  const std::string layout = std::to_string(options.nnodes_min) + ":" +
                             std::to_string(options.nnodes_max) + "," +
                             std::to_string(options.nprocs);
  TSR_RETURN_IF_ERROR(store.set(node_key(me, "host"), hostname));
  TSR_RETURN_IF_ERROR(store.set(node_key(me, "layout"), layout));
  for (int node = 0; node < options.nnodes_max; ++node) {
    auto theirs = store.get(node_key(node, "layout"), left_until(deadline));
    if (!theirs.ok()) {
      if (theirs.status().code() == StatusCode::kDeadlineExceeded) {
        return deadline_exceeded(
            "node rank " + std::to_string(node) + " of " + std::to_string(options.nnodes_max) +
            " did not join within --rdzv-timeout-s " + std::to_string(options.rdzv_timeout_s));
      }
      return theirs.status().with_context("waiting for node rank " + std::to_string(node));
    }
    if (*theirs != layout) {
      auto host = store.get(node_key(node, "host"), 1000ms);
      return invalid_argument(
          "node rank " + std::to_string(node) + " (" + (host.ok() ? *host : std::string("?")) +
          ") was started with --nnodes/--nproc-per-node " + *theirs + ", this node with " + layout);
    }
  }
  return {};
}

void publish_abort(coll::Store& store, int exit_code, const std::string& why) {
  auto first = store.add(kAbortsKey, 1);
  if (first.ok() && *first == 1) {
    (void)store.set(kAbortKey, std::to_string(exit_code) + " " + why).ok();
  }
}

void publish_done(coll::Store& store, int node_rank, int exit_code) {
  (void)store.set(node_key(node_rank, "done"), std::to_string(exit_code)).ok();
}

Status publish_members(coll::Store& store, const Members& members) {
  std::string text = std::to_string(members.generation) + " ";
  for (size_t i = 0; i < members.nodes.size(); ++i) {
    text += (i == 0 ? "" : ",") + std::to_string(members.nodes[i]);
  }
  return store.set(kMembersKey, text).with_context("publishing the job's nodes " + text);
}

Result<std::optional<Members>> read_members(coll::Store& store) {
  auto text = store.get(kMembersKey, 0ms);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kDeadlineExceeded) return std::optional<Members>();
    return text.status().with_context("reading the job's nodes");
  }
  Members members;
  const size_t space = text->find(' ');
  auto nodes = coll::parse_rank_list(space == std::string::npos ? "" : text->substr(space + 1));
  if (space == std::string::npos || std::sscanf(text->c_str(), "%d", &members.generation) != 1 ||
      !nodes.ok()) {
    return internal_error(std::string(kMembersKey) + " holds '" + *text +
                          "', not '<generation> <node>,<node>,...'");
  }
  members.nodes = std::move(*nodes);
  return std::optional<Members>(std::move(members));
}

Result<std::unique_ptr<NodeWatch>> NodeWatch::start(std::unique_ptr<coll::Store> store,
                                                    const LaunchOptions& options) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return internal_error(std::string("node watch pipe: ") + std::strerror(errno));
  }
  return std::unique_ptr<NodeWatch>(
      new NodeWatch(std::move(store), options.node_rank, options.nnodes_max,
                    options.nnodes_min < options.nnodes_max, fds[0], fds[1]));
}

NodeWatch::NodeWatch(std::unique_ptr<coll::Store> store, int node_rank, int nnodes, bool elastic,
                     int pipe_read, int pipe_write)
    : store_(std::move(store)),
      node_rank_(node_rank),
      nnodes_(nnodes),
      elastic_(elastic),
      pipe_read_(pipe_read),
      pipe_write_(pipe_write),
      last_beat_(static_cast<size_t>(nnodes)),
      beat_changed_(static_cast<size_t>(nnodes)),
      done_(static_cast<size_t>(nnodes), false),
      lost_(static_cast<size_t>(nnodes), false) {
  // Silence is counted from the start: a node that never beats is lost too.
  std::fill(beat_changed_.begin(), beat_changed_.end(), std::chrono::steady_clock::now());
  thread_ = std::thread([this] { run(); });
}

NodeWatch::~NodeWatch() {
  stop_ = true;
  thread_.join();
  ::close(pipe_read_);
  ::close(pipe_write_);
}

std::optional<NodeWatch::Event> NodeWatch::take() {
  char sink[64];
  while (::read(pipe_read_, sink, sizeof sink) > 0) {
  }
  std::lock_guard lock(mutex_);
  if (events_.empty()) return std::nullopt;
  Event event = std::move(events_.front());
  events_.pop_front();
  if (!events_.empty()) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(pipe_write_, &byte, 1);
  }
  return event;
}

void NodeWatch::await_nodes() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& t : beat_changed_) t = now;  // silence is counted from here
  awaiting_ = true;
}

void NodeWatch::post(Event event) {
  std::vector<Event> one;
  one.push_back(std::move(event));
  post_all(std::move(one));
}

void NodeWatch::post_all(std::vector<Event> events) {
  {
    std::lock_guard lock(mutex_);
    for (Event& e : events) events_.push_back(std::move(e));
  }
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(pipe_write_, &byte, 1);
}

// Beats, then looks for an abort (the get parks up to kBeat on the server: that is the wait). An
// abort is reported once; the thread goes on beating (and, on node 0, waiting for the others'
// done) until the store is lost, the wait ends, or the launcher stops it.
void NodeWatch::run() {
  uint64_t beat = 0;
  bool abort_seen = false;
  while (!stop_) {
    Status beaten = store_->set(node_key(node_rank_, "alive"), std::to_string(++beat));
    if (!beaten.ok()) {
      post({Kind::kStoreLost, 1, beaten.message()});
      return;
    }
    if (abort_seen) {
      std::this_thread::sleep_for(kBeat);
    } else if (auto abort = store_->get(kAbortKey, kBeat); abort.ok()) {
      int code = 1;
      std::string why = *abort;
      if (std::sscanf(abort->c_str(), "%d", &code) == 1) why = abort->substr(abort->find(' ') + 1);
      post({Kind::kAbort, code, why});
      abort_seen = true;
    } else if (abort.status().code() != StatusCode::kDeadlineExceeded) {
      post({Kind::kStoreLost, 1, abort.status().message()});
      return;
    }
    if (awaiting_ && check_nodes(std::chrono::steady_clock::now())) return;
    // While the job runs, node 0 also tells a node gone silent (its host down, its link cut):
    // the ranks waiting on it learn it from the notice instead of at their collective timeout.
    // A job that may shrink goes on watching: the launcher re-forms it without that node.
    if (!awaiting_ && node_rank_ == 0 && !abort_seen) {
      // Every node silent by now is posted at once (one take() loop sees them all), so that they
      // cost one re-forming.
      bool all_done = false;
      const auto now = std::chrono::steady_clock::now();
      std::vector<Event> silent;
      for (int node; !abort_seen && (node = silent_node(now, &all_done)) >= 0;) {
        silent.push_back({Kind::kNodeSilent, 1, silence_message(node), node});
        if (elastic_) {
          lost_[static_cast<size_t>(node)] = true;
        } else {
          abort_seen = true;
        }
      }
      if (!silent.empty()) post_all(std::move(silent));
    }
    if (elastic_ && node_rank_ != 0 && !abort_seen) check_members();
  }
}

std::string NodeWatch::silence_message(int node) {
  auto host = store_->get(node_key(node, "host"), 0ms);
  return "node rank " + std::to_string(node) + " (" + (host.ok() ? *host : "?") +
         ") stopped answering for " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kNodeSilence).count()) +
         " s";
}

void NodeWatch::check_members() {
  auto text = store_->get(kMembersKey, 0ms);
  if (!text.ok() || *text == members_seen_) return;
  members_seen_ = *text;
  post({Kind::kReformed, 0, *text});
}

int NodeWatch::silent_node(SteadyTime now, bool* all_done) {
  *all_done = true;
  for (int node = 0; node < nnodes_; ++node) {
    const auto i = static_cast<size_t>(node);
    if (done_[i] || lost_[i] || node == node_rank_) continue;
    if (store_->get(node_key(node, "done"), 0ms).ok()) {
      done_[i] = true;
      continue;
    }
    *all_done = false;
    auto beat = store_->get(node_key(node, "alive"), 0ms);
    const std::string seen = beat.ok() ? *beat : "";
    if (seen != last_beat_[i]) {
      last_beat_[i] = seen;
      beat_changed_[i] = now;
    } else if (now - beat_changed_[i] >= kNodeSilence) {
      return node;
    }
  }
  return -1;
}

bool NodeWatch::check_nodes(SteadyTime now) {
  bool all = true;
  if (int node = silent_node(now, &all); node >= 0) {
    post({Kind::kNodeLost, 1, silence_message(node) + " before it was done"});
    return true;
  }
  if (all) post({Kind::kNodesDone, 0, {}});
  return all;
}

}  // namespace tessera::tools::launch
