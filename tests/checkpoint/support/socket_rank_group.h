// Test support: a RankGroup over socketpairs created before fork(), so a test can run N ranks as
// processes (and SIGKILL them). Header-only. Every call has a timeout; errors name the peer.
//
//   auto mesh = SocketMesh::create(4).value();
//   run_ranks(4, [&](int rank) { auto group = mesh.take(rank); ... return 0; });
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/rank_group.h"

namespace tessera::ckpt::testing {

class SocketRankGroup final : public RankGroup {
 public:
  // fds[peer]: this rank's end of the socket to `peer` (-1 for itself). Takes ownership.
  SocketRankGroup(int rank, std::vector<int> fds, int timeout_ms)
      : rank_(rank), fds_(std::move(fds)), timeout_ms_(timeout_ms) {
    for (int fd : fds_) {
      if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  ~SocketRankGroup() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(fds_.size()); }
  Status barrier() override { return allgather("").status(); }
  Result<std::vector<std::string>> allgather(std::string_view bytes) override {
    std::vector<Out> outs;
    std::vector<In> ins;
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      outs.push_back(Out(p, bytes));
      ins.push_back(In(p));
    }
    TSR_RETURN_IF_ERROR(transfer(outs, ins, "allgather"));
    std::vector<std::string> all(size());
    all[rank_] = std::string(bytes);
    for (auto& in : ins) all[in.peer] = std::move(in.payload);
    return all;
  }
  Status send(int peer, std::string_view bytes) override {
    TSR_RETURN_IF_ERROR(check_peer(peer, "send to"));
    std::vector<Out> outs{Out(peer, bytes)};
    std::vector<In> ins;
    return transfer(outs, ins, "send");
  }
  Result<std::string> recv(int peer) override {
    TSR_RETURN_IF_ERROR(check_peer(peer, "recv from"));
    std::vector<Out> outs;
    std::vector<In> ins{In(peer)};
    TSR_RETURN_IF_ERROR(transfer(outs, ins, "recv"));
    return std::move(ins[0].payload);
  }

 private:
  struct Out {
    Out(int p, std::string_view bytes) : peer(p), payload(bytes) {
      uint64_t n = bytes.size();
      std::memcpy(header, &n, 8);
    }
    int peer;
    char header[8] = {};
    std::string_view payload;
    size_t done = 0;  // of header + payload
    bool finished() const { return done == 8 + payload.size(); }
  };
  struct In {
    explicit In(int p) : peer(p) {}
    int peer;
    char header[8] = {};
    std::string payload;
    size_t done = 0;
    bool have_header = false;
    bool finished() const { return have_header && done == 8 + payload.size(); }
  };

  Status check_peer(int peer, const char* op) const {
    if (peer < 0 || peer >= size() || peer == rank_) {
      return invalid_argument(std::string(op) + " rank " + std::to_string(peer) + ": no such peer");
    }
    return Status();
  }

  Status peer_error(const char* op, int peer, std::string why) const {
    return unavailable(std::string(op) + " with rank " + std::to_string(peer) + " (from rank " +
                       std::to_string(rank_) + "): " + why);
  }

