// Runs a `tessera launch` job: hosts the TCP store (node rank 0; the other nodes join it and watch
// it, rendezvous.h, so that a failure on any node stops every node), starts the ranks in their
// own process groups, relays their output with a "[rank R] " prefix, forwards
// SIGINT/SIGTERM/SIGHUP/SIGQUIT, restarts failed ranks with a backoff, and stops the whole job when
// one rank fails. Nothing the ranks start outlives it: ranks have PR_SET_PDEATHSIG, the launcher is
// their descendants' subreaper, and a watchdog process (watchdog.h) kills every rank's process
// group if the launcher dies. Not thread-safe; call once per process, before it starts threads (it
// forks the watchdog, becomes a subreaper, installs signal handlers for those four and SIGCHLD and
// ignores SIGPIPE while it runs).
#pragma once

#include "options.h"

namespace tessera::tools::launch {

// Returns the launcher's exit code: 0 when every rank exited 0; else the first failed rank's
// exit code, or 128 + signal for a rank killed by a signal or a signal the launcher forwarded,
// 124 when --timeout-s passed, 127 when the command cannot be found or executed, 2 for a
// malformed TESSERA_GENERATION or device list.
int run_job(const LaunchOptions& options);

}  // namespace tessera::tools::launch
