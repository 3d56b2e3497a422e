// Links between every pair of accelerators and between accelerators and NICs, classified from the
// PCI tree (NCCL-style path classes) with a declared bandwidth and its source.
#pragma once

#include "tessera/topo/topology.h"

namespace tessera::topo {

// Declared PCIe figures used when hwloc gives no link speed (hardware.md: NCCL models Gen4 x16 at
// 24 GB/s); the NUMA crossing default follows NCCL's inter-socket figure.
inline constexpr double kDefaultPcieGbps = 24.0;
inline constexpr double kDefaultNumaCrossingGbps = 10.0;
inline constexpr double kDefaultSharedMemoryGbps = 10.0;

// The path class and link type between two endpoints on one host, from the PCI tree and NUMA
// locality (accelerator ids or "nic:<name>"). Unknown endpoints classify as SYS.
struct PathInfo {
  PathClass path;
  LinkType type;
  double bandwidth_gbps;
  std::string source;
};
PathInfo classify_path(const Topology& topo, const std::string& a, const std::string& b);

// Replaces topo.links with freshly computed ones, keeping measured values of links that persist.
void compute_links(Topology& topo);

}  // namespace tessera::topo
