// Discovery entry point and the join of HAL devices with hwloc's PCI objects.
#include "tessera/topo/discover.h"

#include <unistd.h>

#include <algorithm>

#include "tessera/topo/links.h"

namespace tessera::topo {

void add_platform_devices(const hal::Platform& platform, Topology& topo) {
  std::vector<Accelerator> from_hal;
  for (const auto& device : platform.devices()) {
    const auto& p = device.properties();
    Accelerator acc;
    acc.id = device.id();
    acc.backend = device.backend_name();
    acc.index = device.index();
    acc.name = p.name;
    acc.vendor = p.vendor;
    acc.pci_bus_id = p.pci_bus_id[0] ? normalize_bus_id(p.pci_bus_id) : "";
    acc.memory_bytes = p.total_memory;
    acc.numa_node = p.numa_node;
    acc.memory_bandwidth_gbps = p.memory_bandwidth / 1e9;
    if (!acc.pci_bus_id.empty()) {
      if (const PciDevice* pci = topo.find_pci(acc.pci_bus_id)) {
        acc.pci_vendor_id = pci->vendor_id;
        if (acc.numa_node < 0) acc.numa_node = pci->numa_node;
        if (!pci_vendor_name(pci->vendor_id).empty()) {
          acc.vendor = std::string(pci_vendor_name(pci->vendor_id));
        }
      }
      auto hw = std::find_if(topo.accelerators.begin(), topo.accelerators.end(),
                             [&](const Accelerator& a) {
                               return a.backend.empty() && a.pci_bus_id == acc.pci_bus_id;
                             });
      if (hw != topo.accelerators.end()) {
        acc.os_devices = hw->os_devices;
        for (auto& link : topo.links) {  // vendor links hwloc found, now under the backend's id
          if (link.a == hw->id) link.a = acc.id;
          if (link.b == hw->id) link.b = acc.id;
        }
        topo.accelerators.erase(hw);
      }
    }
    from_hal.push_back(std::move(acc));
  }
  topo.accelerators.insert(topo.accelerators.begin(), from_hal.begin(), from_hal.end());
  for (const auto& record : platform.registry().records()) {
    if (record.state != hal::BackendState::kEnabled) {
      topo.skipped.push_back("backend " + record.name + ": " +
                             std::string(hal::backend_state_name(record.state)) + " (" +
                             record.reason + ")");
    }
  }
}

Result<Topology> discover(const DiscoverOptions& options,
                          std::shared_ptr<hal::Platform>* out_platform) {
  Topology topo;
  const bool live = options.hwloc.kind == HwlocSource::Kind::kLive;
  Status hw = discover_hwloc(options.hwloc, topo);
  if (hw.code() == StatusCode::kUnimplemented && live) {
    // Without hwloc the live host is still described, coarsely: online CPUs, no NUMA/PCI detail.
    topo.skipped.push_back(hw.message() + "; host has only its CPU count, no NUMA or PCI detail");
    topo.host.source = "live";
    topo.host.pus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  } else if (!hw.ok()) {
    return hw;
  }
  if (live && topo.host.hostname.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) topo.host.hostname = name;
  }
  if (!options.ucx) {
    topo.ucx.skipped = "ucx: not requested";
  } else if (!live) {
    topo.ucx.skipped = "ucx: not probed for " + topo.host.source + " (UCX is probed live only)";
  } else {
    discover_ucx(topo);
  }
  if (!options.ucx || !live) topo.skipped.push_back(topo.ucx.skipped);
  if (options.hal && live) {
    TSR_ASSIGN_OR_RETURN(auto platform, hal::Platform::create(options.platform));
    add_platform_devices(*platform, topo);
    if (out_platform) *out_platform = platform;
  } else if (options.hal) {
    topo.skipped.push_back("backends: not probed for " + topo.host.source +
                           " (accelerators come from the file's PCI devices)");
  }
  compute_links(topo);
  return topo;
}

}  // namespace tessera::topo
