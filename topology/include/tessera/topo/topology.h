// The Topology value: what one host is made of (packages, cores, NUMA nodes, PCI tree, OS devices),
// its accelerators and NICs, the UCX transports that reach them, and the links between devices
// with where each figure came from. A plain value: copyable, comparable, serialisable (json.h),
// built by discovery (discover.h), from hwloc XML or synthetic strings, or from JSON. Bandwidths
// are GB/s (1e9 bytes/s) per direction, latencies microseconds, memory bytes. Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::topo {

// Version of the JSON form (docs/TOPOLOGY.md). Bumped on any incompatible change.
inline constexpr int kSchemaVersion = 1;

struct NumaNode {
  int os_index = 0;
  uint64_t memory_bytes = 0;
  std::string cpuset;                                    // hwloc list syntax, "0-15,32-47"
  std::optional<double> measured_memory_bandwidth_gbps;  // --measure: single-thread copy
  bool operator==(const NumaNode&) const = default;
};

// A PCI bridge: "host" bridges are the roots (one per root complex), "pci" bridges are switch
// ports.
struct PciBridge {
  std::string id;      // bus id of a pci bridge; "hostbridge<N>" for a host bridge
  std::string kind;    // "host" | "pci"
  std::string parent;  // id of the upstream bridge; empty for a host bridge
  int numa_node = -1;  // locality of the root complex; -1 unknown
  bool operator==(const PciBridge&) const = default;
};

struct PciDevice {
  std::string bus_id;  // "dddd:bb:dd.f", lower-case hex
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;  // PCI class and subclass, e.g. 0x0302 (3D controller)
  std::string name;       // hwloc's vendor/device names when known
  std::string parent;     // id of the upstream bridge; empty when attached directly
  int numa_node = -1;     // -1 unknown
  double link_gbps = 0;   // hwloc's PCI link speed (GB/s); 0 unknown
  bool operator==(const PciDevice&) const = default;
};

// What the OS exposes on top of a PCI device (or alone): "gpu", "network", "openfabrics",
// "coproc", "dma", "storage", "memory".
struct OsDevice {
  std::string name;  // "cuda0", "eth0", "mlx5_0", "nvme0n1"
  std::string type;
  std::string subtype;     // hwloc's subtype when given ("CUDA", "OpenCL", ...)
  std::string pci_bus_id;  // empty when not on PCI
  bool operator==(const OsDevice&) const = default;
};

struct Accelerator {
  std::string id;          // "cuda:0" from a backend; "pci:0" when only hwloc saw it
  std::string backend;     // "cuda", "host", ...; empty when only hwloc saw it
  int index = 0;           // backend device index
  std::string name;        // backend's name, else hwloc's PCI name
  std::string vendor;      // from the PCI vendor table, else the backend's
  std::string pci_bus_id;  // empty for non-PCI devices (the host backend)
  uint16_t pci_vendor_id = 0;
  uint64_t memory_bytes = 0;
  int numa_node = -1;
  double memory_bandwidth_gbps = 0;     // backend's declared figure; 0 unknown
  std::vector<std::string> os_devices;  // hwloc OS devices on the same PCI function
  bool operator==(const Accelerator&) const = default;
};

// One UCX transport on one device (what `ucx_info -d` lists).
struct UcxTransport {
  std::string component;  // "ib", "tcp", "posix"
  std::string memory_domain;
  std::string transport;                // "rc_mlx5", "tcp", "posix"
  std::string device;                   // "mlx5_0:1", "eth0", "memory"
  std::string device_type;              // "network", "intra-node", "loopback", "accelerator"
  double bandwidth_gbps = 0;            // declared by UCX (dedicated + shared), GB/s
  double latency_us = 0;                // declared by UCX (overhead)
  std::vector<std::string> operations;  // what the interface can do: "am", "put", "get"
  std::optional<double> measured_bandwidth_gbps;
  std::optional<double> measured_latency_us;
  bool operator==(const UcxTransport&) const = default;
};

