// Cluster specs: presets from public figures, the local probe scaled out, JSON round trips and
// errors naming the file and the field.
#include <gtest/gtest.h>

#include "tessera/topo/cluster.h"
#include "tessera/topo/discover.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

TEST(ClusterPreset, DgxH100HasEightGpusOnNvlinkAndEightNdrNics) {
  auto c = cluster_preset("dgx-h100");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->host_count(), 1);
  EXPECT_EQ(c->accelerator_count(), 8);
  EXPECT_EQ(c->network.nics_per_host, 8);
  EXPECT_EQ(c->network.bandwidth_gbps_per_nic, 50);
  const Link* link = c->hosts[0].topology.find_link("cuda:0", "cuda:7");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->path, PathClass::kLink);
  EXPECT_EQ(link->bandwidth_gbps, 450);
  EXPECT_EQ(c->hosts[0].topology.accelerators[0].memory_bandwidth_gbps, 3350);
}

TEST(ClusterPreset, EveryPresetRoundTripsThroughJson) {
  for (const auto& name : cluster_preset_names()) {
    auto c = cluster_preset(name);
    ASSERT_TRUE(c.ok()) << name;
    std::string text = cluster_to_json(*c);
    auto back = cluster_from_json(text, name + ".json");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == *c) << name;
    EXPECT_EQ(cluster_to_json(*back), text) << name;
  }
}

TEST(ClusterPreset, UnknownNameListsThePresets) {
  auto c = cluster_preset("dgx-b200");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "cluster preset 'dgx-b200': unknown; presets are dgx-a100-80gb, dgx-h100, "
            "ascend-910b-8, mi250x-8");
}

TEST(ClusterFromTopology, ScalesTheXmlHostAndTakesItsFabricNics) {
  TSR_REQUIRE_HWLOC();
  Topology topo;
  ASSERT_TRUE(
      discover_hwloc({HwlocSource::Kind::kXmlFile, test::data_path("two_numa_4gpu.xml")}, topo)
          .ok());
  ClusterSpec c = cluster_from_topology(topo, 16, "xml-x16");
  EXPECT_EQ(c.host_count(), 16);
  EXPECT_EQ(c.accelerator_count(), 16 * 5);
  EXPECT_EQ(c.network.link, "infiniband");
  EXPECT_EQ(c.network.nics_per_host, 1);  // mlx5_0; ib0 is the same port seen as netdev
}

std::string cluster_error(const std::string& text) {
  auto c = cluster_from_json(text, "cluster.json");
  return c.ok() ? "(parsed)" : c.status().message();
}

TEST(ClusterJson, MissingFieldsAreNamedWithTheFile) {
  auto c = cluster_preset("mi250x-8");
  ASSERT_TRUE(c.ok());
  std::string text = cluster_to_json(*c);
  std::string no_latency = text;
  no_latency.replace(no_latency.find("\"latency_us\": 3"), 15, "\"latency\": 3");
  EXPECT_EQ(cluster_error(no_latency),
            "cluster.json: field 'network.latency_us': expected a number (missing)");
  EXPECT_EQ(cluster_error("{\"version\": 1, \"name\": \"x\", \"hosts\": []}"),
            "cluster.json: field 'hosts': expected at least one host group");
  EXPECT_EQ(cluster_error("{\"version\": 1, \"name\": \"x\", \"hosts\": [{\"count\": 2}]}"),
            "cluster.json: field 'hosts[0].topology': expected an object (missing)");
  EXPECT_EQ(cluster_error("{\"version\": 1, \"name\": \"x\", \"hosts\": [{\"count\": 2, "
                          "\"topology\": {\"version\": 1}}]}"),
            "cluster.json: field 'hosts[0].topology.host': expected an object (missing)");
}

TEST(ClusterJson, LoadClusterNamesAnUnreadablePath) {
  auto c = load_cluster("/nonexistent/cluster.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "/nonexistent/cluster.json: neither a cluster preset nor a readable file");
}

}  // namespace
}  // namespace tessera::topo
