// hwloc discovery from synthetic descriptions and a hand-written XML with GPUs, and the links and
// path classes derived from its PCI tree.
#include <gtest/gtest.h>

#include "tessera/topo/discover.h"
#include "tessera/topo/links.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

TEST(HwlocSynthetic, CountsPackagesNumaCoresAndPus) {
  TSR_REQUIRE_HWLOC();
  Topology topo = test::synthetic("pack:2 numa:2 core:4 pu:2");
  EXPECT_EQ(topo.host.packages, 2);
  EXPECT_EQ(topo.host.cores, 16);
  EXPECT_EQ(topo.host.pus, 32);
  ASSERT_EQ(topo.numa_nodes.size(), 4u);
  EXPECT_EQ(topo.numa_nodes[0].cpuset, "0-7");
  EXPECT_EQ(topo.numa_nodes[3].cpuset, "24-31");
  EXPECT_EQ(topo.host.source, "synthetic:pack:2 numa:2 core:4 pu:2");
}

TEST(HwlocSynthetic, SingleNumaMachineWithoutPackagesLevelCountsOneNode) {
  TSR_REQUIRE_HWLOC();
  Topology topo = test::synthetic("core:3 pu:1");
  EXPECT_EQ(topo.host.cores, 3);
  EXPECT_EQ(topo.host.pus, 3);
  EXPECT_EQ(topo.numa_nodes.size(), 1u);
  EXPECT_TRUE(topo.accelerators.empty());
}

TEST(HwlocSynthetic, RejectsAnUnknownDescriptionNamingIt) {
  TSR_REQUIRE_HWLOC();
  Topology topo;
  Status status = discover_hwloc({HwlocSource::Kind::kSynthetic, "pack:2 bogus:3"}, topo);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("'pack:2 bogus:3'"), std::string::npos) << status.message();
}

TEST(HwlocXml, MissingFileErrorNamesTheFile) {
  TSR_REQUIRE_HWLOC();
  Topology topo;
  Status status = discover_hwloc({HwlocSource::Kind::kXmlFile, "/nonexistent/topo.xml"}, topo);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/nonexistent/topo.xml"), std::string::npos) << status.message();
}

class HwlocXmlWithGpus : public ::testing::Test {
 protected:
  void SetUp() override {
    TSR_REQUIRE_HWLOC();
    DiscoverOptions options;
    options.hwloc = {HwlocSource::Kind::kXmlFile, test::data_path("two_numa_4gpu.xml")};
    auto result = discover(options);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    topo = *result;
  }
  const Link& link(const std::string& a, const std::string& b) {
    const Link* l = topo.find_link(a, b);
    EXPECT_NE(l, nullptr) << a << " - " << b;
    static const Link kNone;
    return l ? *l : kNone;
  }
  Topology topo;
};

TEST_F(HwlocXmlWithGpus, ReadsHostAndNuma) {
  EXPECT_EQ(topo.host.hostname, "gpu-node-test");
  EXPECT_EQ(topo.host.packages, 2);
  EXPECT_EQ(topo.host.cores, 4);
  EXPECT_EQ(topo.host.pus, 4);
  ASSERT_EQ(topo.numa_nodes.size(), 2u);
  EXPECT_EQ(topo.numa_nodes[1].memory_bytes, 68719476736u);
  EXPECT_EQ(topo.numa_nodes[1].cpuset, "2-3");
}

