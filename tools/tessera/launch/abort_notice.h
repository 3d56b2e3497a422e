// The file through which a launcher tells its ranks that the job failed (docs/LAUNCH.md,
// "Cross-host aborts"). Each rank finds its path in TESSERA_ABORT_NOTICE; a communicator waiting
// on a peer checks it every 10 ms (collectives/src/peer_liveness.h, JobAbortNotice) and fails
// with the reason it holds, naming the rank that died, even when that rank ran on another host.
// Not thread-safe; owned by the launcher's Job.
#pragma once

#include <string>

#include "tessera/common/status.h"

namespace tessera::tools::launch {

class AbortNotice {
 public:
  // Makes a private directory (mode 0700) under $TMPDIR or /tmp to hold the notice; nothing is
  // written until publish().
  static Result<AbortNotice> create();
  AbortNotice(AbortNotice&& other) noexcept;
  AbortNotice& operator=(AbortNotice&&) = delete;
  AbortNotice(const AbortNotice&) = delete;
  ~AbortNotice();  // removes the notice and its directory

  // The path the ranks get in TESSERA_ABORT_NOTICE.
  const std::string& path() const { return path_; }
  // Writes `why` (one line) whole: to a temporary name, then renamed, so a rank never reads
  // half of it. Only the first call writes; later failures are consequences of the first.
  Status publish(const std::string& why);
  bool published() const { return published_; }

 private:
  AbortNotice(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  std::string dir_;  // empty once moved from
  std::string path_;
  bool published_ = false;
};

}  // namespace tessera::tools::launch
