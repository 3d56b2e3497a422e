// Bootstrap: who this process is (rank, size, local rank, local size, read from whichever launcher
// started it) and how the ranks find each other (a key-value store used once, when communicators
// are created, to exchange addresses). Nothing here moves tensor data.
//
// Launchers recognised, first match wins (docs/LAUNCH.md):
//   tessera launch   TESSERA_LAUNCHER=tessera plus the torchrun-style variables below; the store is
//                    hosted by the launcher process itself, so it survives any rank's death.
//   torchrun-style   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the
//                    TCP store is hosted by rank 0.
//   OpenMPI mpirun   OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; addresses through PMIx.
//   PMIx             PMIX_RANK (+ PMIx job info for size and local ranks); put/get/fence.
//   Slurm srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE / derived;
//                    PMIx when srun --mpi=pmix, else a TCP store on the first node of the step.
//   none             a single rank (rank 0 of 1), no store needed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::coll {

enum class Launcher { kNone, kTessera, kTorchrun, kOpenMpi, kPmix, kSlurm };
std::string_view launcher_name(Launcher launcher);  // "none", "tessera", "torchrun", ...

struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  Launcher launcher = Launcher::kNone;
  std::string hostname;    // this host's name (gethostname)
  std::string store_host;  // TCP store address, empty when the store is PMIx or not needed
  int store_port = 0;
  bool store_hosted_by_launcher = false;  // tessera launch: no rank hosts the server
  int generation = 0;  // bumped by an elastic restart (TESSERA_GENERATION); prefixes store keys
};

// Reads the environment of this process. Errors name the variable and its value (a RANK that is
// not a number, a rank >= size, a torchrun layout without MASTER_ADDR, ...).
Result<LaunchInfo> detect_launch();

// A key-value store shared by every rank of a job. Values are opaque bytes. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(std::string_view key, std::string_view value) = 0;
  // Waits until `key` exists, up to `timeout`; DEADLINE_EXCEEDED names the key.
  virtual Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 when absent); returns the new value.
  virtual Result<int64_t> add(std::string_view key, int64_t delta) = 0;
};

// A TCP store server (usually on rank 0 or in `tessera launch`). Serves until destroyed.
class TcpStoreServer {
 public:
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;  // the bound port (useful when asked for port 0)
};
// What one TCP store server holds for its clients, so that no client, well-behaved or not, can
// grow the server's memory or descriptors without bound (docs/LAUNCH.md, "What the bootstrap
// guarantees"). A request over a limit is refused with RESOURCE_EXHAUSTED naming the limit, to
// that client only.
struct TcpStoreLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{16} << 20;
  size_t max_store_bytes = size_t{1} << 30;      // keys + values (+64 bytes a key) held in all
  size_t max_buffered_bytes = size_t{64} << 20;  // unparsed requests of all connections together
  int max_connections = 4096;                    // more are answered with an error and closed
  // A connection with a request half-received, or a reply half-sent, for this long is dropped.
  std::chrono::milliseconds stall_timeout{30000};
};
// Binds `host:port` (port 0 = any free port; host "" or "0.0.0.0" = every interface) and serves
// from a background thread. A non-empty `token` (the job's secret) must open every connection
// (connect_tcp_store sends it); a connection without it is refused and closed, with a log line,
// and nothing it sent reaches the store (docs/LAUNCH.md, "Store security").
Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const std::string& host, int port,
                                                               TcpStoreLimits limits = {},
                                                               std::string_view token = {});
// Connects to a TCP store, retrying until `timeout` (the server may start later than the client),
// and opens every connection with `token` (none when empty). A store that refuses the token is
// UNAUTHENTICATED (not retried); a store that asks for a token and gets none answers the first
// call UNAUTHENTICATED. A store without a token accepts any.
Result<std::unique_ptr<Store>> connect_tcp_store(const std::string& host, int port,
                                                 std::chrono::milliseconds timeout,
                                                 std::string_view token);
// The same with the token of this process's job: TESSERA_STORE_TOKEN, none when unset.
Result<std::unique_ptr<Store>> connect_tcp_store(const std::string& host, int port,
                                                 std::chrono::milliseconds timeout);

// The environment variable that carries a job's store token to its ranks (never the command
// line, which other users can read in /proc).
inline constexpr const char* kStoreTokenEnv = "TESSERA_STORE_TOKEN";