TEST_F(HwlocXmlWithGpus, FindsNvidiaGpusAndTheHuaweiChipByVendorId) {
  ASSERT_EQ(topo.accelerators.size(), 5u);
  const Accelerator& gpu0 = topo.accelerators[0];
  EXPECT_EQ(gpu0.id, "pci:0");
  EXPECT_EQ(gpu0.vendor, "NVIDIA");
  EXPECT_EQ(gpu0.name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(gpu0.pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(gpu0.memory_bytes, 80ull << 30);
  EXPECT_EQ(gpu0.numa_node, 0);
  EXPECT_EQ(gpu0.os_devices, std::vector<std::string>{"cuda0"});
  const Accelerator& ascend = topo.accelerators[3];
  EXPECT_EQ(ascend.vendor, "Huawei");
  EXPECT_EQ(ascend.pci_vendor_id, 0x19e5);
  EXPECT_EQ(ascend.pci_bus_id, "0000:42:00.0");
  EXPECT_EQ(topo.accelerators[4].numa_node, 1);
}

TEST_F(HwlocXmlWithGpus, FindsTheMellanoxNicAndItsOsDevices) {
  ASSERT_EQ(topo.nics.size(), 2u);
  EXPECT_EQ(topo.nics[0].name, "ib0");
  EXPECT_EQ(topo.nics[0].type, "network");
  EXPECT_EQ(topo.nics[1].name, "mlx5_0");
  EXPECT_EQ(topo.nics[1].type, "openfabrics");
  EXPECT_EQ(topo.nics[1].pci_bus_id, "0000:05:00.0");
  EXPECT_EQ(topo.nics[1].numa_node, 0);
  EXPECT_NE(topo.ucx.skipped.find("live only"), std::string::npos);
}

TEST_F(HwlocXmlWithGpus, ClassifiesPathsFromThePciTree) {
  EXPECT_EQ(link("pci:0", "nic:mlx5_0").path, PathClass::kPix);
  EXPECT_EQ(link("pci:0", "nic:mlx5_0").type, LinkType::kPcieSwitch);
  EXPECT_EQ(link("pci:1", "nic:ib0").path, PathClass::kPix);
  EXPECT_EQ(link("pci:2", "pci:3").path, PathClass::kPhb);
  EXPECT_EQ(link("pci:0", "pci:2").path, PathClass::kNode);
  EXPECT_EQ(link("pci:2", "nic:mlx5_0").path, PathClass::kNode);
  EXPECT_EQ(link("pci:0", "pci:4").path, PathClass::kSys);
  EXPECT_EQ(link("pci:0", "pci:4").type, LinkType::kNumaCrossing);
  EXPECT_EQ(link("numa:1", "pci:4").path, PathClass::kPhb);
  EXPECT_EQ(topo.find_link("numa:0", "pci:4"), nullptr);  // host links go to the local node
}

TEST_F(HwlocXmlWithGpus, TakesNvlinkFromHwlocsBandwidthMatrix) {
  const Link& l = link("pci:0", "pci:1");  // behind one PCIe switch, but NVLinked
  EXPECT_EQ(l.path, PathClass::kLink);
  EXPECT_EQ(l.type, LinkType::kVendorLink);
  EXPECT_EQ(l.bandwidth_gbps, 300);
  EXPECT_EQ(l.bandwidth_source, "hwloc NVLinkBandwidth");
}

TEST_F(HwlocXmlWithGpus, DeclaresPcieBandwidthFromHwlocLinkSpeed) {
  const Link& l = link("pci:0", "nic:mlx5_0");
  EXPECT_NEAR(l.bandwidth_gbps, 31.5, 0.1);
  EXPECT_EQ(l.bandwidth_source, "hwloc");
  EXPECT_FALSE(l.measured_bandwidth_gbps.has_value());
  EXPECT_EQ(link("pci:0", "pci:4").bandwidth_source, "defaults");
}

TEST_F(HwlocXmlWithGpus, LinksEveryDevicePairAndEveryDeviceNicPair) {
  // 5 devices: 10 pairs, 5 x 2 NICs, 5 host links.
  EXPECT_EQ(topo.links.size(), 10u + 10u + 5u);
}

TEST(Hwloc, ReportsWhenItWasNotBuiltIn) {
  if (have_hwloc()) GTEST_SKIP() << "built with hwloc";
  Topology topo;
  Status status = discover_hwloc({HwlocSource::Kind::kSynthetic, "core:1"}, topo);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tessera::topo
