// The JSON form: exact round trips and one-line errors naming the file, the field and what was
// expected.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tessera/topo/discover.h"
#include "tessera/topo/json.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

void expect_round_trip(const Topology& topo) {
  std::string first = to_json(topo);
  auto back = from_json(first, "round-trip.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == topo);
  EXPECT_EQ(to_json(*back), first);
}

TEST(TopologyJson, RoundTripsTheXmlTopologyWithGpusExactly) {
  TSR_REQUIRE_HWLOC();
  DiscoverOptions options;
  options.hwloc = {HwlocSource::Kind::kXmlFile, test::data_path("two_numa_4gpu.xml")};
  auto topo = discover(options);
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  topo->links[0].measured_bandwidth_gbps = 12.345678901234567;
  topo->links[0].measured_latency_us = 1.0 / 3.0;
  topo->numa_nodes[0].measured_memory_bandwidth_gbps = 9.87;
  expect_round_trip(*topo);
}

TEST(TopologyJson, RoundTripsTheLiveProbeWithHostDevicesExactly) {
  setenv("TESSERA_HOST_DEVICES", "2", 1);
  DiscoverOptions options;
  options.platform.registry.selection = "host";
  options.platform.registry.search_dirs = {TESSERA_BUILD_BACKEND_DIR};
  auto topo = discover(options);
  unsetenv("TESSERA_HOST_DEVICES");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  ASSERT_EQ(topo->accelerators.size(), 2u) << to_json(*topo);
  EXPECT_EQ(topo->accelerators[0].id, "host:0");
  const Link* link = topo->find_link("host:0", "host:1");
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->type, LinkType::kSharedMemory);
  expect_round_trip(*topo);
}

TEST(TopologyJson, RoundTripsAnEmptyTopology) {
  expect_round_trip(Topology{});
}

std::string error_of(const std::string& text) {
  auto topo = from_json(text, "node.json");
  return topo.ok() ? "(parsed)" : topo.status().message();
}

std::string valid_text() {
  Topology topo;
  topo.accelerators.push_back(
      {"cuda:0", "cuda", 0, "GPU", "NVIDIA", "0000:03:00.0", 0x10de, 1024, 0, 2000, {"cuda0"}});
  return to_json(topo);
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

TEST(TopologyJson, MalformedJsonNamesTheFile) {
  std::string message = error_of("{\"version\": 1,");
  EXPECT_EQ(message.rfind("node.json: not valid JSON", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// Found by the topology_json fuzz target (tests/fuzz/regressions/topology_json): a number beyond
// double's range made nlohmann throw out_of_range, which only parse_error was caught for.
TEST(TopologyJson, ANumberBeyondDoubleIsMalformedJsonNotACrash) {
  auto parsed = from_json(R"({"version": 33e33098})", "huge.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("huge.json: not valid JSON"), std::string::npos)
      << parsed.status().message();
}

TEST(TopologyJson, WrongVersionSaysWhichVersionIsExpected) {
  EXPECT_EQ(error_of(replace(valid_text(), "\"version\": 1", "\"version\": 7")),
            "node.json: field 'version': expected 1 (this Tessera reads topology schema 1, the "
            "file has 7)");
}

TEST(TopologyJson, MissingFieldIsNamedWithItsPath) {
  EXPECT_EQ(error_of(replace(valid_text(), "\"pci_bus_id\": \"0000:03:00.0\",", "")),
            "node.json: field 'accelerators[0].pci_bus_id': expected a string (missing)");
}

TEST(TopologyJson, MistypedFieldSaysWhatWasExpected) {
  EXPECT_EQ(error_of(replace(valid_text(), "\"memory_bytes\": 1024", "\"memory_bytes\": -1")),
            "node.json: field 'accelerators[0].memory_bytes': expected a non-negative integer");
  EXPECT_EQ(error_of(replace(valid_text(), "\"pci_vendor_id\": \"10de\"",
                             "\"pci_vendor_id\": \"nvidia\"")),
            "node.json: field 'accelerators[0].pci_vendor_id': expected 4 hex digits such as "
            "\"10de\"");
  EXPECT_EQ(error_of("[]"), "node.json: field '(top level)': expected an object");
}

TEST(TopologyJson, UnknownPathClassListsTheValidOnes) {
  Topology topo;
  topo.links.push_back({"a", "b", LinkType::kPcieSwitch, PathClass::kPix, 24, "defaults", {}, {}});
  std::string message = error_of(replace(to_json(topo), "\"PIX\"", "\"PCI\""));
  EXPECT_EQ(message,
            "node.json: field 'links[0].path': expected one of LOC, LINK, PIX, PXB, PHB, "
            "NODE, SYS, NET");
}

TEST(TopologyJson, UnreadableFileIsNamed) {
  auto topo = load_json_file("/nonexistent/node.json");
  ASSERT_FALSE(topo.ok());
  EXPECT_NE(topo.status().message().find("/nonexistent/node.json"), std::string::npos);
}

}  // namespace
}  // namespace tessera::topo
