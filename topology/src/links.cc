// Path classes from the PCI tree (NCCL's rules): the lowest common bridge of two endpoints decides
// PIX/PXB/PHB; no common bridge means NODE inside one NUMA node and SYS across.
#include "tessera/topo/links.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace tessera::topo {
namespace {

struct Endpoint {
  bool found = false;
  std::string pci_bus_id;
  int numa = -1;
  double memory_bandwidth_gbps = 0;
};

Endpoint resolve(const Topology& topo, const std::string& id) {
  Endpoint ep;
  if (id.rfind("nic:", 0) == 0) {
    for (const auto& nic : topo.nics) {
      if ("nic:" + nic.name == id) return {true, nic.pci_bus_id, nic.numa_node, 0};
    }
  } else if (id.rfind("numa:", 0) == 0) {
    return {true, "", std::atoi(id.c_str() + 5), 0};
  } else if (const Accelerator* acc = topo.find_accelerator(id)) {
    return {true, acc->pci_bus_id, acc->numa_node, acc->memory_bandwidth_gbps};
  }
  return ep;
}

// Bridge ids from the device's parent up to its host bridge.
std::vector<std::string> bridge_chain(const Topology& topo, const std::string& bus_id) {
  std::vector<std::string> chain;
  const PciDevice* dev = topo.find_pci(bus_id);
  std::string next = dev ? dev->parent : "";
  while (!next.empty() && chain.size() < 64) {
    chain.push_back(next);
    auto it = std::find_if(topo.pci_bridges.begin(), topo.pci_bridges.end(),
                           [&](const PciBridge& b) { return b.id == next; });
    next = it == topo.pci_bridges.end() ? "" : it->parent;
  }
  return chain;
}

double pci_link_gbps(const Topology& topo, const std::string& bus_id) {
  const PciDevice* dev = topo.find_pci(bus_id);
  return dev ? dev->link_gbps : 0;
}

bool same_numa(const Topology& topo, int a, int b) {
  if (a >= 0 && b >= 0) return a == b;
  return topo.numa_nodes.size() <= 1;
}

}  // namespace

PathInfo classify_path(const Topology& topo, const std::string& a, const std::string& b) {
  Endpoint ea = resolve(topo, a), eb = resolve(topo, b);
  if (a == b) {
    double bw = ea.memory_bandwidth_gbps;
    return {PathClass::kLoc, LinkType::kSameDevice, bw, bw > 0 ? "vendor-api" : "unknown"};
  }
  const bool numa_ok = same_numa(topo, ea.numa, eb.numa);
  if (ea.pci_bus_id.empty() || eb.pci_bus_id.empty()) {
    // Host memory or a device without PCI (the host backend): a copy through shared memory.
    if (numa_ok) {
      return {ea.pci_bus_id.empty() && eb.pci_bus_id.empty() ? PathClass::kNode : PathClass::kPhb,
              ea.pci_bus_id.empty() && eb.pci_bus_id.empty() ? LinkType::kSharedMemory
                                                             : LinkType::kHostBridge,
              ea.pci_bus_id.empty() && eb.pci_bus_id.empty() ? kDefaultSharedMemoryGbps
                                                             : kDefaultPcieGbps,
              "defaults"};
    }
    return {PathClass::kSys, LinkType::kNumaCrossing, kDefaultNumaCrossingGbps, "defaults"};
  }
  double la = pci_link_gbps(topo, ea.pci_bus_id), lb = pci_link_gbps(topo, eb.pci_bus_id);
  double pcie = kDefaultPcieGbps;
  std::string source = "defaults";
  if (la > 0 && lb > 0) {
    pcie = std::min(la, lb);
    source = "hwloc";
  }
  auto ca = bridge_chain(topo, ea.pci_bus_id), cb = bridge_chain(topo, eb.pci_bus_id);
  for (size_t i = 0; i < ca.size(); ++i) {
    auto j = std::find(cb.begin(), cb.end(), ca[i]);
    if (j == cb.end()) continue;
    const bool host = ca[i].rfind("hostbridge", 0) == 0;
    if (host) return {PathClass::kPhb, LinkType::kHostBridge, pcie, source};
    // A PCIe switch is an upstream port with downstream ports below it, so devices within one
    // switch meet at most two bridges above themselves.
    const bool single = i <= 1 && (j - cb.begin()) <= 1;
    return {single ? PathClass::kPix : PathClass::kPxb, LinkType::kPcieSwitch, pcie, source};
  }
  if (numa_ok) return {PathClass::kNode, LinkType::kHostBridge, pcie, source};
  return {PathClass::kSys, LinkType::kNumaCrossing, std::min(pcie, kDefaultNumaCrossingGbps),
          "defaults"};
}

void compute_links(Topology& topo) {
  std::vector<Link> old = std::move(topo.links);
  topo.links.clear();
  auto add = [&](const std::string& a, const std::string& b) {
    auto prev = std::find_if(old.begin(), old.end(), [&](const Link& l) {
      return (l.a == a && l.b == b) || (l.a == b && l.b == a);
    });
    if (prev != old.end() && prev->type == LinkType::kVendorLink) {
      topo.links.push_back(*prev);  // declared by a vendor API or a replayed file: keep
      return;
    }
    PathInfo info = classify_path(topo, a, b);
    Link link{a, b, info.type, info.path, info.bandwidth_gbps, info.source, {}, {}};
    if (prev != old.end()) {
      link.measured_bandwidth_gbps = prev->measured_bandwidth_gbps;
      link.measured_latency_us = prev->measured_latency_us;
    }
    topo.links.push_back(std::move(link));
  };
  const auto& accs = topo.accelerators;
  for (size_t i = 0; i < accs.size(); ++i) {
    int numa = accs[i].numa_node >= 0 ? accs[i].numa_node
                                      : (topo.numa_nodes.empty() ? 0 : topo.numa_nodes[0].os_index);
    add("numa:" + std::to_string(numa), accs[i].id);
    for (size_t j = i + 1; j < accs.size(); ++j) add(accs[i].id, accs[j].id);
    for (const auto& nic : topo.nics) add(accs[i].id, "nic:" + nic.name);
  }
}

}  // namespace tessera::topo
