// Network measurement between hosts (`tessera probe --measure` started with one rank per host by
// `tessera launch`, mpirun or srun): UCX bandwidth and latency for every ordered pair of hosts, one
// pair at a time, kept beside the figure UCX declares for the transport it used. The ranks meet
// through an allgather the caller provides (the tool wires it to coll::Bootstrap), so this layer
// does not depend on the collectives. Not thread-safe; every rank calls measure_network together.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/topo/measure.h"
#include "tessera/topo/topology.h"

namespace tessera::topo {

// The ranks of a network measurement, one per host.
struct PeerGroup {
  int rank = 0;
  int size = 1;
  // Every rank calls it with the same `name` (unique per exchange); returns every rank's bytes in
  // rank order. Errors name the rank that did not arrive.
  std::function<Result<std::vector<std::string>>(const std::string& name, const std::string& mine)>
      allgather;
};

// One direction between two hosts, measured by the sender.
struct NetworkLink {
  int from_rank = 0, to_rank = 0;
  std::string from_host, to_host;
  std::string transport;               // the UCP lane that carried the data, "tcp/eth0"
  double declared_bandwidth_gbps = 0;  // the sender's UCX figure for that transport; 0 unknown
  double declared_latency_us = 0;
  double bandwidth_gbps = 0;  // median of the timed messages (GB/s, 1e9 bytes/s)
  double latency_us = 0;      // median half round trip of 8-byte messages
  size_t message_bytes = 0;   // size of each timed message
  std::vector<double> samples_gbps;
};

struct NetworkMeasurement {
  std::vector<std::string> hosts;  // host names by rank
  std::vector<NetworkLink> links;  // every ordered pair (a != b), the same on every rank
  double seconds = 0;              // wall time of the whole measurement
};

// Measures every ordered pair of ranks over UCX tag messages: a sender times messages of up to
// `options.ucx_bytes` (sized so that one takes about half a second, at least 4 MiB), each until
// the receiver's 8-byte acknowledgement, `options.repeats` times, and keeps the median; latency is
// the median half round trip of 8-byte ping-pongs. Ranks on the same host are refused (the figure
// would be shared memory). UCX_TLS / UCX_NET_DEVICES are honoured; when unset, the network
// transports and devices of `topo` (loopback devices left out) are used. The transport each host
// used gets its measured_* fields in `topo` (its slowest outgoing pair). Every wait is bounded.
Result<NetworkMeasurement> measure_network(Topology& topo, const PeerGroup& group,
                                           const MeasureOptions& options);

// A table, one line per direction: measured beside declared, with the fraction.
std::string network_text(const NetworkMeasurement& m);
// {"version": 1, "hosts": [...], "network_links": [...], "topology": <topo as to_json writes it>}
std::string network_json(const NetworkMeasurement& m, const Topology& topo);

}  // namespace tessera::topo
