// Names, parsers and lookups of the Topology value types.
#include "tessera/topo/topology.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <utility>

namespace tessera::topo {
namespace {

constexpr std::array<std::pair<LinkType, std::string_view>, 7> kLinkTypes = {{
    {LinkType::kSameDevice, "same-device"},
    {LinkType::kVendorLink, "vendor-link"},
    {LinkType::kPcieSwitch, "pcie-switch"},
    {LinkType::kHostBridge, "host-bridge"},
    {LinkType::kNumaCrossing, "numa-crossing"},
    {LinkType::kNetwork, "network"},
    {LinkType::kSharedMemory, "shared-memory"},
}};

constexpr std::array<std::pair<PathClass, std::string_view>, 8> kPathClasses = {{
    {PathClass::kLoc, "LOC"},
    {PathClass::kLink, "LINK"},
    {PathClass::kPix, "PIX"},
    {PathClass::kPxb, "PXB"},
    {PathClass::kPhb, "PHB"},
    {PathClass::kNode, "NODE"},
    {PathClass::kSys, "SYS"},
    {PathClass::kNet, "NET"},
}};

// shared/reference/hardware.md; the domestic chips are plain PCI devices to hwloc.
constexpr std::array<std::pair<uint16_t, std::string_view>, 8> kPciVendors = {{
    {0x10de, "NVIDIA"},
    {0x1002, "AMD"},
    {0x8086, "Intel"},
    {0x19e5, "Huawei"},
    {0x1d94, "Hygon"},
    {0x1ed5, "Moore Threads"},
    {0x1e36, "Enflame"},
    {0x1d22, "Kunlunxin"},
}};

template <typename Vec, typename Field>
auto find_by(Vec& vec, Field field, std::string_view key) -> decltype(&vec[0]) {
  for (auto& item : vec) {
    if (item.*field == key) return &item;
  }
  return nullptr;
}

}  // namespace

std::string_view link_type_name(LinkType type) {
  for (const auto& [t, name] : kLinkTypes) {
    if (t == type) return name;
  }
  return "unknown";
}

std::string_view path_class_name(PathClass path) {
  for (const auto& [p, name] : kPathClasses) {
    if (p == path) return name;
  }
  return "UNKNOWN";
}

std::optional<LinkType> parse_link_type(std::string_view name) {
  for (const auto& [t, n] : kLinkTypes) {
    if (n == name) return t;
  }
  return std::nullopt;
}

std::optional<PathClass> parse_path_class(std::string_view name) {
  for (const auto& [p, n] : kPathClasses) {
    if (n == name) return p;
  }
  return std::nullopt;
}

std::string_view pci_vendor_name(uint16_t vendor_id) {
  for (const auto& [id, name] : kPciVendors) {
    if (id == vendor_id) return name;
  }
  return {};
}

bool is_accelerator_vendor(uint16_t vendor_id) {
  return !pci_vendor_name(vendor_id).empty();
}

std::string normalize_bus_id(std::string_view bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  std::string text(bus_id);
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4) {
    domain = 0;
    if (std::sscanf(text.c_str(), "%x:%x.%x", &bus, &dev, &func) != 3) return text;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, bus, dev, func);
  return out;
}

const PciDevice* Topology::find_pci(std::string_view bus_id) const {
  return find_by(pci_devices, &PciDevice::bus_id, bus_id);
}

const Accelerator* Topology::find_accelerator(std::string_view id) const {
  return find_by(accelerators, &Accelerator::id, id);
}

Link* Topology::find_link(std::string_view a, std::string_view b) {
  for (auto& link : links) {
    if ((link.a == a && link.b == b) || (link.a == b && link.b == a)) return &link;
  }
  return nullptr;
}

const Link* Topology::find_link(std::string_view a, std::string_view b) const {
  return const_cast<Topology*>(this)->find_link(a, b);
}

}  // namespace tessera::topo
