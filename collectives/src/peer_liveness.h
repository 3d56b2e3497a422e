// Watches the processes of the local peers, so a rank waiting on one that died fails at once
// naming it instead of waiting for the timeout; and the launcher's notice that the job failed on
// some host (JobAbortNotice), so a rank waiting on a peer on another host learns of it too.
// Internal to collectives/.
//
// Where the kernel has pidfds (Linux >= 5.3) a peer's pidfd becomes readable when it exits. Where
// it does not (CentOS 7's 3.10, Kylin V10's and openEuler 20.03's 4.19), or when
// TESSERA_COLL_NO_PIDFD=1 (tests; seccomp profiles that refuse the call), the peer is polled with
// kill(pid, 0) and its start time in /proc/<pid>/stat, which tells a reused pid from the peer.
// Peers in another PID namespace (containers sharing a host id) are not watched: their pid means
// another process here. Not thread-safe (the communicator's progress loop owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::coll {

// This process's identity as its peers see it in the creation cards.
struct ProcessIdentity {
  int pid = 0;
  uint64_t start_time = 0;    // clock ticks after boot (field 22 of /proc/<pid>/stat); 0: unknown
  std::string pid_namespace;  // "pid:[4026531836]"; empty: unknown
};
ProcessIdentity this_process();

// Field 22 of /proc/<pid>/stat, or 0 when the process is gone or unreadable. *zombie: it exited
// and was not reaped yet.
uint64_t process_start_time(int pid, bool* zombie = nullptr);

class PeerLiveness {
 public:
  PeerLiveness() = default;
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;
  ~PeerLiveness();

  // Starts watching `rank`'s process (seen in its card); a peer in another PID namespace than
  // `self` is left unwatched. A peer already gone is found dead by the next update().
  void watch(int rank, const ProcessIdentity& peer, const ProcessIdentity& self);
  // Sets dead[rank] for every watched peer that exited. Cheap: one poll() over the pidfds; the
  // /proc fallback runs at most every 10 ms.
  void update(std::vector<bool>& dead);
  // How the peers are watched, for the creation log ("pidfd", "proc", "none").
  const char* method() const;

 private:
  struct Watched {
    int rank = -1;
    int pid = 0;
    uint64_t start_time = 0;
    int pidfd = -1;  // -1: the /proc fallback
  };
  std::vector<Watched> watched_;
  bool proc_ok_ = false;  // /proc/<pid>/stat readable here (else the fallback uses kill() alone)
  std::chrono::steady_clock::time_point next_proc_check_{};
};

// The launcher's notice that the job failed (docs/LAUNCH.md, "Cross-host aborts"): `tessera
// launch` names a file in TESSERA_ABORT_NOTICE and, when a rank on any node fails, writes why
// there (whole, by rename) before it stops its ranks. A rank blocked on a peer on another host
// (a UCX transfer that will never complete) reads it and fails with the dead rank named, instead
// of waiting for its timeout or blaming the peer it happened to wait on. Not thread-safe.
class JobAbortNotice {
 public:
  // TESSERA_ABORT_NOTICE, or no notice (not started by `tessera launch`).
  static JobAbortNotice from_environment();
  explicit JobAbortNotice(std::string path = {}) : path_(std::move(path)) {}

  // Why the job failed, once the launcher said so. Cheap: one stat() at most every 10 ms.
  std::optional<std::string> check();
  // check() until the notice comes or `wait` passes (none: returns at once). A rank that lost
  // a peer on another host waits this long for the root cause before it reports the peer.
  std::optional<std::string> await(std::chrono::milliseconds wait);

 private:
  std::string path_;  // empty: no notice
  std::chrono::steady_clock::time_point next_check_{};
  std::optional<std::string> reason_;
};

}  // namespace tessera::coll
