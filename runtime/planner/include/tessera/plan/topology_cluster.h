// The topology layer's cluster spec (tessera::topo::ClusterSpec: probed or preset hosts plus the
// network, docs/TOPOLOGY.md) turned into the planner's compact ClusterSpec, so
// `tessera plan --cluster` accepts what `tessera probe --cluster hosts=N --json` writes.
//
// What the probe cannot know, the compute peak, comes from a table of known devices keyed by name
// (A100, H100, H200, Ascend 910B, MI250X, from shared/reference/hardware.md); for any other device
// the conversion fails and says to calibrate (`tessera plan --calibrate`) or to write the compact
// JSON. The intra-host link is the slowest declared accelerator-to-accelerator link (a ring is
// as fast as its slowest hop); the inter-host link is the spec's network.
#pragma once

#include <string_view>

#include "tessera/common/status.h"
#include "tessera/plan/cluster.h"

namespace tessera::topo {
struct ClusterSpec;
}

namespace tessera::plan {

// Converts; errors name `source` and what is missing. Calibrated figures, when `calibrated` is
// true, stand in for the device table (the caller applies them afterwards).
Result<ClusterSpec> cluster_from_topology(const topo::ClusterSpec& spec, std::string_view source,
                                          bool calibrated = false);

// The topology JSON form (detected by "hosts" being an array) parsed and converted.
Result<ClusterSpec> cluster_from_topology_json(std::string_view text, std::string_view source,
                                               bool calibrated = false);

}  // namespace tessera::plan
