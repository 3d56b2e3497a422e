// Launch environment parsing (collectives/src/bootstrap/launch_env.cc detect_launch, and the
// Slurm helpers in slurm.cc): the variables torchrun, mpirun, srun, PMIx and `tessera launch`
// set. The input is lines "NAME=value" for the variables below (others ignored); each run starts
// from none of them set. An accepted layout has 0 <= rank < size and 0 <= local_rank <
// local_size <= size.
#include <stdlib.h>

#include <string>

#include "bootstrap/internal.h"
#include "fuzz_target.h"
#include "tessera/coll/bootstrap.h"

namespace {

// PMIX_RANK is left out: with libpmix it would connect to a PMIx server.
constexpr const char* kVariables[] = {"TESSERA_LAUNCHER",
                                      "TESSERA_STORE_PORT",
                                      "TESSERA_STORE_HOSTED",
                                      "TESSERA_GENERATION",
                                      "RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "OMPI_COMM_WORLD_RANK",
                                      "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE",
                                      "SLURM_PROCID",
                                      "SLURM_NTASKS",
                                      "SLURM_NPROCS",
                                      "SLURM_LOCALID",
                                      "SLURM_NODEID",
                                      "SLURM_NTASKS_PER_NODE",
                                      "SLURM_TASKS_PER_NODE",
                                      "SLURM_STEP_TASKS_PER_NODE",
                                      "SLURM_STEP_NODELIST",
                                      "SLURM_JOB_NODELIST",
                                      "SLURM_JOB_ID",
                                      "SLURM_STEP_ID"};

}  // namespace

TESSERA_FUZZ_TARGET(launch_env) {
  for (const char* name : kVariables) ::unsetenv(name);
  std::string_view text = tessera::fuzz::as_text(data, size);
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string line(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line.find('\0') != std::string::npos) continue;
    const std::string name = line.substr(0, eq);
    for (const char* known : kVariables) {
      if (name == known) ::setenv(known, line.c_str() + eq + 1, 1);
    }
  }
  auto info = tessera::coll::detect_launch();
  if (info.ok()) {
    FUZZ_CHECK(info->rank >= 0 && info->rank < info->size, "accepted a rank outside 0..size-1");
    FUZZ_CHECK(info->local_rank >= 0 && info->local_rank < info->local_size &&
                   info->local_size <= info->size,
               "accepted a local layout outside the job");
    FUZZ_CHECK(info->generation >= 0, "accepted a negative generation");
    FUZZ_CHECK(info->store_port >= 0 && info->store_port <= 65535, "accepted a bad port");
  }
  // The Slurm helpers on the raw input as well (a node list, a tasks-per-node list).
  const std::string_view raw = tessera::fuzz::as_text(data, size);
  (void)tessera::coll::detail::slurm_first_host(raw);
  (void)tessera::coll::detail::slurm_tasks_on_node(raw, int(size % 7));
  return 0;
}