// Keys `tessera launch` publishes in its store (decimal strings, not prefixed by a generation),
// each set before the restarted rank is spawned; tessera/generation is also set at start-up.
inline constexpr std::string_view kGenerationKey = "tessera/generation";  // current generation
inline constexpr std::string_view kRestartedRankKey = "tessera/restarted_rank";  // latest restart
inline constexpr std::string_view kRestartsKey = "tessera/restarts";  // restarts used in the job
// After a node loss with --nnodes MIN:MAX (docs/LAUNCH.md, "Re-forming on fewer nodes") the
// launcher sets "tessera/generation/<G>/old_ranks" before it moves kGenerationKey to G: the
// comma-separated rank that each rank of generation G had in the generation before it ("0,1" when
// the world {0,1,2,3} lost ranks 2 and 3). Absent for a generation of the same world (a restart).
std::string generation_old_ranks_key(int generation);
// "0,1,3" -> {0, 1, 3}; INVALID_ARGUMENT quoting the text when an entry is not a non-negative
// integer or appears twice.
Result<std::vector<int>> parse_rank_list(std::string_view text);

struct BootstrapOptions {
  std::chrono::milliseconds timeout{60000};  // connecting and every exchange
};

// LaunchInfo + store + the two collective exchanges communicator creation needs. Built once per
// process; communicators keep a shared_ptr to it.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  // Detects the launcher, starts or connects the store it implies (PMIx, TCP, or none for a
  // single rank).
  static Result<std::shared_ptr<Bootstrap>> from_environment(BootstrapOptions options = {});
  // For tests and embedders: an explicit identity and store.
  static std::shared_ptr<Bootstrap> from_parts(LaunchInfo info, std::unique_ptr<Store> store,
                                               BootstrapOptions options = {});

  virtual const LaunchInfo& info() const = 0;
  virtual Store& store() = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // Every rank of the job calls this with the same `name` (unique per exchange); returns every
  // rank's bytes in rank order. Errors name the rank that did not arrive within the timeout.
  virtual Result<std::vector<std::string>> allgather(std::string_view name,
                                                     std::string_view mine) = 0;
  virtual Status barrier(std::string_view name) = 0;

  // Elastic recovery (docs/COLLECTIVES.md, "Elastic recovery"): waits until the store's
  // kGenerationKey holds a generation greater than info().generation (the launcher restarted a
  // failed rank, or re-formed the job on fewer nodes), switches this bootstrap to it (every later
  // exchange uses keys of that generation) and returns it. When the new generation has a
  // generation_old_ranks_key (a node was lost), info().rank and info().size become this rank's
  // place in the smaller world (local_rank and local_size stay) and old_ranks() returns the list.
  // DEADLINE_EXCEEDED, naming the generation waited for, when no restart happens within
  // `timeout`; FAILED_PRECONDITION when the new world leaves this rank out (nothing changes);
  // UNIMPLEMENTED for PMIx and single-rank (no launcher) bootstraps. Survivors call it after
  // aborting their communicators, then create new ones; a restarted rank does not call it (it
  // starts in the new generation). Not thread-safe: no other call on this bootstrap (nor a
  // communicator creation) may run concurrently.
  virtual Result<int> next_generation(std::chrono::milliseconds timeout);

  // The rank each rank of the current generation had before the last next_generation():
  // old_ranks()[r] for new rank r (what Checkpointer::rebind_shrunk takes as old_rank_of). The
  // identity 0..size-1 when the world did not change (no next_generation yet, or a restart
  // without a node loss). Not thread-safe against next_generation().
  virtual std::vector<int> old_ranks() const;
  // True when the last next_generation() re-formed the world on fewer ranks (old_ranks() may
  // still read 0..size-1: the last node was the one lost).
  virtual bool shrunk() const { return false; }

  // Internal (Communicator::create): the index of the next world communicator of the current
  // generation. It restarts at 0 in every generation, so the survivors' first communicator of a
  // new generation and the restarted rank's first one get the same name. Thread-safe.
  uint64_t next_world_index();

 private:
  std::mutex world_index_mutex_;
  int world_index_generation_ = -1;
  uint64_t world_index_ = 0;
};

}  // namespace tessera::coll
