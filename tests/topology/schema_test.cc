// docs/topology.schema.json and the writer agree: every object the writer emits has exactly the
// properties the schema requires, recursively, for a topology and a cluster spec.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/topo/cluster.h"
#include "tessera/topo/discover.h"
#include "tessera/topo/json.h"
#include "test_util.h"

namespace tessera::topo {
namespace {

using nlohmann::json;

class SchemaChecker {
 public:
  explicit SchemaChecker(json schema) : schema_(std::move(schema)) {}

  void check(const json& value, const json& node, const std::string& path) {
    if (node.contains("$ref")) {
      std::string ref = node["$ref"];  // "#/$defs/<name>"
      return check(value, schema_["$defs"][ref.substr(ref.rfind('/') + 1)], path);
    }
    if (node.contains("properties")) {
      ASSERT_TRUE(value.is_object()) << path;
      std::set<std::string> expected, got;
      for (const auto& key : node["required"]) expected.insert(key.get<std::string>());
      for (const auto& [key, _] : value.items()) got.insert(key);
      EXPECT_EQ(got, expected) << path;
      for (const auto& [key, sub] : node["properties"].items()) {
        if (value.contains(key)) check(value[key], sub, path + "." + key);
      }
    } else if (node.contains("items") && value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) {
        check(value[i], node["items"], path + "[" + std::to_string(i) + "]");
      }
    } else if (node.contains("enum")) {
      bool found = false;
      for (const auto& v : node["enum"]) found |= v == value;
      EXPECT_TRUE(found) << path << " = " << value.dump();
    }
  }
  const json& defs(const std::string& name) { return schema_["$defs"][name]; }

 private:
  json schema_;
};

SchemaChecker load_schema() {
  std::ifstream in(TESSERA_TOPOLOGY_SCHEMA);
  EXPECT_TRUE(in.good()) << TESSERA_TOPOLOGY_SCHEMA;
  return SchemaChecker(json::parse(in, nullptr, false));
}

TEST(Schema, DescribesEveryFieldOfTheXmlTopologyWithMeasurements) {
  TSR_REQUIRE_HWLOC();
  DiscoverOptions options;
  options.hwloc = {HwlocSource::Kind::kXmlFile, test::data_path("two_numa_4gpu.xml")};
  auto topo = discover(options);
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  topo->links[0].measured_bandwidth_gbps = 1;
  topo->ucx.transports.push_back(
      {"posix", "posix", "posix", "memory", "intra-node", 12, 0.1, {"am", "put"}, 5.0, 0.2});
  SchemaChecker checker = load_schema();
  checker.check(json::parse(to_json(*topo)), checker.defs("topology"), "topology");
}

TEST(Schema, DescribesEveryFieldOfAPresetClusterSpec) {
  auto cluster = cluster_preset("dgx-a100-80gb");
  ASSERT_TRUE(cluster.ok());
  SchemaChecker checker = load_schema();
  checker.check(json::parse(cluster_to_json(*cluster)), checker.defs("cluster"), "cluster");
}

}  // namespace
}  // namespace tessera::topo
