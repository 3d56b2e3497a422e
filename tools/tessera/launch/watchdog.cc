#include "watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace tessera::tools::launch {
namespace {

// The watchdog's whole life: read watch (+pgid) and forget (-pgid) messages until the launcher's
// end of the pipe closes, then kill what is still watched. Never returns.
[[noreturn]] void watchdog_main(int read_fd) {
  ::setpgid(0, 0);  // out of the launcher's group: a signal to that group must not reach us
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTTIN, SIGTTOU}) {
    sigaction(s, &ign, nullptr);
  }
  // Hold nothing of the launcher's: a reader of its stdout must see EOF when it exits.
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  }
  if (read_fd != 3) {
    ::dup2(read_fd, 3);
    read_fd = 3;
  }
  ::close_range(4, ~0U, 0);

  std::vector<pid_t> groups;
  for (;;) {
    int32_t message = 0;
    const ssize_t n = ::read(read_fd, &message, sizeof message);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof message)) break;  // EOF: the launcher is gone
    if (message > 0) {
      groups.push_back(message);
    } else if (message < 0) {
      std::erase(groups, -message);
    }
  }
  for (pid_t g : groups) ::killpg(g, SIGKILL);
  ::_exit(0);
}

}  // namespace

Result<Watchdog> Watchdog::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("watchdog pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int saved = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return internal_error(std::string("watchdog fork: ") + std::strerror(saved));
  }
  if (pid == 0) {
    ::close(fds[1]);
    watchdog_main(fds[0]);
  }
  ::close(fds[0]);
  return Watchdog(pid, fds[1]);
}

Watchdog::Watchdog(Watchdog&& other) noexcept : pid_(other.pid_), write_fd_(other.write_fd_) {
  other.pid_ = -1;
  other.write_fd_ = -1;
}

Watchdog::~Watchdog() {
  if (write_fd_ >= 0) ::close(write_fd_);
  // Bounded: the watchdog only sends its signals and exits once it reads end of file.
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void Watchdog::watch(pid_t pgid) {
  send(static_cast<int32_t>(pgid));
}

void Watchdog::forget(pid_t pgid) {
  send(-static_cast<int32_t>(pgid));
}

// Four bytes are below PIPE_BUF, so each message arrives whole. A failed write (the watchdog
// died) leaves the job unguarded but running; the launcher reports the watchdog's death.
void Watchdog::send(int32_t message) {
  if (write_fd_ < 0) return;
  while (::write(write_fd_, &message, sizeof message) < 0 && errno == EINTR) {
  }
}

}  // namespace tessera::tools::launch
