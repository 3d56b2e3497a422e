// Internals of the bootstrap shared by its files and its tests; not part of the public API.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/coll/bootstrap.h"
#include "tessera/common/status.h"

namespace tessera::coll::detail {

// The first host of a Slurm node list: "node[01-04,07],gpu5" -> "node01". Each bracket group of
// the first top-level entry is replaced by its first element (zero padding kept).
Result<std::string> slurm_first_host(std::string_view nodelist);

// The TCP store port of a Slurm step without PMIx: TESSERA_STORE_PORT if set, else derived from
// the job and step ids so that concurrent steps on one node rarely collide (20000..29999).
int slurm_derived_port(int64_t job_id, int64_t step_id);

// Tasks on node `node_id` from a Slurm tasks-per-node list such as "2(x3),1".
Result<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node_id);

// A store living in this process only: the single-rank case and tests. Thread-safe.
std::unique_ptr<Store> make_memory_store();

// What a TCP store server has done so far, for tests (a snapshot taken at the end of each turn of
// its loop).
struct TcpStoreServerStats {
  uint64_t accept_failures = 0;      // accept() errors (EMFILE, ...); the listener pauses after one
  uint64_t refused_connections = 0;  // over TcpStoreLimits::max_connections
  uint64_t dropped_stalled = 0;      // dropped after TcpStoreLimits::stall_timeout
  uint64_t refused_unauthenticated = 0;  // closed for a missing or wrong token (or no hello)
  size_t connections = 0;
  size_t store_bytes = 0;      // counted against TcpStoreLimits::max_store_bytes
  size_t buffered_bytes = 0;   // counted against TcpStoreLimits::max_buffered_bytes
  bool accept_paused = false;  // out of descriptors: the listener is not polled for now
};
TcpStoreServerStats tcp_store_server_stats(const TcpStoreServer& server);

// True when this build can talk to a PMIx server (libpmix found at configure time).
bool pmix_available();

// PMIx: the identity of this process from the PMIx server (rank, job size, local rank/size).
// Initialises the process-wide PMIx client on first use (finalised at exit).
struct PmixIdentity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
};
Result<PmixIdentity> pmix_identity();

// A bootstrap whose allgather and barrier are PMIx fences (put + commit + fence + get).
Result<std::shared_ptr<Bootstrap>> make_pmix_bootstrap(LaunchInfo info, BootstrapOptions options);

}  // namespace tessera::coll::detail
