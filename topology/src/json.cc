// Topology <-> JSON (docs/TOPOLOGY.md). Writing and reading are kept side by side per type so a new
// field is added to both in one place.
#include "tessera/topo/json.h"

#include <cmath>

#include "json_reader.h"
#include "tessera/common/untrusted.h"

namespace tessera::topo {
namespace {

using detail::hex16;
using detail::Json;
using detail::JsonReader;

Json opt(const std::optional<double>& v) {
  return v ? Json(*v) : Json(nullptr);
}

// Reads every element of array `key` with `fn(element, path, out_item)`.
template <typename T, typename Fn>
void read_array(JsonReader& r, const Json& parent, const std::string& path, const char* key,
                std::vector<T>& out, Fn fn) {
  const Json* arr = nullptr;
  if (!r.array(parent, path, key, arr)) return;
  out.clear();
  for (size_t i = 0; i < arr->size() && r.ok(); ++i) {
    std::string p = JsonReader::index(JsonReader::join(path, key), i);
    if (!r.object((*arr)[i], p)) return;
    T item;
    fn((*arr)[i], p, item);
    out.push_back(std::move(item));
  }
}

// Counts and figures a replayed file may not make negative (or infinite): -1 is "unknown" only
// for NUMA node fields.
void at_least(JsonReader& r, const std::string& path, const char* key, int64_t v, int64_t min) {
  r.check(v >= min, JsonReader::join(path, key), "an integer >= " + std::to_string(min));
}
void non_negative(JsonReader& r, const std::string& path, const char* key, double v) {
  r.check(v >= 0 && std::isfinite(v), JsonReader::join(path, key), "a number >= 0");
}
void non_negative(JsonReader& r, const std::string& path, const char* key,
                  const std::optional<double>& v) {
  if (v) non_negative(r, path, key, *v);
}

// A link endpoint must be something of this topology (links.h): an accelerator id,
// "nic:<name>" of a listed NIC or "numa:<index>" of a listed NUMA node (numa:0 when none is).
bool known_endpoint(const Topology& t, const std::string& id) {
  if (t.find_accelerator(id) != nullptr) return true;
  for (const auto& n : t.nics) {
    if (id == "nic:" + n.name) return true;
  }
  if (t.numa_nodes.empty() && id == "numa:0") return true;
  for (const auto& n : t.numa_nodes) {
    if (id == "numa:" + std::to_string(n.os_index)) return true;
  }
  for (const auto& a : t.accelerators) {
    if (a.numa_node >= 0 && id == "numa:" + std::to_string(a.numa_node)) return true;
  }
  return false;
}

Json host_json(const Host& h) {
  return {{"hostname", h.hostname}, {"source", h.source}, {"packages", h.packages},
          {"cores", h.cores},       {"pus", h.pus},       {"memory_bytes", h.memory_bytes}};
}

Json ucx_json(const UcxInfo& u) {
  Json tls = Json::array();
  for (const auto& t : u.transports) {
    tls.push_back({{"component", t.component},
                   {"memory_domain", t.memory_domain},
                   {"transport", t.transport},
                   {"device", t.device},
                   {"device_type", t.device_type},
                   {"bandwidth_gbps", t.bandwidth_gbps},
                   {"latency_us", t.latency_us},
                   {"operations", t.operations},
                   {"measured_bandwidth_gbps", opt(t.measured_bandwidth_gbps)},
                   {"measured_latency_us", opt(t.measured_latency_us)}});
  }
  return {{"available", u.available},
          {"version", u.version},
          {"skipped", u.skipped},
          {"memory_types", u.memory_types},
          {"transports", tls}};
}

void read_ucx(JsonReader& r, const Json& j, const std::string& p, UcxInfo& u) {
  if (!r.object(j, p)) return;
  r.get(j, p, "available", u.available);
  r.get(j, p, "version", u.version);
  r.get(j, p, "skipped", u.skipped);
  r.get(j, p, "memory_types", u.memory_types);
  read_array(r, j, p, "transports", u.transports, [&](const Json& e, auto& q, UcxTransport& t) {
    r.get(e, q, "component", t.component);
    r.get(e, q, "memory_domain", t.memory_domain);
    r.get(e, q, "transport", t.transport);
    r.get(e, q, "device", t.device);
    r.get(e, q, "device_type", t.device_type);
    r.get(e, q, "bandwidth_gbps", t.bandwidth_gbps);
    r.get(e, q, "latency_us", t.latency_us);
    r.get(e, q, "operations", t.operations);
    r.get(e, q, "measured_bandwidth_gbps", t.measured_bandwidth_gbps);
    r.get(e, q, "measured_latency_us", t.measured_latency_us);
    non_negative(r, q, "bandwidth_gbps", t.bandwidth_gbps);
    non_negative(r, q, "latency_us", t.latency_us);
    non_negative(r, q, "measured_bandwidth_gbps", t.measured_bandwidth_gbps);
    non_negative(r, q, "measured_latency_us", t.measured_latency_us);
  });
}

}  // namespace

using detail::read_topology;
using detail::topology_to_json;

Json detail::topology_to_json(const Topology& t) {
  Json numa = Json::array(), bridges = Json::array(), pci = Json::array(), os = Json::array(),
       accs = Json::array(), nics = Json::array(), links = Json::array();
  for (const auto& n : t.numa_nodes) {
    numa.push_back({{"os_index", n.os_index},
                    {"memory_bytes", n.memory_bytes},
                    {"cpuset", n.cpuset},
                    {"measured_memory_bandwidth_gbps", opt(n.measured_memory_bandwidth_gbps)}});
  }
  for (const auto& b : t.pci_bridges) {
    bridges.push_back(
        {{"id", b.id}, {"kind", b.kind}, {"parent", b.parent}, {"numa_node", b.numa_node}});
  }
  for (const auto& d : t.pci_devices) {
    pci.push_back({{"bus_id", d.bus_id},
                   {"vendor_id", hex16(d.vendor_id)},
                   {"device_id", hex16(d.device_id)},
                   {"class_id", hex16(d.class_id)},
                   {"name", d.name},
                   {"parent", d.parent},
                   {"numa_node", d.numa_node},
                   {"link_gbps", d.link_gbps}});
  }
  for (const auto& d : t.os_devices) {
    os.push_back(
        {{"name", d.name}, {"type", d.type}, {"subtype", d.subtype}, {"pci_bus_id", d.pci_bus_id}});
  }
  for (const auto& a : t.accelerators) {
    accs.push_back({{"id", a.id},
                    {"backend", a.backend},
                    {"index", a.index},
                    {"name", a.name},
                    {"vendor", a.vendor},
                    {"pci_bus_id", a.pci_bus_id},
                    {"pci_vendor_id", hex16(a.pci_vendor_id)},
                    {"memory_bytes", a.memory_bytes},
                    {"numa_node", a.numa_node},
                    {"memory_bandwidth_gbps", a.memory_bandwidth_gbps},
                    {"os_devices", a.os_devices}});
  }
  for (const auto& n : t.nics) {
    nics.push_back({{"name", n.name},
                    {"type", n.type},
                    {"pci_bus_id", n.pci_bus_id},
                    {"numa_node", n.numa_node},
                    {"ucx_transports", n.ucx_transports}});
  }
  for (const auto& l : t.links) {
    links.push_back({{"a", l.a},
                     {"b", l.b},
                     {"type", link_type_name(l.type)},
                     {"path", path_class_name(l.path)},
                     {"bandwidth_gbps", l.bandwidth_gbps},
                     {"bandwidth_source", l.bandwidth_source},
                     {"measured_bandwidth_gbps", opt(l.measured_bandwidth_gbps)},
                     {"measured_latency_us", opt(l.measured_latency_us)}});
  }
  Json out = {{"version", t.version},   {"host", host_json(t.host)},
              {"numa_nodes", numa},     {"pci_bridges", bridges},
              {"pci_devices", pci},     {"os_devices", os},
              {"accelerators", accs},   {"nics", nics},
              {"ucx", ucx_json(t.ucx)}, {"links", links},
              {"skipped", t.skipped}};
  return out;
}

std::string to_json(const Topology& t) {
  return topology_to_json(t).dump(2) + "\n";
}

void detail::read_topology(JsonReader& r, const Json& j, const std::string& root, Topology& t) {
  if (!r.object(j, root)) return;
  if (!r.get(j, root, "version", t.version)) return;
  if (t.version != kSchemaVersion) {
    r.fail(JsonReader::join(root, "version"),
           std::to_string(kSchemaVersion) + " (this Tessera reads topology schema " +
               std::to_string(kSchemaVersion) + ", the file has " + std::to_string(t.version) +
               ")");
    return;
  }
  const std::string host_path = JsonReader::join(root, "host");
  auto hj = j.find("host");
  if (hj == j.end()) {
    r.fail(host_path, "an object (missing)");
  } else if (r.object(*hj, host_path)) {
    r.get(*hj, host_path, "hostname", t.host.hostname);
    r.get(*hj, host_path, "source", t.host.source);
    r.get(*hj, host_path, "packages", t.host.packages);
    r.get(*hj, host_path, "cores", t.host.cores);
    r.get(*hj, host_path, "pus", t.host.pus);
    r.get(*hj, host_path, "memory_bytes", t.host.memory_bytes);
    at_least(r, host_path, "packages", t.host.packages, 0);
    at_least(r, host_path, "cores", t.host.cores, 0);
    at_least(r, host_path, "pus", t.host.pus, 0);
  }
  read_array(r, j, root, "numa_nodes", t.numa_nodes, [&](const Json& e, auto& p, NumaNode& n) {
    r.get(e, p, "os_index", n.os_index);
    r.get(e, p, "memory_bytes", n.memory_bytes);
    r.get(e, p, "cpuset", n.cpuset);
    r.get(e, p, "measured_memory_bandwidth_gbps", n.measured_memory_bandwidth_gbps);
    at_least(r, p, "os_index", n.os_index, 0);
    non_negative(r, p, "measured_memory_bandwidth_gbps", n.measured_memory_bandwidth_gbps);
  });
  read_array(r, j, root, "pci_bridges", t.pci_bridges, [&](const Json& e, auto& p, PciBridge& b) {
    r.get(e, p, "id", b.id);
    r.get(e, p, "kind", b.kind);
    r.get(e, p, "parent", b.parent);
    r.get(e, p, "numa_node", b.numa_node);
    at_least(r, p, "numa_node", b.numa_node, -1);
  });
  read_array(r, j, root, "pci_devices", t.pci_devices, [&](const Json& e, auto& p, PciDevice& d) {
    r.get(e, p, "bus_id", d.bus_id);
    r.get_hex16(e, p, "vendor_id", d.vendor_id);
    r.get_hex16(e, p, "device_id", d.device_id);
    r.get_hex16(e, p, "class_id", d.class_id);
    r.get(e, p, "name", d.name);
    r.get(e, p, "parent", d.parent);
    r.get(e, p, "numa_node", d.numa_node);
    r.get(e, p, "link_gbps", d.link_gbps);
    at_least(r, p, "numa_node", d.numa_node, -1);
    non_negative(r, p, "link_gbps", d.link_gbps);
  });
  read_array(r, j, root, "os_devices", t.os_devices, [&](const Json& e, auto& p, OsDevice& d) {
    r.get(e, p, "name", d.name);
    r.get(e, p, "type", d.type);
    r.get(e, p, "subtype", d.subtype);
    r.get(e, p, "pci_bus_id", d.pci_bus_id);
  });
  read_array(r, j, root, "accelerators", t.accelerators,
             [&](const Json& e, auto& p, Accelerator& a) {
               r.get(e, p, "id", a.id);
               r.get(e, p, "backend", a.backend);
               r.get(e, p, "index", a.index);
               r.get(e, p, "name", a.name);
               r.get(e, p, "vendor", a.vendor);
               r.get(e, p, "pci_bus_id", a.pci_bus_id);
               r.get_hex16(e, p, "pci_vendor_id", a.pci_vendor_id);
               r.get(e, p, "memory_bytes", a.memory_bytes);
               r.get(e, p, "numa_node", a.numa_node);
               r.get(e, p, "memory_bandwidth_gbps", a.memory_bandwidth_gbps);
               r.get(e, p, "os_devices", a.os_devices);
               at_least(r, p, "index", a.index, 0);
               at_least(r, p, "numa_node", a.numa_node, -1);
               non_negative(r, p, "memory_bandwidth_gbps", a.memory_bandwidth_gbps);
             });
  read_array(r, j, root, "nics", t.nics, [&](const Json& e, auto& p, Nic& n) {
    r.get(e, p, "name", n.name);
    r.get(e, p, "type", n.type);
    r.get(e, p, "pci_bus_id", n.pci_bus_id);
    r.get(e, p, "numa_node", n.numa_node);
    r.get(e, p, "ucx_transports", n.ucx_transports);
    at_least(r, p, "numa_node", n.numa_node, -1);
  });
  auto uj = j.find("ucx");
  if (uj == j.end()) {
    r.fail(JsonReader::join(root, "ucx"), "an object (missing)");
  } else {
    read_ucx(r, *uj, JsonReader::join(root, "ucx"), t.ucx);
  }
  read_array(r, j, root, "links", t.links, [&](const Json& e, auto& p, Link& l) {
    std::string type, path;
    r.get(e, p, "a", l.a);
    r.get(e, p, "b", l.b);
    if (r.get(e, p, "type", type)) {
      if (auto v = parse_link_type(type)) {
        l.type = *v;
      } else {
        r.fail(p + ".type",
               "one of same-device, vendor-link, pcie-switch, host-bridge, "
               "numa-crossing, network, shared-memory");
      }
    }
    if (r.get(e, p, "path", path)) {
      if (auto v = parse_path_class(path)) {
        l.path = *v;
      } else {
        r.fail(p + ".path", "one of LOC, LINK, PIX, PXB, PHB, NODE, SYS, NET");
      }
    }
    r.get(e, p, "bandwidth_gbps", l.bandwidth_gbps);
    r.get(e, p, "bandwidth_source", l.bandwidth_source);
    r.get(e, p, "measured_bandwidth_gbps", l.measured_bandwidth_gbps);
    r.get(e, p, "measured_latency_us", l.measured_latency_us);
    non_negative(r, p, "bandwidth_gbps", l.bandwidth_gbps);
    non_negative(r, p, "measured_bandwidth_gbps", l.measured_bandwidth_gbps);
    non_negative(r, p, "measured_latency_us", l.measured_latency_us);
    for (const auto* end : {&l.a, &l.b}) {
      r.check(!r.ok() || known_endpoint(t, *end), p + (end == &l.a ? ".a" : ".b"),
              "an accelerator id, nic:<name> or numa:<index> of this topology, got '" +
                  printable(*end) + "'");
    }
  });
  r.get(j, root, "skipped", t.skipped);
}

Result<Topology> from_json(std::string_view text, std::string_view source) {
  JsonReader r(source);
  Json j;
  Topology t;
  if (r.parse(text, j)) read_topology(r, j, "", t);
  if (!r.ok()) return r.status();
  return t;
}

Result<Topology> load_json_file(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxConfigFileBytes));
  return from_json(text, path);
}

}  // namespace tessera::topo
