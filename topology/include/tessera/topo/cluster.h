// Cluster specs: N hosts of one (or a few) topologies plus the network between them. Built from
// presets written from public figures (shared/reference/hardware.md), from the local probe
// (`tessera probe --cluster hosts=N`), or from JSON (docs/TOPOLOGY.md). A value; thread-compatible.
// The planner's own compact ClusterSpec (runtime/planner) can be derived from this one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/topo/topology.h"

namespace tessera::topo {

struct NetworkSpec {
  std::string link;  // "infiniband", "roce", "slingshot", "ethernet", ...
  int nics_per_host = 0;
  double bandwidth_gbps_per_nic = 0;  // GB/s per direction
  double latency_us = 0;              // one-way small-message latency
  std::string source;                 // where the figures came from
  bool operator==(const NetworkSpec&) const = default;
};

struct HostGroup {
  int count = 1;
  Topology topology;
  bool operator==(const HostGroup&) const = default;
};

struct ClusterSpec {
  int version = kSchemaVersion;
  std::string name;
  std::vector<HostGroup> hosts;
  NetworkSpec network;
  int host_count() const;
  int accelerator_count() const;
  bool operator==(const ClusterSpec&) const = default;
};

// dgx-a100-80gb, dgx-h100, ascend-910b-8, mi250x-8 (one host each); NOT_FOUND listing the names.
Result<ClusterSpec> cluster_preset(std::string_view name);
std::vector<std::string> cluster_preset_names();

// `hosts` copies of `topo`; the network from its NICs: OpenFabrics NICs when present, else
// physical network NICs, with the fastest UCX-declared bandwidth and latency on them.
ClusterSpec cluster_from_topology(const Topology& topo, int hosts, std::string name);

std::string cluster_to_json(const ClusterSpec& cluster);
// Strict like from_json: "<source>: field 'network.latency_us': expected a number (missing)".
Result<ClusterSpec> cluster_from_json(std::string_view text, std::string_view source);
// A preset name or a JSON file.
Result<ClusterSpec> load_cluster(const std::string& preset_or_path);

}  // namespace tessera::topo
