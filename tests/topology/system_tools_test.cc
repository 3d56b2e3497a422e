// Agreement with the real tools on this machine: lstopo/hwloc-calc for cores, PUs, NUMA nodes and
// NIC names; ucx_info -d for the set of UCX transports and devices. Parsed at test time; skipped
// with a message where a tool is absent.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "tessera/topo/discover.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

// The value of attribute `name` in one XML tag, or empty. (No std::regex: GCC 12 warns inside it
// under -O1 with sanitizers, and warnings are errors there.)
std::string attribute(const std::string& tag, const std::string& name) {
  size_t pos = tag.find(" " + name + "=\"");
  if (pos == std::string::npos) return "";
  pos += name.size() + 3;
  return tag.substr(pos, tag.find('"', pos) - pos);
}

// The text after "<key>: " on a line of ucx_info output, or empty.
std::string after(const std::string& line, const std::string& key) {
  size_t pos = line.find(key + ": ");
  if (pos == std::string::npos || line.rfind('#', pos) == std::string::npos) return "";
  std::string value = line.substr(pos + key.size() + 2);
  return value.substr(0, value.find_first_of(" \t\r"));
}

int count_of(const std::string& type) {
  bool ok = false;
  std::string out = test::run_command("hwloc-calc --number-of " + type + " all", &ok);
  EXPECT_TRUE(ok) << "hwloc-calc --number-of " << type;
  return std::atoi(out.c_str());
}

Topology live_hwloc() {
  Topology topo;
  Status status = discover_hwloc({HwlocSource::Kind::kLive, ""}, topo);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return topo;
}

TEST(SystemTools, CoresPusNumaAndPackagesAgreeWithHwlocCalc) {
  if (!have_hwloc()) GTEST_SKIP() << "built without hwloc";
  if (!test::have_tool("hwloc-calc")) GTEST_SKIP() << "hwloc-calc not installed";
  Topology topo = live_hwloc();
  EXPECT_EQ(topo.host.cores, count_of("core"));
  EXPECT_EQ(topo.host.pus, count_of("pu"));
  EXPECT_EQ(static_cast<int>(topo.numa_nodes.size()), count_of("numa"));
  EXPECT_EQ(topo.host.packages, count_of("package"));
}

TEST(SystemTools, NicNamesAgreeWithLstopoXml) {
  if (!have_hwloc()) GTEST_SKIP() << "built without hwloc";
  if (!test::have_tool("lstopo")) GTEST_SKIP() << "lstopo not installed";
  bool ok = false;
  std::string xml = test::run_command("lstopo --of xml", &ok);
  ASSERT_TRUE(ok);
  // osdev_type 2 = network, 3 = OpenFabrics (hwloc_obj_osdev_type_e).
  std::set<std::string> expected, got;
  for (size_t pos = xml.find("<object type=\"OSDev\""); pos != std::string::npos;
       pos = xml.find("<object type=\"OSDev\"", pos + 1)) {
    std::string tag = xml.substr(pos, xml.find('>', pos) - pos);
    std::string type = attribute(tag, "osdev_type");
    if (type == "2" || type == "3") expected.insert(attribute(tag, "name"));
  }
  for (const auto& nic : live_hwloc().nics) got.insert(nic.name);
  EXPECT_EQ(got, expected);
}

TEST(SystemTools, UcxTransportsAndDevicesAgreeWithUcxInfo) {
  if (!have_ucx()) GTEST_SKIP() << "built without UCX";
  if (!test::have_tool("ucx_info")) GTEST_SKIP() << "ucx_info not installed";
  bool ok = false;
  std::istringstream out(test::run_command("ucx_info -d", &ok));
  ASSERT_TRUE(ok);
  std::set<std::string> expected, got;
  std::string line, tl;
  while (std::getline(out, line)) {
    if (std::string t = after(line, "Transport"); !t.empty()) tl = t;
    if (std::string d = after(line, "Device"); !d.empty()) expected.insert(tl + "/" + d);
  }
  Topology topo;
  discover_ucx(topo);
  ASSERT_TRUE(topo.ucx.available) << topo.ucx.skipped;
  for (const auto& t : topo.ucx.transports) got.insert(t.transport + "/" + t.device);
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(got, expected);
  EXPECT_FALSE(topo.ucx.memory_types.empty());
  EXPECT_EQ(topo.ucx.memory_types[0], "host");
}

}  // namespace
}  // namespace tessera::topo
