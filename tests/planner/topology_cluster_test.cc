// The topology layer's cluster specs as planner input (only in builds with the topology layer).
#include <gtest/gtest.h>

#ifdef TESSERA_PLAN_HAVE_TOPOLOGY

#include "tessera/plan/topology_cluster.h"
#include "tessera/topo/cluster.h"

namespace tessera::plan {
namespace {

topo::ClusterSpec a100_hosts(int count) {
  auto spec = topo::cluster_preset("dgx-a100-80gb");
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  spec->hosts.front().count = count;
  return *spec;
}

TEST(TopologyCluster, ADgxA100SpecBecomesTheSameClusterAsThePlannersPreset) {
  auto c = cluster_from_topology(a100_hosts(4), "a100.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hosts, 4);
  EXPECT_EQ(c->devices_per_host, 8);
  EXPECT_DOUBLE_EQ(c->device.peak_tflops_bf16, 312);
  EXPECT_DOUBLE_EQ(c->device.memory_gib, 80);
  EXPECT_DOUBLE_EQ(c->device.memory_bandwidth_gbps, 2039);
  EXPECT_EQ(c->intra_host.link, "nvlink");
  EXPECT_DOUBLE_EQ(c->intra_host.bandwidth_gbps, 300);
  EXPECT_EQ(c->inter_host.link, "infiniband");
  EXPECT_EQ(c->inter_host.nics_per_host, 8);
  EXPECT_DOUBLE_EQ(c->inter_host.bandwidth_gbps, 25);
  auto preset = cluster_preset("dgx-a100-80gb");
  ASSERT_TRUE(preset.ok());
  EXPECT_DOUBLE_EQ(c->intra_host.busbw_gbps, preset->intra_host.busbw_gbps);
  EXPECT_DOUBLE_EQ(c->inter_host.busbw_gbps, preset->inter_host.busbw_gbps);
}

TEST(TopologyCluster, TheJsonFormConvertsLikeTheValue) {
  const topo::ClusterSpec spec = a100_hosts(2);
  auto direct = cluster_from_topology(spec, "x.json");
  auto parsed = cluster_from_topology_json(topo::cluster_to_json(spec), "x.json");
  ASSERT_TRUE(direct.ok() && parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->hosts, direct->hosts);
  EXPECT_EQ(parsed->devices_per_host, direct->devices_per_host);
  EXPECT_DOUBLE_EQ(parsed->intra_host.bandwidth_gbps, direct->intra_host.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(parsed->device.peak_tflops_bf16, direct->device.peak_tflops_bf16);
}

TEST(TopologyCluster, AnUnknownDeviceAsksForACalibration) {
  topo::ClusterSpec spec = a100_hosts(1);
  for (auto& a : spec.hosts.front().topology.accelerators) a.name = "Acme Tensor X1";
  auto c = cluster_from_topology(spec, "acme.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("acme.json: accelerator 'Acme Tensor X1' has no peak"),
            std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("--calibrate"), std::string::npos);
  EXPECT_TRUE(cluster_from_topology(spec, "acme.json", /*calibrated=*/true).ok());
}

TEST(TopologyCluster, RefusesWhatItCannotPlanFor) {
  topo::ClusterSpec two_types = a100_hosts(1);
  two_types.hosts.push_back(two_types.hosts.front());
  EXPECT_NE(cluster_from_topology(two_types, "c.json").status().message().find("one host type"),
            std::string::npos);
  topo::ClusterSpec no_network = a100_hosts(2);
  no_network.network = {};
  EXPECT_NE(cluster_from_topology(no_network, "c.json").status().message().find("'network'"),
            std::string::npos);
  topo::ClusterSpec no_devices = a100_hosts(1);
  no_devices.hosts.front().topology.accelerators.clear();
  EXPECT_FALSE(cluster_from_topology(no_devices, "c.json").ok());
}

}  // namespace
}  // namespace tessera::plan

#endif  // TESSERA_PLAN_HAVE_TOPOLOGY
