// Measurement (`tessera probe --measure`): host memory copy bandwidth per NUMA node, copy bandwidth
// host<->device and between device pairs through the HAL, and UCX loopback bandwidth and latency
// per transport. Results go into the measured_* fields beside the declared figures, never over
// them. Sized to finish in seconds. Not thread-safe (binds the calling thread while measuring).
// The network between hosts needs one process per host: measure_network.h.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/platform.h"
#include "tessera/topo/topology.h"

namespace tessera::topo {

struct MeasureOptions {
  size_t host_bytes = size_t{64} << 20;    // per host memcpy
  size_t device_bytes = size_t{64} << 20;  // per HAL copy
  size_t ucx_bytes = size_t{64} << 20;     // per UCX put (beyond the last-level cache)
  int repeats = 5;  // the best of these is kept (host: 4x as many, interleaved)
  bool host = true, devices = true, ucx = true;
};

struct MeasureReport {
  double seconds = 0;  // wall time of the whole measurement
  // A plain single-thread memcpy (unbound thread, malloc'd buffers, same size), timed interleaved
  // with the per-NUMA copies so both see the same machine load; 0 when host memory was skipped.
  double reference_memcpy_gbps = 0;
  std::vector<std::string> notes;  // one line per thing that could not be measured, and why
};

// GB/s of one single-threaded memcpy of `bytes` (best of `repeats`), buffers first touched by the
// caller's thread. The reference the NUMA figure is compared with.
double memcpy_bandwidth_gbps(size_t bytes, int repeats);

// Host memory bandwidth of each NUMA node: the calling thread bound to the node's CPUs copies
// between two buffers bound to its memory (hwloc); without hwloc, one unbound figure for node 0.
void measure_host_memory(Topology& topo, const MeasureOptions& options, MeasureReport& report);
// For every accelerator of `platform` in topo: host->device into link (numa:N, dev), and
// device a->device b into link (a, b); latency from a 4-byte copy.
void measure_devices(Topology& topo, const hal::Platform& platform, const MeasureOptions& options,
                     MeasureReport& report);
// Loopback put bandwidth and latency through UCP for each intra-node/loopback transport present.
void measure_ucx(Topology& topo, const MeasureOptions& options, MeasureReport& report);

// All of the above that the options enable; `platform` may be null (devices then skipped).
MeasureReport measure(Topology& topo, const hal::Platform* platform, const MeasureOptions& options);

}  // namespace tessera::topo
