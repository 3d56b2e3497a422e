#include "forked_ranks.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace tessera::coll::testing {
namespace {

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);  // a dead rank must not SIGPIPE the hub
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool write_frame(int fd, std::string_view bytes) {
  const auto length = static_cast<uint32_t>(bytes.size());
  return write_all(fd, &length, sizeof length) && write_all(fd, bytes.data(), bytes.size());
}

bool read_frame(int fd, std::string& out) {
  uint32_t length = 0;
  if (!read_all(fd, &length, sizeof length)) return false;
  out.resize(length);
  return read_all(fd, out.data(), length);
}

// The rank side: one frame up, `size` frames down.
Result<std::vector<std::string>> rank_allgather(int fd, int size, std::string_view mine) {
  if (!write_frame(fd, mine)) return unavailable("test allgather: the hub is gone");
  std::vector<std::string> all(static_cast<size_t>(size));
  for (auto& entry : all) {
    if (!read_frame(fd, entry)) return unavailable("test allgather: the hub closed the round");
  }
  return all;
}

// The hub: rounds until one rank closes its socket (it exited or died); then it closes every
// socket so that the others' next allgather fails instead of waiting.
void serve(const std::vector<int>& fds) {
  std::vector<std::string> round(fds.size());
  for (;;) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!read_frame(fds[i], round[i])) return;
    }
    for (int fd : fds) {
      for (const auto& entry : round) {
        if (!write_frame(fd, entry)) break;
      }
    }
  }
}

}  // namespace

std::vector<RankExit> run_forked_ranks(int size, const std::function<int(int, Allgather&)>& body,
                                       std::chrono::seconds limit) {
  std::vector<int> hub_fds;
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int rank = 0; rank < size; ++rank) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) std::abort();
    pid_t pid = ::fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      for (int fd : hub_fds) ::close(fd);
      ::close(pair[0]);
      ::alarm(static_cast<unsigned>(limit.count()));
      const int fd = pair[1];
      Allgather allgather = [fd, size](std::string_view mine) {
        return rank_allgather(fd, size, mine);
      };
      int code = body(rank, allgather);
      std::fflush(nullptr);
      ::close(fd);
      std::exit(code);  // not _Exit: LeakSanitizer checks the rank at exit
    }
    ::close(pair[1]);
    hub_fds.push_back(pair[0]);
    pids.push_back(pid);
  }
  serve(hub_fds);
  for (int fd : hub_fds) ::close(fd);
  std::vector<RankExit> exits(static_cast<size_t>(size));
  for (int rank = 0; rank < size; ++rank) {
    int status = 0;
    while (::waitpid(pids[static_cast<size_t>(rank)], &status, 0) < 0 && errno == EINTR) {
    }
    RankExit& exit = exits[static_cast<size_t>(rank)];
    if (WIFEXITED(status)) exit.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  }
  return exits;
}

std::string describe(const std::vector<RankExit>& exits) {
  std::string text;
  for (size_t rank = 0; rank < exits.size(); ++rank) {
    text += "rank " + std::to_string(rank) + ": ";
    text += exits[rank].signal != 0 ? "killed by signal " + std::to_string(exits[rank].signal)
                                    : "exit " + std::to_string(exits[rank].code);
    text += "\n";
  }
  return text;
}

}  // namespace tessera::coll::testing