  Status transfer(std::vector<Out>& outs, std::vector<In>& ins, const char* op) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    for (;;) {
      std::vector<pollfd> pfds;
      std::vector<std::pair<Out*, In*>> who;
      for (auto& o : outs) {
        if (!o.finished()) {
          pfds.push_back({fds_[o.peer], POLLOUT, 0});
          who.push_back({&o, nullptr});
        }
      }
      for (auto& i : ins) {
        if (!i.finished()) {
          pfds.push_back({fds_[i.peer], POLLIN, 0});
          who.push_back({nullptr, &i});
        }
      }
      if (pfds.empty()) return Status();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) {
        int peer = who[0].first ? who[0].first->peer : who[0].second->peer;
        return peer_error(op, peer, "timed out after " + std::to_string(timeout_ms_) + " ms");
      }
      int rc = ::poll(pfds.data(), pfds.size(), static_cast<int>(left));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return internal_error(std::string("poll: ") + std::strerror(errno));
      for (size_t k = 0; k < pfds.size(); ++k) {
        if (pfds[k].revents == 0) continue;
        if (Out* o = who[k].first) {
          TSR_RETURN_IF_ERROR(step_out(*o, op));
        } else {
          TSR_RETURN_IF_ERROR(step_in(*who[k].second, op));
        }
      }
    }
  }

  Status step_out(Out& o, const char* op) {
    while (!o.finished()) {
      const char* p;
      size_t n;
      if (o.done < 8) {
        p = o.header + o.done;
        n = 8 - o.done;
      } else {
        p = o.payload.data() + (o.done - 8);
        n = o.payload.size() - (o.done - 8);
      }
      ssize_t w = ::send(fds_[o.peer], p, n, MSG_NOSIGNAL);
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status();
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return peer_error(op, o.peer, std::strerror(errno));
      o.done += static_cast<size_t>(w);
    }
    return Status();
  }

  Status step_in(In& i, const char* op) {
    while (!i.finished()) {
      char* p;
      size_t n;
      if (!i.have_header) {
        p = i.header + i.done;
        n = 8 - i.done;
      } else {
        p = i.payload.data() + (i.done - 8);
        n = i.payload.size() - (i.done - 8);
      }
      ssize_t r = ::recv(fds_[i.peer], p, n, 0);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status();
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return peer_error(op, i.peer, std::strerror(errno));
      if (r == 0) return peer_error(op, i.peer, "peer closed the connection (dead rank?)");
      i.done += static_cast<size_t>(r);
      if (!i.have_header && i.done == 8) {
        uint64_t len;
        std::memcpy(&len, i.header, 8);
        i.payload.resize(len);
        i.have_header = true;
      }
    }
    return Status();
  }

  int rank_;
  std::vector<int> fds_;
  int timeout_ms_;
};

// N*(N-1)/2 socketpairs made before fork(); each process takes its row and closes the rest.
class SocketMesh {
 public:
  static Result<SocketMesh> create(int n) {
    SocketMesh mesh;
    mesh.fds_.assign(n, std::vector<int>(n, -1));
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
          return internal_error(std::string("socketpair: ") + std::strerror(errno));
        }
        mesh.fds_[i][j] = sv[0];
        mesh.fds_[j][i] = sv[1];
      }
    }
    return mesh;
  }
  SocketMesh() = default;
  SocketMesh(SocketMesh&& other) noexcept : fds_(std::move(other.fds_)) { other.fds_.clear(); }
  SocketMesh& operator=(SocketMesh&&) = delete;
  ~SocketMesh() { close_all(); }

  // In the child of rank `rank`: its group; every other descriptor of the mesh is closed so a
  // dead peer shows as end-of-file.
  std::shared_ptr<RankGroup> take(int rank, int timeout_ms = 20000) {
    std::vector<int> mine = fds_[rank];
    for (int& fd : fds_[rank]) fd = -1;
    close_all();
    return std::make_shared<SocketRankGroup>(rank, std::move(mine), timeout_ms);
  }
  void close_all() {
    for (auto& row : fds_) {
      for (int& fd : row) {
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
    }
  }

 private:
  std::vector<std::vector<int>> fds_;
};

struct RankExit {
  int code = -1;   // exit status, -1 when killed
  int signal = 0;  // the signal that killed it
};

// Forks one process per rank running fn(rank, group); returns how each ended. A rank still alive
// after `timeout_s` is killed (and reported with SIGKILL). `between(pids)` runs in the parent
// after the fork (e.g. to kill ranks at a random moment).
inline std::vector<RankExit> run_ranks(
    int n, const std::function<int(int, std::shared_ptr<RankGroup>)>& fn, double timeout_s = 60,
    const std::function<void(const std::vector<pid_t>&)>& between = {}) {
  auto mesh = SocketMesh::create(n);
  std::vector<RankExit> exits(n);
  if (!mesh.ok()) return exits;
  std::fflush(nullptr);
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = fn(r, mesh->take(r));
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids[r] = pid;
  }
  mesh->close_all();
  if (between) between(pids);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int left = n;
  while (left > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] != pid) continue;
        exits[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        exits[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        pids[r] = -1;
        --left;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
    }
    ::usleep(1000);
  }
  return exits;
}

}  // namespace tessera::ckpt::testing
