// Topology JSON (`tessera probe --from-json`, TESSERA_TOPOLOGY) and the cluster spec JSON of the
// topology layer (`tessera probe --cluster`, read back by the planner). Both promise a round trip:
// to_json of a parsed value parses back equal and prints byte-identical.
#include "fuzz_target.h"
#include "tessera/topo/cluster.h"
#include "tessera/topo/json.h"

TESSERA_FUZZ_TARGET(topology_json) {
  namespace topo = tessera::topo;
  const std::string_view text = tessera::fuzz::as_text(data, size);
  if (auto parsed = topo::from_json(text, "topology.json"); parsed.ok()) {
    const std::string printed = topo::to_json(*parsed);
    auto again = topo::from_json(printed, "round trip");
    FUZZ_CHECK(again.ok(), "to_json of a parsed topology does not parse");
    FUZZ_CHECK(topo::to_json(*again) == printed, "topology round trip is not byte-identical");
  }
  if (auto cluster = topo::cluster_from_json(text, "cluster.json"); cluster.ok()) {
    const std::string printed = topo::cluster_to_json(*cluster);
    auto again = topo::cluster_from_json(printed, "round trip");
    FUZZ_CHECK(again.ok(), "cluster_to_json of a parsed cluster does not parse");
    FUZZ_CHECK(*again == *cluster, "cluster round trip changed the value");
  }
  return 0;
}
