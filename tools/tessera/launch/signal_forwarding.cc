// Signals sent to the launcher (Ctrl-C, a scheduler's SIGTERM) reach the ranks, as torchrun
// does for TERM, INT, HUP and QUIT: the handler only writes the signal's number to a pipe that
// the event loop polls, and the loop stops the job with the first such signal and kills every
// rank on the second. SIGCHLD goes through the same pipe to wake the loop for reaping.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "job.h"

namespace tessera::tools::launch {
namespace {

int g_signal_pipe = -1;  // write end; the handler only writes one byte to it

// Signals the launcher forwards to every rank (as torchrun does for TERM, INT, HUP and QUIT).
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void on_signal(int signo) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe, &byte, 1);
  errno = saved;
}

}  // namespace

void restore_default_handlers() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : kForwarded) sigaction(s, &dfl, nullptr);
  for (int s : {SIGCHLD, SIGPIPE}) sigaction(s, &dfl, nullptr);
}

void close_signal_pipe() {
  if (g_signal_pipe >= 0) ::close(g_signal_pipe);
  g_signal_pipe = -1;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

std::optional<int> Job::install_signal_handlers() {
  int sig_pipe[2];
  if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    say(std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  signal_read_ = sig_pipe[0];
  g_signal_pipe = sig_pipe[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  for (int s : kForwarded) sigaction(s, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, nullptr);
  return std::nullopt;
}

// Reads the signal pipe: the first forwarded signal stops the job with it, a second kills.
void Job::handle_signals() {
  unsigned char sigs[64];
  const ssize_t n = ::read(signal_read_, sigs, sizeof sigs);
  for (ssize_t k = 0; k < n; ++k) {
    const int signo = sigs[k];
    if (signo == SIGCHLD) continue;
    if (forwarded_++ == 0) {
      say("got " + signal_name(signo) + ", forwarding it to " + std::to_string(running_count()) +
          " rank(s)");
      if (exit_code_ == 0) exit_code_ = 128 + signo;
      stop(signo);
    } else {
      say("got " + signal_name(signo) + " again; killing every rank");
      killed_ = true;
      signal_groups(SIGKILL);
    }
  }
  reap();
}

}  // namespace tessera::tools::launch
