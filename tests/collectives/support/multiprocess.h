// Runs a function as N ranks, each a forked process with its own Bootstrap over a TCP store that
// the parent hosts. The parent waits with a deadline and kills every child that outlives it, so a
// hanging collective fails the test instead of hanging it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/platform.h"

// Checks inside a rank function of run_ranks: gtest's assertions do not reach the parent, so a
// rank prints what failed (rank, file, line) and returns 1, which the parent's exit-code check
// reports. They need an int `rank` in scope and a function returning int.
#define CHILD_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                  \
      std::fprintf(stderr, "\n");                                         \
      return 1;                                                           \
    }                                                                     \
  } while (0)

#define CHILD_OK(expr)                                               \
  do {                                                               \
    const ::tessera::Status _s = (expr);                             \
    CHILD_CHECK(_s.ok(), "%s -> %s", #expr, _s.to_string().c_str()); \
  } while (0)

namespace tessera::coll::testing {

struct RankResult {
  int rank = 0;
  int exit_code = -1;  // -1: killed (signal or deadline)
  int signal = 0;
};

struct MultiprocessOptions {
  std::chrono::milliseconds deadline{60000};
  // Host id per rank (TESSERA_HOST_ID), to emulate several hosts; empty: all on this host.
  std::vector<std::string> hosts;
};

// `body(rank, size)` runs in each child and returns its exit code (0 = success). Returns each
// rank's result in rank order.
inline std::vector<RankResult> run_ranks(int n, const std::function<int(int, int)>& body,
                                         MultiprocessOptions options = {}) {
  // The store server runs in its own process: forking the ranks from a process with a live
  // server thread could copy a lock that thread holds (malloc's, under sanitizers) into a child.
  std::fflush(nullptr);
  int port_pipe[2];
  if (pipe(port_pipe) != 0) return {};
  const pid_t store_pid = fork();
  if (store_pid == 0) {
    close(port_pipe[0]);
    auto server = start_tcp_store_server("127.0.0.1", 0);
    int port = server.ok() ? server.value()->port() : -1;
    if (!server.ok()) {
      std::fprintf(stderr, "store server: %s\n", server.status().to_string().c_str());
    }
    (void)!write(port_pipe[1], &port, sizeof port);
    close(port_pipe[1]);
    pause();  // until the parent kills it
    _exit(0);
  }
  close(port_pipe[1]);
  int port = -1;
  const bool got_port = read(port_pipe[0], &port, sizeof port) == ssize_t(sizeof port);
  close(port_pipe[0]);
  struct StoreReaper {
    pid_t pid;
    ~StoreReaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{store_pid};
  if (!got_port || port <= 0) return {};
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (!options.hosts.empty()) setenv("TESSERA_HOST_ID", options.hosts[size_t(r)].c_str(), 1);
      setenv("TESSERA_TEST_STORE_PORT", std::to_string(port).c_str(), 1);
      _exit(body(r, n));
    }
    pids.push_back(pid);
  }
  std::vector<RankResult> results(static_cast<size_t>(n));
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int remaining = n;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = 0;
    for (pid_t p : pids) {
      if (p > 0 && (pid = waitpid(p, &status, WNOHANG)) > 0) break;
    }
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[size_t(r)] != pid) continue;
        results[size_t(r)].rank = r;
        if (WIFEXITED(status)) results[size_t(r)].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[size_t(r)].signal = WTERMSIG(status);
        pids[size_t(r)] = -1;
        --remaining;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

// In a child: the world communicator of rank `rank` of `size`, over the parent's store. Prints
// the error and returns nullptr on failure.
inline std::shared_ptr<Communicator> child_communicator(int rank, int size,
                                                        CommOptions options = {},
                                                        const hal::Device* device = nullptr) {
  LaunchInfo info;
  info.rank = rank;
  info.size = size;
  info.local_rank = rank;
  info.local_size = size;
  const char* port = std::getenv("TESSERA_TEST_STORE_PORT");
  auto store =
      connect_tcp_store("127.0.0.1", port ? std::atoi(port) : 0, std::chrono::milliseconds(10000));
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: store: %s\n", rank, store.status().to_string().c_str());
    return nullptr;
  }
  auto bootstrap = Bootstrap::from_parts(info, std::move(store.value()));
  auto comm = device ? Communicator::create(bootstrap, *device, std::move(options))
                     : Communicator::create(bootstrap, std::move(options));
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: create: %s\n", rank, comm.status().to_string().c_str());
    return nullptr;
  }
  return comm.value();
}

}  // namespace tessera::coll::testing
