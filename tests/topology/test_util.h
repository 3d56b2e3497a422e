// Helpers shared by the topology tests.
#pragma once

#include <cstdio>
#include <string>

#include "tessera/topo/discover.h"

// Skips the current test on builds without hwloc (the layer still builds there).
#define TSR_REQUIRE_HWLOC() \
  if (!::tessera::topo::have_hwloc()) GTEST_SKIP() << "built without hwloc"

namespace tessera::topo::test {

inline std::string data_path(const std::string& name) {
  return std::string(TESSERA_TOPOLOGY_TEST_DATA) + "/" + name;
}

// stdout of a shell command; sets *ok to whether it exited 0.
inline std::string run_command(const std::string& command, bool* ok) {
  std::string out;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (!pipe) {
    *ok = false;
    return out;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  *ok = pclose(pipe) == 0;
  return out;
}

inline bool have_tool(const std::string& name) {
  bool ok = false;
  run_command("command -v " + name, &ok);
  return ok;
}

inline Topology synthetic(const std::string& description) {
  Topology topo;
  Status status = discover_hwloc({HwlocSource::Kind::kSynthetic, description}, topo);
  if (!status.ok()) ADD_FAILURE() << status.to_string();
  return topo;
}

}  // namespace tessera::topo::test
