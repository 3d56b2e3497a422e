// tessera_bootstrap_probe: the smallest multi-process user of the bootstrap, for the launch and
// mpirun tests. Each rank allgathers its rank number and prints one line:
//   rank R of N (launcher): 0,1,...,N-1
// then passes a barrier. Exit 0 on success; 1 with the error on stderr otherwise.
#include <cstdio>
#include <string>

#include "tessera/coll/bootstrap.h"

int main() {
  using namespace tessera::coll;
  auto boot = Bootstrap::from_environment(BootstrapOptions{std::chrono::milliseconds(30000)});
  if (!boot.ok()) {
    std::fprintf(stderr, "bootstrap: %s\n", boot.status().to_string().c_str());
    return 1;
  }
  const LaunchInfo& info = (*boot)->info();
  auto all = (*boot)->allgather("probe", std::to_string(info.rank));
  if (!all.ok()) {
    std::fprintf(stderr, "allgather: %s\n", all.status().to_string().c_str());
    return 1;
  }
  std::string joined;
  for (const std::string& v : *all) joined += (joined.empty() ? "" : ",") + v;
  std::printf("rank %d of %d (%s): %s\n", info.rank, info.size,
              std::string(launcher_name(info.launcher)).c_str(), joined.c_str());
  std::fflush(stdout);
  tessera::Status b = (*boot)->barrier("done");
  if (!b.ok()) {
    std::fprintf(stderr, "barrier: %s\n", b.to_string().c_str());
    return 1;
  }
  return 0;
}