struct UcxInfo {
  bool available = false;
  std::string version;
  std::string skipped;                    // why UCX was not probed; empty when it was
  std::vector<std::string> memory_types;  // "host", "cuda", "rocm", ...
  std::vector<UcxTransport> transports;
  bool operator==(const UcxInfo&) const = default;
};

struct Nic {
  std::string name;        // OS name: "eth0", "mlx5_0"
  std::string type;        // "network" | "openfabrics"
  std::string pci_bus_id;  // empty for virtual interfaces
  int numa_node = -1;
  std::vector<std::string> ucx_transports;  // "tcp/eth0", "rc_mlx5/mlx5_0:1"
  bool operator==(const Nic&) const = default;
};

enum class LinkType {
  kSameDevice,
  kVendorLink,
  kPcieSwitch,
  kHostBridge,
  kNumaCrossing,
  kNetwork,
  kSharedMemory
};
// NCCL-style: LOC same device, LINK vendor link (NVLink/xGMI/HCCS), PIX one PCIe switch, PXB
// several switches, PHB through a host bridge, NODE across host bridges in one NUMA node, SYS
// across NUMA nodes, NET through the network.
enum class PathClass { kLoc, kLink, kPix, kPxb, kPhb, kNode, kSys, kNet };

std::string_view link_type_name(LinkType type);    // "same-device", "vendor-link", ...
std::string_view path_class_name(PathClass path);  // "LOC", "LINK", "PIX", ...
std::optional<LinkType> parse_link_type(std::string_view name);
std::optional<PathClass> parse_path_class(std::string_view name);

struct Link {
  std::string a, b;  // endpoint ids: accelerator ids, "nic:<name>", "numa:<os_index>"
  LinkType type = LinkType::kHostBridge;
  PathClass path = PathClass::kPhb;
  double bandwidth_gbps = 0;     // declared; 0 unknown
  std::string bandwidth_source;  // "vendor-api", "hwloc", "ucx", "defaults", "unknown"
  std::optional<double> measured_bandwidth_gbps;
  std::optional<double> measured_latency_us;
  bool operator==(const Link&) const = default;
};

struct Host {
  std::string hostname;
  std::string source;  // "live", "hwloc-xml:<file>", "synthetic:<desc>", "json:<file>"
  int packages = 0;
  int cores = 0;
  int pus = 0;
  uint64_t memory_bytes = 0;
  bool operator==(const Host&) const = default;
};

struct Topology {
  int version = kSchemaVersion;
  Host host;
  std::vector<NumaNode> numa_nodes;
  std::vector<PciBridge> pci_bridges;
  std::vector<PciDevice> pci_devices;
  std::vector<OsDevice> os_devices;
  std::vector<Accelerator> accelerators;
  std::vector<Nic> nics;
  UcxInfo ucx;
  std::vector<Link> links;
  std::vector<std::string> skipped;  // one line per part not probed, with the reason

  const PciDevice* find_pci(std::string_view bus_id) const;
  const Accelerator* find_accelerator(std::string_view id) const;
  Link* find_link(std::string_view a, std::string_view b);
  const Link* find_link(std::string_view a, std::string_view b) const;
  bool operator==(const Topology&) const = default;
};

// The chip vendor for a PCI vendor id ("NVIDIA", "Huawei", "Hygon", ...; hardware.md), or empty.
std::string_view pci_vendor_name(uint16_t vendor_id);
// true for the vendors whose PCI functions of class display (0x03) or processing accelerator
// (0x12) are treated as accelerators.
bool is_accelerator_vendor(uint16_t vendor_id);
// Lower-cases and pads "0:3:0.0"-style ids to "0000:03:00.0"; returns the input when unparsable.
std::string normalize_bus_id(std::string_view bus_id);

}  // namespace tessera::topo
