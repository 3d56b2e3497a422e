// topo::ClusterSpec -> plan::ClusterSpec (see the header for the rules).
#include "tessera/plan/topology_cluster.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>

#include "tessera/topo/cluster.h"

namespace tessera::plan {
namespace {

// Dense peak TFLOP/s (bf16, fp16, fp32) of devices whose name contains the token
// (case-insensitive); shared/reference/hardware.md. H200 computes like H100.
struct KnownDevice {
  const char* token;
  double bf16, fp16, fp32;
};
constexpr KnownDevice kKnownDevices[] = {
    {"A100", 312, 312, 19.5}, {"H100", 989, 989, 67},         {"H200", 989, 989, 67},
    {"910B", 320, 320, 0},    {"MI250X", 191.5, 191.5, 47.9},
};

std::string upper(std::string_view text) {
  std::string out;
  for (char c : text) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const KnownDevice* known_device(std::string_view name) {
  const std::string key = upper(name);
  for (const auto& device : kKnownDevices) {
    if (key.find(device.token) != std::string::npos) return &device;
  }
  return nullptr;
}

// The planner's link names (link_busbw_factor) for a topology link between two accelerators.
std::string intra_link_name(topo::LinkType type, std::string_view vendor) {
  switch (type) {
    case topo::LinkType::kVendorLink: {
      const std::string v = upper(vendor);
      if (v.find("NVIDIA") != std::string::npos) return "nvlink";
      if (v.find("AMD") != std::string::npos || v.find("HYGON") != std::string::npos) {
        return "xgmi";
      }
      if (v.find("HUAWEI") != std::string::npos) return "hccs";
      return "vendor-link";
    }
    case topo::LinkType::kSharedMemory:
    case topo::LinkType::kSameDevice: return "shared-memory";
    default: return "pcie";
  }
}

}  // namespace

Result<ClusterSpec> cluster_from_topology(const topo::ClusterSpec& spec, std::string_view src,
                                          bool calibrated) {
  const std::string source(src);
  if (spec.hosts.empty()) return invalid_argument(source + ": field 'hosts' is empty");
  if (spec.hosts.size() > 1) {
    return invalid_argument(source + ": " + std::to_string(spec.hosts.size()) +
                            " host types; the planner plans for one host type at a time");
  }
  const topo::Topology& host = spec.hosts.front().topology;
  if (host.accelerators.empty()) {
    return invalid_argument(source +
                            ": field 'hosts[0].topology.accelerators' is empty: "
                            "nothing to plan for");
  }
  const topo::Accelerator& first = host.accelerators.front();
  ClusterSpec c;
  c.name = spec.name.empty() ? source : spec.name;
  c.hosts = spec.hosts.front().count;
  c.devices_per_host = static_cast<int>(host.accelerators.size());
  c.device.name = first.name;
  c.device.memory_gib = static_cast<double>(first.memory_bytes) / (1ull << 30);
  c.device.memory_bandwidth_gbps = first.memory_bandwidth_gbps;
  for (const auto& a : host.accelerators) {
    c.device.memory_gib = std::min(c.device.memory_gib, a.memory_bytes / double(1ull << 30));
  }
  if (const KnownDevice* known = known_device(first.name)) {
    c.device.peak_tflops_bf16 = known->bf16;
    c.device.peak_tflops_fp16 = known->fp16;
    c.device.peak_tflops_fp32 = known->fp32;
  } else if (!calibrated) {
    return invalid_argument(source + ": accelerator '" + first.name +
                            "' has no peak FLOP/s known to the planner; calibrate it (tessera "
                            "plan --calibrate, then --calibration FILE) or use the compact "
                            "cluster JSON with device.peak_tflops");
  }
  if (c.device.memory_gib <= 0) {
    return invalid_argument(source + ": accelerator '" + first.name + "' reports no memory");
  }

  // The slowest declared link between two accelerators of the host.
  double slowest = std::numeric_limits<double>::infinity();
  topo::LinkType slowest_type = topo::LinkType::kHostBridge;
  auto is_accelerator = [&](const std::string& id) {
    return std::any_of(host.accelerators.begin(), host.accelerators.end(),
                       [&](const topo::Accelerator& a) { return a.id == id; });
  };
  for (const auto& link : host.links) {
    if (link.bandwidth_gbps <= 0 || link.a == link.b) continue;
    if (!is_accelerator(link.a) || !is_accelerator(link.b)) continue;
    if (link.bandwidth_gbps < slowest) slowest = link.bandwidth_gbps, slowest_type = link.type;
  }
  if (c.devices_per_host > 1 && slowest == std::numeric_limits<double>::infinity()) {
    return invalid_argument(source +
                            ": no declared bandwidth between the accelerators of a host "
                            "(field 'links')");
  }
  c.intra_host.link = intra_link_name(slowest_type, first.vendor);
  c.intra_host.bandwidth_gbps = c.devices_per_host > 1 ? slowest : 0;
  c.intra_host.latency_us = 3;
  c.intra_host.busbw_gbps = c.intra_host.bandwidth_gbps * link_busbw_factor(c.intra_host.link);

  const topo::NetworkSpec& net = spec.network;
  if (c.hosts > 1 && (net.nics_per_host < 1 || net.bandwidth_gbps_per_nic <= 0)) {
    return invalid_argument(source + ": " + std::to_string(c.hosts) +
                            " hosts but field 'network' declares no NIC bandwidth");
  }
  c.inter_host.link = net.link.empty() ? "ethernet" : net.link;
  c.inter_host.nics_per_host = std::max(net.nics_per_host, 1);
  c.inter_host.bandwidth_gbps = net.bandwidth_gbps_per_nic;
  c.inter_host.latency_us = net.latency_us > 0 ? net.latency_us : 5;
  c.inter_host.busbw_gbps = c.inter_host.bandwidth_gbps * link_busbw_factor(c.inter_host.link);
  return c;
}

Result<ClusterSpec> cluster_from_topology_json(std::string_view text, std::string_view source,
                                               bool calibrated) {
  TSR_ASSIGN_OR_RETURN(topo::ClusterSpec spec, topo::cluster_from_json(text, source));
  return cluster_from_topology(spec, source, calibrated);
}

}  // namespace tessera::plan
