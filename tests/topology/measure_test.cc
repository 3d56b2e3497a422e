// --measure produces its figures (values are never asserted: tests do not time), keeps the
// declared ones, and says what it could not measure.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tessera/topo/discover.h"
#include "tessera/topo/measure.h"

namespace tessera::topo {
namespace {

MeasureOptions small() {
  MeasureOptions options;
  options.host_bytes = options.device_bytes = options.ucx_bytes = size_t{4} << 20;
  options.repeats = 2;
  return options;
}

TEST(Measure, ProducesAHostMemoryFigureForEveryNumaNode) {
  DiscoverOptions options;
  options.ucx = false;
  options.hal = false;
  auto topo = discover(options);
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  MeasureOptions m = small();
  m.devices = m.ucx = false;
  MeasureReport report = measure(*topo, nullptr, m);
  ASSERT_FALSE(topo->numa_nodes.empty());
  for (const auto& node : topo->numa_nodes) {
    ASSERT_TRUE(node.measured_memory_bandwidth_gbps.has_value()) << "NUMA " << node.os_index;
    EXPECT_GT(*node.measured_memory_bandwidth_gbps, 0);
  }
  EXPECT_GT(report.reference_memcpy_gbps, 0);
  EXPECT_GT(memcpy_bandwidth_gbps(m.host_bytes, m.repeats), 0);
}

TEST(Measure, FillsHostToDeviceAndPeerLinksBesideTheDeclaredFigures) {
  setenv("TESSERA_HOST_DEVICES", "2", 1);
  DiscoverOptions options;
  options.ucx = false;
  options.platform.registry.selection = "host";
  options.platform.registry.search_dirs = {TESSERA_BUILD_BACKEND_DIR};
  std::shared_ptr<hal::Platform> platform;
  auto topo = discover(options, &platform);
  unsetenv("TESSERA_HOST_DEVICES");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  ASSERT_NE(platform, nullptr);
  Topology before = *topo;
  MeasureOptions m = small();
  m.host = m.ucx = false;
  MeasureReport report = measure(*topo, platform.get(), m);
  for (const auto& note : report.notes) ADD_FAILURE() << note;
  ASSERT_EQ(topo->links.size(), before.links.size());
  int measured = 0;
  for (size_t i = 0; i < topo->links.size(); ++i) {
    EXPECT_EQ(topo->links[i].bandwidth_gbps, before.links[i].bandwidth_gbps);
    EXPECT_EQ(topo->links[i].bandwidth_source, before.links[i].bandwidth_source);
    if (topo->links[i].measured_bandwidth_gbps && topo->links[i].measured_latency_us) ++measured;
  }
  EXPECT_EQ(measured, 3);  // numa->host:0, numa->host:1, host:0->host:1
}

TEST(Measure, UcxLoopbackFillsIntraNodeTransportsAndNotesNetworkOnes) {
  if (!have_ucx()) GTEST_SKIP() << "built without UCX";
  Topology topo;
  discover_ucx(topo);
  ASSERT_TRUE(topo.ucx.available);
  MeasureOptions m = small();
  m.host = m.devices = false;
  MeasureReport report = measure(topo, nullptr, m);
  int measured = 0;
  for (const auto& tl : topo.ucx.transports) {
    if (tl.measured_bandwidth_gbps) ++measured;
    if (tl.device_type == "network") {
      EXPECT_FALSE(tl.measured_bandwidth_gbps) << tl.transport;
    }
  }
  EXPECT_GT(measured, 0);
  bool noted_network = false;
  for (const auto& note : report.notes)
    noted_network |= note.find("needs a peer") != std::string::npos;
  bool has_network = false;
  for (const auto& tl : topo.ucx.transports) has_network |= tl.device_type == "network";
  EXPECT_EQ(noted_network, has_network);
}

TEST(Measure, WithoutAPlatformSaysDevicesWereNotMeasured) {
  Topology topo;
  MeasureOptions m = small();
  m.host = m.ucx = false;
  MeasureReport report = measure(topo, nullptr, m);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_NE(report.notes[0].find("devices"), std::string::npos);
}

}  // namespace
}  // namespace tessera::topo
