// Discovery: builds a Topology from hwloc (the live machine, an hwloc XML file or an hwloc
// synthetic description), UCX (transports, devices, memory types) and the HAL (accelerators of
// every enabled backend). Each part that cannot be probed (library not built in, no backend) is
// recorded in Topology::skipped with the reason; only bad input is an error. Not thread-safe with
// respect to concurrent hwloc/UCX initialisation in the same process only in the ways those
// libraries are not; call from one thread.
#pragma once

#include <memory>
#include <string>

#include "tessera/common/status.h"
#include "tessera/hal/platform.h"
#include "tessera/topo/topology.h"

namespace tessera::topo {

struct HwlocSource {
  enum class Kind { kLive, kXmlFile, kSynthetic };
  Kind kind = Kind::kLive;
  std::string arg;  // the XML path or the synthetic description
};

struct DiscoverOptions {
  HwlocSource hwloc;
  bool ucx = true;  // ignored (recorded as skipped) for XML/synthetic sources: UCX is live only
  bool hal = true;  // load backends through hal::Platform
  hal::PlatformOptions platform;
};

// Host, NUMA nodes, PCI tree, OS devices; accelerators for PCI functions of known accelerator
// vendors; NICs for network/OpenFabrics OS devices. INVALID_ARGUMENT naming the file when an XML
// or a synthetic description fails to load; UNIMPLEMENTED when built without hwloc.
Status discover_hwloc(const HwlocSource& source, Topology& topo);
// true when the library was built with hwloc / UCX.
bool have_hwloc();
bool have_ucx();

// UCX transports and memory types; attaches each transport to the NIC it runs on. Never fails:
// a UCX that is absent or fails to initialise is recorded in topo.ucx.skipped and topo.skipped.
void discover_ucx(Topology& topo);

// Adds the platform's devices as accelerators, replacing the hwloc-only entry with the same PCI
// bus id (the join), keeping the hwloc OS devices and NUMA locality.
void add_platform_devices(const hal::Platform& platform, Topology& topo);

// Everything above, then compute_links (links.h). Errors only for bad input. When `out_platform`
// is given it receives the platform the accelerators came from (null when none was loaded), for
// measure().
Result<Topology> discover(const DiscoverOptions& options,
                          std::shared_ptr<hal::Platform>* out_platform = nullptr);

}  // namespace tessera::topo
