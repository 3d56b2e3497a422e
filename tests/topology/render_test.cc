// Human output: the device matrix with its legend, and the Graphviz graph.
#include <gtest/gtest.h>

#include "tessera/topo/discover.h"
#include "tessera/topo/render.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

Topology xml_topology() {
  DiscoverOptions options;
  options.hwloc = {HwlocSource::Kind::kXmlFile, test::data_path("two_numa_4gpu.xml")};
  auto topo = discover(options);
  EXPECT_TRUE(topo.ok()) << topo.status().to_string();
  return topo.ok() ? *topo : Topology{};
}

TEST(Render, MatrixShowsPathClassesAndTheLegend) {
  TSR_REQUIRE_HWLOC();
  std::string text = matrix_text(xml_topology());
  // Row of pci:0: itself, pci:1 (NVLink), pci:2 (other host bridge), pci:3, pci:4 (other
  // socket), ib0, mlx5_0, then its NUMA node and that node's CPUs.
  EXPECT_NE(text.find("pci:0       X           LINK        NODE        NODE        SYS         "
                      "PIX         PIX         0     0-1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Legend:"), std::string::npos);
  EXPECT_NE(text.find("SYS  = across NUMA nodes"), std::string::npos);
}

TEST(Render, DotHasDevicesSwitchesNumaNodesAndLabelledLinks) {
  TSR_REQUIRE_HWLOC();
  std::string dot = dot_text(xml_topology());
  EXPECT_EQ(dot.rfind("graph topology {", 0), 0u);
  EXPECT_NE(dot.find("\"numa:1\" [shape=box"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"0000:01:00.0\" [shape=diamond"), std::string::npos);
  EXPECT_NE(dot.find("\"0000:02:00.0\" -- \"pci:0\""), std::string::npos);
  EXPECT_NE(dot.find("\"pci:0\" -- \"pci:1\" [style=dashed, label=\"LINK 300.0 GB/s\"]"),
            std::string::npos);
  EXPECT_NE(dot.find("\"pci:0\" -- \"nic:mlx5_0\" [style=dashed, label=\"PIX 31.5 GB/s\"]"),
            std::string::npos);
}

TEST(Render, SummaryListsWhatWasSkipped) {
  TSR_REQUIRE_HWLOC();
  std::string text = summary_text(xml_topology());
  EXPECT_NE(text.find("Host gpu-node-test [hwloc-xml:"), std::string::npos) << text;
  EXPECT_NE(text.find("Skipped:\n  ucx: not probed for hwloc-xml:"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera::topo
