// Cluster specs: presets from public figures, the local probe scaled out, and the JSON form.
#include "tessera/topo/cluster.h"

#include <cmath>

#include "json_reader.h"
#include "tessera/common/untrusted.h"
#include "tessera/topo/links.h"

namespace tessera::topo {
namespace {

using detail::Json;
using detail::JsonReader;

struct Preset {
  const char* name;
  const char* device;
  const char* vendor;
  const char* backend;
  uint16_t pci_vendor;
  double memory_gib, memory_bandwidth_gbps;
  const char* vendor_link;  // what the LINK class means on this system
  double link_gbps;         // per direction, per device pair path
  int packages, cores, numa;
  double host_memory_gib;
  NetworkSpec network;
};

// Public datasheet figures (hardware.md); Ascend and MI250X host details are typical builds.
const Preset kPresets[] = {
    {"dgx-a100-80gb",
     "NVIDIA A100-SXM4-80GB",
     "NVIDIA",
     "cuda",
     0x10de,
     80,
     2039,
     "NVLink3 + NVSwitch",
     300,
     2,
     128,
     2,
     2048,
     {"infiniband", 8, 25, 5, "ConnectX-6 HDR 200 Gb/s (datasheet)"}},
    {"dgx-h100",
     "NVIDIA H100-SXM5-80GB",
     "NVIDIA",
     "cuda",
     0x10de,
     80,
     3350,
     "NVLink4 + NVSwitch",
     450,
     2,
     112,
     2,
     2048,
     {"infiniband", 8, 50, 5, "ConnectX-7 NDR 400 Gb/s (datasheet)"}},
    {"ascend-910b-8",
     "Huawei Ascend 910B",
     "Huawei",
     "ascend",
     0x19e5,
     64,
     1600,
     "HCCS (unverified)",
     56,
     4,
     192,
     4,
     1024,
     {"roce", 8, 25, 6, "8 x 200GbE RoCE (vendor, unverified)"}},
    {"mi250x-8",
     "AMD Instinct MI250X (GCD)",
     "AMD",
     "hip",
     0x1002,
     64,
     1600,
     "xGMI",
     50,
     1,
     64,
     4,
     512,
     {"slingshot", 4, 25, 3, "4 x Slingshot 200 Gb/s (public)"}},
};

Topology preset_topology(const Preset& p) {
  Topology t;
  t.host = {p.name,      std::string("preset:") + p.name,
            p.packages,  p.cores,
            p.cores * 2, static_cast<uint64_t>(p.host_memory_gib * (1ull << 30))};
  for (int n = 0; n < p.numa; ++n) {
    int per = p.cores / p.numa;
    t.numa_nodes.push_back({n,
                            t.host.memory_bytes / p.numa,
                            std::to_string(n * per) + "-" + std::to_string(n * per + per - 1),
                            {}});
  }
  for (int i = 0; i < 8; ++i) {
    Accelerator a;
    a.backend = p.backend;
    a.index = i;
    a.id = a.backend + ":" + std::to_string(i);
    a.name = p.device;
    a.vendor = p.vendor;
    a.pci_vendor_id = p.pci_vendor;
    a.memory_bytes = static_cast<uint64_t>(p.memory_gib * (1ull << 30));
    a.numa_node = i * p.numa / 8;
    a.memory_bandwidth_gbps = p.memory_bandwidth_gbps;
    t.accelerators.push_back(std::move(a));
  }
  for (int i = 0; i < p.network.nics_per_host; ++i) {
    t.nics.push_back(
        {"nic" + std::to_string(i), "openfabrics", "", i * p.numa / p.network.nics_per_host, {}});
  }
  std::string source = std::string("preset:") + p.name + " " + p.vendor_link;
  for (size_t i = 0; i < t.accelerators.size(); ++i) {
    for (size_t j = i + 1; j < t.accelerators.size(); ++j) {
      t.links.push_back({t.accelerators[i].id,
                         t.accelerators[j].id,
                         LinkType::kVendorLink,
                         PathClass::kLink,
                         p.link_gbps,
                         source,
                         {},
                         {}});
    }
  }
  compute_links(t);  // host and NIC links; keeps the vendor links above
  t.ucx.skipped = "ucx: preset, not probed";
  return t;
}

}  // namespace

int ClusterSpec::host_count() const {
  int n = 0;
  for (const auto& g : hosts) n += g.count;
  return n;
}

int ClusterSpec::accelerator_count() const {
  int n = 0;
  for (const auto& g : hosts) n += g.count * static_cast<int>(g.topology.accelerators.size());
  return n;
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Result<ClusterSpec> cluster_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    return ClusterSpec{kSchemaVersion, p.name, {{1, preset_topology(p)}}, p.network};
  }
  std::string names;
  for (const auto& n : cluster_preset_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("cluster preset '" + std::string(name) + "': unknown; presets are " + names);
}

ClusterSpec cluster_from_topology(const Topology& topo, int hosts, std::string name) {
  ClusterSpec c;
  c.name = std::move(name);
  c.hosts.push_back({hosts, topo});
  bool fabric = false;
  for (const auto& n : topo.nics) fabric |= n.type == "openfabrics";
  NetworkSpec& net = c.network;
  net.link = fabric ? "infiniband" : "ethernet";
  net.source = "local probe";
  for (const auto& nic : topo.nics) {
    if (nic.type != (fabric ? "openfabrics" : "network") || nic.pci_bus_id.empty()) continue;
    ++net.nics_per_host;
    for (const auto& tl : topo.ucx.transports) {
      if (tl.device.substr(0, tl.device.find(':')) != nic.name) continue;
      if (tl.bandwidth_gbps > net.bandwidth_gbps_per_nic) {
        net.bandwidth_gbps_per_nic = tl.bandwidth_gbps;
        net.latency_us = tl.latency_us;
        net.source = "ucx declared (" + tl.transport + "/" + tl.device + ")";
      }
    }
  }
  return c;
}

std::string cluster_to_json(const ClusterSpec& c) {
  Json hosts = Json::array();
  for (const auto& g : c.hosts) {
    hosts.push_back({{"count", g.count}, {"topology", detail::topology_to_json(g.topology)}});
  }
  Json out = {{"version", c.version},
              {"name", c.name},
              {"hosts", hosts},
              {"network",
               {{"link", c.network.link},
                {"nics_per_host", c.network.nics_per_host},
                {"bandwidth_gbps_per_nic", c.network.bandwidth_gbps_per_nic},
                {"latency_us", c.network.latency_us},
                {"source", c.network.source}}}};
  return out.dump(2) + "\n";
}

Result<ClusterSpec> cluster_from_json(std::string_view text, std::string_view source) {
  JsonReader r(source);
  Json j;
  ClusterSpec c;
  if (!r.parse(text, j) || !r.object(j, "")) return r.status();
  if (r.get(j, "", "version", c.version) && c.version != kSchemaVersion) {
    r.fail("version", std::to_string(kSchemaVersion));
  }
  r.get(j, "", "name", c.name);
  const Json* hosts = nullptr;
  if (r.array(j, "", "hosts", hosts)) {
    if (hosts->empty()) r.fail("hosts", "at least one host group");
    for (size_t i = 0; i < hosts->size() && r.ok(); ++i) {
      std::string p = JsonReader::index("hosts", i);
      HostGroup g;
      if (!r.object((*hosts)[i], p) || !r.get((*hosts)[i], p, "count", g.count)) break;
      r.check(g.count >= 1 && g.count <= (1 << 24), p + ".count", "an integer in 1..16777216");
      auto topo = (*hosts)[i].find("topology");
      if (topo == (*hosts)[i].end()) {
        r.fail(p + ".topology", "an object (missing)");
      } else {
        detail::read_topology(r, *topo, p + ".topology", g.topology);
      }
      c.hosts.push_back(std::move(g));
    }
  }
  auto net = j.find("network");
  if (net == j.end()) {
    r.fail("network", "an object (missing)");
  } else if (r.object(*net, "network")) {
    r.get(*net, "network", "link", c.network.link);
    r.get(*net, "network", "nics_per_host", c.network.nics_per_host);
    r.get(*net, "network", "bandwidth_gbps_per_nic", c.network.bandwidth_gbps_per_nic);
    r.get(*net, "network", "latency_us", c.network.latency_us);
    r.get(*net, "network", "source", c.network.source);
    r.check(c.network.nics_per_host >= 0, "network.nics_per_host", "an integer >= 0");
    r.check(
        c.network.bandwidth_gbps_per_nic >= 0 && std::isfinite(c.network.bandwidth_gbps_per_nic),
        "network.bandwidth_gbps_per_nic", "a number >= 0");
    r.check(c.network.latency_us >= 0 && std::isfinite(c.network.latency_us), "network.latency_us",
            "a number >= 0");
  }
  if (!r.ok()) return r.status();
  return c;
}

Result<ClusterSpec> load_cluster(const std::string& preset_or_path) {
  for (const auto& name : cluster_preset_names()) {
    if (name == preset_or_path) return cluster_preset(name);
  }
  Result<std::string> text = read_text_file(preset_or_path, kMaxConfigFileBytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return not_found(preset_or_path + ": neither a cluster preset nor a readable file");
  }
  if (!text.ok()) return text.status();
  return cluster_from_json(*text, preset_or_path);
}

}  // namespace tessera::topo
