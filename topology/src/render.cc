// Text and Graphviz output.
#include "tessera/topo/render.h"

#include <cstdio>
#include <sstream>

#include "tessera/common/untrusted.h"

namespace tessera::topo {
namespace {

std::string gb(double value) {
  char out[32];
  std::snprintf(out, sizeof(out), "%.1f", value);
  return out;
}

std::string gib(uint64_t bytes) {
  return gb(bytes / double(1ull << 30)) + " GiB";
}

std::string numa_text(int numa) {
  return numa < 0 ? "-" : std::to_string(numa);
}

// Names come from the machine or a replayed file: control characters are escaped (printable()).
std::string pad(const std::string& raw, size_t width) {
  const std::string text = printable(raw);
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

}  // namespace

std::string summary_text(const Topology& t) {
  std::ostringstream out;
  out << "Host " << (t.host.hostname.empty() ? "(unnamed)" : printable(t.host.hostname)) << " ["
      << printable(t.host.source) << "]: " << t.host.packages << " packages, " << t.host.cores
      << " cores, " << t.host.pus << " PUs, " << gib(t.host.memory_bytes) << "\n";
  for (const auto& n : t.numa_nodes) {
    out << "  NUMA " << n.os_index << ": " << gib(n.memory_bytes) << ", cpus "
        << printable(n.cpuset);
    if (n.measured_memory_bandwidth_gbps) {
      out << ", measured copy " << gb(*n.measured_memory_bandwidth_gbps) << " GB/s";
    }
    out << "\n";
  }
  out << "Accelerators: " << t.accelerators.size() << "\n";
  for (const auto& a : t.accelerators) {
    out << "  " << pad(a.id, 10) << pad(a.name, 28) << pad(a.vendor, 10)
        << pad(a.pci_bus_id.empty() ? "-" : a.pci_bus_id, 14) << "numa " << numa_text(a.numa_node);
    if (a.memory_bytes) out << ", " << gib(a.memory_bytes);
    if (!a.os_devices.empty()) {
      out << ", os:";
      for (const auto& os : a.os_devices) out << " " << printable(os);
    }
    out << "\n";
  }
  out << "NICs: " << t.nics.size() << "\n";
  for (const auto& n : t.nics) {
    out << "  " << pad(n.name, 10) << pad(n.type, 12)
        << pad(n.pci_bus_id.empty() ? "-" : n.pci_bus_id, 14) << "numa " << numa_text(n.numa_node);
    if (!n.ucx_transports.empty()) {
      out << ", ucx:";
      for (const auto& tl : n.ucx_transports) out << " " << printable(tl);
    }
    out << "\n";
  }
  if (t.ucx.available) {
    out << "UCX " << printable(t.ucx.version) << ": " << t.ucx.transports.size()
        << " transports, memory types:";
    for (const auto& m : t.ucx.memory_types) out << " " << printable(m);
    out << "\n";
    for (const auto& tl : t.ucx.transports) {
      out << "  " << pad(tl.transport + "/" + tl.device, 22) << pad(tl.device_type, 12)
          << "declared " << gb(tl.bandwidth_gbps) << " GB/s, " << gb(tl.latency_us) << " us";
      if (tl.measured_bandwidth_gbps) {
        out << "; measured " << gb(*tl.measured_bandwidth_gbps) << " GB/s";
      }
      if (tl.measured_latency_us) out << ", " << gb(*tl.measured_latency_us) << " us";
      out << "\n";
    }
  }
  if (!t.skipped.empty()) {
    out << "Skipped:\n";
    for (const auto& s : t.skipped) out << "  " << printable(s) << "\n";
  }
  return out.str();
}

std::string matrix_text(const Topology& t) {
  std::vector<std::string> ids;
  std::vector<int> numa;
  for (const auto& a : t.accelerators) {
    ids.push_back(a.id);
    numa.push_back(a.numa_node);
  }
  for (const auto& n : t.nics) {
    ids.push_back("nic:" + n.name);
    numa.push_back(n.numa_node);
  }
  if (ids.empty()) return "No accelerators or NICs: no device matrix.\n";
  size_t width = 6;
  for (const auto& id : ids) width = std::max(width, id.size() + 2);
  std::ostringstream out;
  out << pad("", width);
  for (const auto& id : ids) out << pad(id, width);
  out << "NUMA  CPUS\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    out << pad(ids[i], width);
    for (size_t j = 0; j < ids.size(); ++j) {
      std::string cell = "-";
      if (i == j) {
        cell = "X";
      } else if (const Link* l = t.find_link(ids[i], ids[j])) {
        cell = std::string(path_class_name(l->path));
      }
      out << pad(cell, width);
    }
    std::string cpus = "-";
    for (const auto& node : t.numa_nodes) {
      if (node.os_index == numa[i]) cpus = printable(node.cpuset);
    }
    out << pad(numa_text(numa[i]), 6) << cpus << "\n";
  }
  out << "\nLegend:\n"
         "  X    = self\n"
         "  LINK = vendor link (NVLink, xGMI, HCCS, ...)\n"
         "  PIX  = at most one PCIe switch\n"
         "  PXB  = several PCIe switches, no host bridge\n"
         "  PHB  = a PCIe host bridge (root complex)\n"
         "  NODE = across host bridges within one NUMA node\n"
         "  SYS  = across NUMA nodes (the SMP interconnect)\n"
         "  NET  = through the network\n"
         "  -    = not linked (different backends, or a NIC-NIC pair)\n";
  return out.str();
}

std::string dot_text(const Topology& t) {
  std::ostringstream out;
  // Quoted Graphviz ids and labels: names must not end the quote or carry control characters.
  auto q = [](const std::string& s) {
    std::string quoted = "\"";
    for (const char c : printable(s)) quoted += c == '"' ? std::string("\\\"") : std::string(1, c);
    return quoted + "\"";
  };
  out << "graph topology {\n  rankdir=TB;\n  node [fontname=\"Helvetica\"];\n";
  for (const auto& n : t.numa_nodes) {
    out << "  " << q("numa:" + std::to_string(n.os_index)) << " [shape=box, label="
        << q("NUMA " + std::to_string(n.os_index) + "\\n" + gib(n.memory_bytes)) << "];\n";
  }
  for (const auto& b : t.pci_bridges) {
    out << "  " << q(b.id)
        << " [shape=diamond, label=" << q(b.kind == "host" ? "host bridge" : b.id) << "];\n";
    std::string up = b.parent.empty()
                         ? (b.numa_node >= 0 ? "numa:" + std::to_string(b.numa_node) : "")
                         : b.parent;
    if (!up.empty()) out << "  " << q(up) << " -- " << q(b.id) << " [color=gray];\n";
  }
  auto attach = [&](const std::string& id, const std::string& bus, int numa_node) {
    const PciDevice* pci = bus.empty() ? nullptr : t.find_pci(bus);
    std::string up = pci && !pci->parent.empty() ? pci->parent
                     : numa_node >= 0            ? "numa:" + std::to_string(numa_node)
                                                 : "";
    if (!up.empty()) out << "  " << q(up) << " -- " << q(id) << " [color=gray];\n";
  };
  for (const auto& a : t.accelerators) {
    out << "  " << q(a.id)
        << " [shape=box, style=filled, fillcolor=lightblue, label=" << q(a.id + "\\n" + a.name)
        << "];\n";
    attach(a.id, a.pci_bus_id, a.numa_node);
  }
  for (const auto& n : t.nics) {
    std::string id = "nic:" + n.name;
    out << "  " << q(id) << " [shape=ellipse, style=filled, fillcolor=lightyellow];\n";
    attach(id, n.pci_bus_id, n.numa_node);
  }
  for (const auto& l : t.links) {
    if (l.a.rfind("numa:", 0) == 0) continue;  // host links are drawn by the tree above
    std::string label = std::string(path_class_name(l.path)) + " " + gb(l.bandwidth_gbps) + " GB/s";
    if (l.measured_bandwidth_gbps) label += "\\nmeasured " + gb(*l.measured_bandwidth_gbps);
    out << "  " << q(l.a) << " -- " << q(l.b) << " [style=dashed, label=" << q(label) << "];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tessera::topo
