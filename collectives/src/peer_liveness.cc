#include "peer_liveness.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "tessera/common/env.h"

namespace tessera::coll {
namespace {

bool pidfd_disabled() {
  auto v = env::get("TESSERA_COLL_NO_PIDFD");
  return v && *v == "1";
}

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  if (pidfd_disabled()) return -1;
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

constexpr auto kProcInterval = std::chrono::milliseconds(10);

}  // namespace

uint64_t process_start_time(int pid, bool* zombie) {
  if (zombie) *zombie = false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so parse after the last ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 1));
  std::string state;
  rest >> state;  // field 3
  if (zombie) *zombie = state == "Z" || state == "X";
  std::string skip;
  for (int field = 4; field < 22; ++field) rest >> skip;
  uint64_t start = 0;
  rest >> start;  // field 22
  return start;
}

ProcessIdentity this_process() {
  ProcessIdentity me;
  me.pid = int(getpid());
  me.start_time = process_start_time(me.pid);
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n > 0) me.pid_namespace.assign(link, size_t(n));
  return me;
}

PeerLiveness::~PeerLiveness() {
  for (const Watched& w : watched_) {
    if (w.pidfd >= 0) close(w.pidfd);
  }
}

void PeerLiveness::watch(int rank, const ProcessIdentity& peer, const ProcessIdentity& self) {
  if (peer.pid_namespace.empty() || peer.pid_namespace != self.pid_namespace) return;
  proc_ok_ = self.start_time != 0;
  Watched w;
  w.rank = rank;
  w.pid = peer.pid;
  w.start_time = peer.start_time;
  w.pidfd = open_pidfd(peer.pid);
  // A pidfd opened after the peer exited and its pid was reused would watch another process:
  // then watch it through /proc, where the start time tells them apart.
  if (w.pidfd >= 0 && proc_ok_ && process_start_time(peer.pid) != peer.start_time) {
    close(w.pidfd);
    w.pidfd = -1;
  }
  watched_.push_back(w);
}

void PeerLiveness::update(std::vector<bool>& dead) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  bool fallback = false;
  for (const Watched& w : watched_) {
    if (dead[size_t(w.rank)]) continue;
    if (w.pidfd >= 0) {
      fds.push_back(pollfd{w.pidfd, POLLIN, 0});
      ranks.push_back(w.rank);
    } else {
      fallback = true;
    }
  }
  if (!fds.empty() && poll(fds.data(), fds.size(), 0) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) dead[size_t(ranks[i])] = true;
    }
  }
  if (!fallback) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_proc_check_) return;
  next_proc_check_ = now + kProcInterval;
  for (const Watched& w : watched_) {
    if (w.pidfd >= 0 || dead[size_t(w.rank)]) continue;
    if (kill(w.pid, 0) != 0 && errno == ESRCH) {
      dead[size_t(w.rank)] = true;
      continue;
    }
    if (!proc_ok_) continue;
    bool zombie = false;
    const uint64_t start = process_start_time(w.pid, &zombie);
    if (start == 0 || zombie || (w.start_time != 0 && start != w.start_time)) {
      dead[size_t(w.rank)] = true;
    }
  }
}

const char* PeerLiveness::method() const {
  if (watched_.empty()) return "none";
  for (const Watched& w : watched_) {
    if (w.pidfd < 0) return "proc";
  }
  return "pidfd";
}

// ---- the launcher's abort notice
// ---------------------------------------------------------------------------

JobAbortNotice JobAbortNotice::from_environment() {
  return JobAbortNotice(env::get("TESSERA_ABORT_NOTICE").value_or(""));
}

std::optional<std::string> JobAbortNotice::check() {
  if (reason_ || path_.empty()) return reason_;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return std::nullopt;
  next_check_ = now + kProcInterval;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return std::nullopt;
  // Written to a temporary name and renamed: once it exists, it is whole.
  std::ifstream in(path_);
  std::stringstream text;
  text << in.rdbuf();
  std::string reason = text.str();
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  reason_ = reason.empty() ? "(no reason given)" : reason;
  return reason_;
}

std::optional<std::string> JobAbortNotice::await(std::chrono::milliseconds wait) {
  if (path_.empty()) return std::nullopt;
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    next_check_ = {};
    if (auto reason = check()) return reason;
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(kProcInterval);
  }
}

}  // namespace tessera::coll
