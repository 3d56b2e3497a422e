// hwloc half of discovery: host, NUMA nodes, PCI tree, OS devices, PCI-only accelerators, NICs.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "tessera/topo/discover.h"

#if TESSERA_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace tessera::topo {

bool have_hwloc() {
  return TESSERA_HAVE_HWLOC != 0;
}

#if TESSERA_HAVE_HWLOC
namespace {

std::string bus_id_of(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char out[32];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain), pci.bus,
                pci.dev, pci.func);
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  return value ? value : "";
}

std::string osdev_type_name(hwloc_obj_osdev_type_t type) {
  switch (type) {
    case HWLOC_OBJ_OSDEV_GPU: return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK: return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS: return "openfabrics";
    case HWLOC_OBJ_OSDEV_COPROC: return "coproc";
    case HWLOC_OBJ_OSDEV_DMA: return "dma";
    case HWLOC_OBJ_OSDEV_BLOCK: return "storage";
    default: return "other";
  }
}

// Owns an hwloc topology for the duration of one discovery.
class HwlocHandle {
 public:
  HwlocHandle() { hwloc_topology_init(&topo_); }
  ~HwlocHandle() { hwloc_topology_destroy(topo_); }
  HwlocHandle(const HwlocHandle&) = delete;
  HwlocHandle& operator=(const HwlocHandle&) = delete;
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

class Walker {
 public:
  Walker(hwloc_topology_t t, Topology& topo) : t_(t), topo_(topo) {
    numa_total_ = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_NUMANODE);
  }

  void run() {
    host();
    numa();
    bridges();
    pci_devices();
    os_devices();
    accelerators_and_nics();
    vendor_links("NVLinkBandwidth");
    vendor_links("XGMIBandwidth");
  }

 private:
  // The NUMA node of an I/O object: its first non-I/O ancestor's, when that is one node.
  int numa_of(hwloc_obj_t obj) const {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t_, obj);
    if (!anc || !anc->nodeset) return -1;
    if (hwloc_bitmap_weight(anc->nodeset) == 1) return hwloc_bitmap_first(anc->nodeset);
    return numa_total_ == 1 ? hwloc_bitmap_first(anc->nodeset) : -1;
  }

  std::string parent_id(hwloc_obj_t obj) const {
    auto it = ids_.find(obj->parent);
    return it == ids_.end() ? "" : it->second;
  }

  void host() {
    hwloc_obj_t root = hwloc_get_root_obj(t_);
    topo_.host.hostname = info(root, "HostName");
    topo_.host.packages = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_PACKAGE);
    topo_.host.cores = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_CORE);
    topo_.host.pus = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_PU);
    topo_.host.memory_bytes = root->total_memory;
  }

  void numa() {
    for (int i = 0; i < numa_total_; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(t_, HWLOC_OBJ_NUMANODE, i);
      NumaNode node;
      node.os_index = static_cast<int>(obj->os_index);
      node.memory_bytes = obj->attr->numanode.local_memory;
      char* list = nullptr;
      hwloc_bitmap_list_asprintf(&list, obj->cpuset);
      node.cpuset = list ? list : "";
      std::free(list);
      topo_.numa_nodes.push_back(std::move(node));
    }
  }

  // Bridges come parent-first in hwloc's traversal, so parents have ids before their children.
  void bridges() {
    int host_bridges = 0;
    for (hwloc_obj_t obj = hwloc_get_next_bridge(t_, nullptr); obj;
         obj = hwloc_get_next_bridge(t_, obj)) {
      PciBridge bridge;
      if (obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
        bridge.id = "hostbridge" + std::to_string(host_bridges++);
        bridge.kind = "host";
      } else {
        bridge.id = bus_id_of(obj->attr->bridge.upstream.pci);
        bridge.kind = "pci";
        bridge.parent = parent_id(obj);
      }
      bridge.numa_node = numa_of(obj);
      ids_[obj] = bridge.id;
      topo_.pci_bridges.push_back(std::move(bridge));
    }
  }

  void pci_devices() {
    for (hwloc_obj_t obj = hwloc_get_next_pcidev(t_, nullptr); obj;
         obj = hwloc_get_next_pcidev(t_, obj)) {
      const auto& pci = obj->attr->pcidev;
      PciDevice dev;
      dev.bus_id = bus_id_of(pci);
      dev.vendor_id = pci.vendor_id;
      dev.device_id = pci.device_id;
      dev.class_id = pci.class_id;
      std::string vendor = info(obj, "PCIVendor"), device = info(obj, "PCIDevice");
      dev.name = vendor.empty() ? device : (device.empty() ? vendor : vendor + " " + device);
      if (dev.name.empty()) {
        char ids[32];
        std::snprintf(ids, sizeof(ids), "PCI %04x:%04x", pci.vendor_id, pci.device_id);
        dev.name = ids;
      }
      dev.parent = parent_id(obj);
      dev.numa_node = numa_of(obj);
      dev.link_gbps = pci.linkspeed;
      topo_.pci_devices.push_back(std::move(dev));
    }
  }

  void os_devices() {
    for (hwloc_obj_t obj = hwloc_get_next_osdev(t_, nullptr); obj;
         obj = hwloc_get_next_osdev(t_, obj)) {
      OsDevice dev;
      dev.name = obj->name ? obj->name : "";
      dev.type = osdev_type_name(obj->attr->osdev.type);
      dev.subtype = obj->subtype ? obj->subtype : "";
      if (obj->parent && obj->parent->type == HWLOC_OBJ_PCI_DEVICE) {
        dev.pci_bus_id = bus_id_of(obj->parent->attr->pcidev);
      }
      os_numa_[dev.name] = numa_of(obj);
      if (dev.type == "gpu" || dev.type == "coproc") {
        gpu_memory_kib_[dev.name] =
            std::strtoull(info(obj, "CUDAGlobalMemorySize").c_str(), nullptr, 10);
        gpu_model_[dev.name] = info(obj, "GPUModel");
      }
      topo_.os_devices.push_back(std::move(dev));
    }
  }

  void accelerators_and_nics() {
    int next = 0;
    for (const auto& pci : topo_.pci_devices) {
      int cls = pci.class_id >> 8;
      if (!is_accelerator_vendor(pci.vendor_id) || (cls != 0x03 && cls != 0x12)) continue;
      Accelerator acc;
      acc.id = "pci:" + std::to_string(next);
      acc.index = next++;
      acc.name = pci.name;
      acc.vendor = std::string(pci_vendor_name(pci.vendor_id));
      acc.pci_bus_id = pci.bus_id;
      acc.pci_vendor_id = pci.vendor_id;
      acc.numa_node = pci.numa_node;
      for (const auto& os : topo_.os_devices) {
        if (os.pci_bus_id != pci.bus_id) continue;
        acc.os_devices.push_back(os.name);
        if (!gpu_model_[os.name].empty()) acc.name = gpu_model_[os.name];
        if (gpu_memory_kib_[os.name]) acc.memory_bytes = gpu_memory_kib_[os.name] * 1024;
      }
      topo_.accelerators.push_back(std::move(acc));
    }
    for (const auto& os : topo_.os_devices) {
      if (os.type != "network" && os.type != "openfabrics") continue;
      Nic nic;
      nic.name = os.name;
      nic.type = os.type;
      nic.pci_bus_id = os.pci_bus_id;
      nic.numa_node = os_numa_[os.name];
      topo_.nics.push_back(std::move(nic));
    }
  }

  // hwloc's NVML/RSMI bandwidth matrices (MB/s) between GPUs: vendor links. Matrices through
  // NVSwitch ports are first closed transitively into GPU-to-GPU figures.
  void vendor_links(const char* name) {
    unsigned nr = 1;
    hwloc_distances_s* d = nullptr;
    if (hwloc_distances_get_by_name(t_, name, &nr, &d, 0) != 0 || nr == 0) return;
    bool through_switches = false;  // NVSwitch ports appear as PCI devices in the matrix
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      through_switches |= d->objs[i]->type == HWLOC_OBJ_PCI_DEVICE;
    }
    if (through_switches) {
      hwloc_distances_transform(t_, d, HWLOC_DISTANCES_TRANSFORM_TRANSITIVE_CLOSURE, nullptr, 0);
    }
    auto accelerator_of = [&](hwloc_obj_t obj) -> const Accelerator* {
      if (obj && obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
      if (!obj || obj->type != HWLOC_OBJ_PCI_DEVICE) return nullptr;
      std::string bus = bus_id_of(obj->attr->pcidev);
      for (const auto& acc : topo_.accelerators) {
        if (acc.pci_bus_id == bus) return &acc;
      }
      return nullptr;
    };
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      for (unsigned j = i + 1; j < d->nbobjs; ++j) {
        const Accelerator* a = accelerator_of(d->objs[i]);
        const Accelerator* b = accelerator_of(d->objs[j]);
        uint64_t mbps = std::max(d->values[i * d->nbobjs + j], d->values[j * d->nbobjs + i]);
        if (!a || !b || a == b || mbps == 0) continue;
        topo_.links.push_back({a->id,
                               b->id,
                               LinkType::kVendorLink,
                               PathClass::kLink,
                               mbps / 1000.0,
                               std::string("hwloc ") + name,
                               {},
                               {}});
      }
    }
    hwloc_distances_release(t_, d);
  }

  hwloc_topology_t t_;
  Topology& topo_;
  int numa_total_ = 0;
  std::map<hwloc_obj_t, std::string> ids_;
  std::map<std::string, int> os_numa_;
  std::map<std::string, uint64_t> gpu_memory_kib_;
  std::map<std::string, std::string> gpu_model_;
};

// hwloc builds every object a synthetic description names, and the walk above is not linear in
// them: "pack:1000000 pu:1" would run for minutes. The objects are the running products of the
// level counts ("pack:2 core:4 pu:2": 2 + 8 + 16); attributes in parentheses are skipped.
constexpr uint64_t kMaxSyntheticObjects = 16384;

Status check_synthetic_size(const std::string& desc) {
  uint64_t level = 1, total = 0;
  size_t i = 0;
  while (i < desc.size()) {
    if (desc[i] == '(') {
      const size_t close = desc.find(')', i);
      i = close == std::string::npos ? desc.size() : close + 1;
      continue;
    }
    if (desc[i] != ':') {
      ++i;
      continue;
    }
    uint64_t count = 0;
    for (++i; i < desc.size() && desc[i] >= '0' && desc[i] <= '9'; ++i) {
      count = std::min<uint64_t>(count * 10 + static_cast<uint64_t>(desc[i] - '0'), 1ull << 32);
    }
    level = std::min<uint64_t>(level * std::max<uint64_t>(count, 1), 1ull << 32);
    total += level;
    if (total > kMaxSyntheticObjects) {
      return invalid_argument("hwloc synthetic description '" + desc + "': more than " +
                              std::to_string(kMaxSyntheticObjects) +
                              " objects (the product of the level counts); describe a smaller "
                              "host");
    }
  }
  return Status();
}

}  // namespace

Status discover_hwloc(const HwlocSource& source, Topology& topo) {
  HwlocHandle handle;
  hwloc_topology_t t = handle.get();
  switch (source.kind) {
    case HwlocSource::Kind::kLive:
      hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
      topo.host.source = "live";
      break;
    case HwlocSource::Kind::kXmlFile:
      hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
      if (hwloc_topology_set_xml(t, source.arg.c_str()) != 0) {
        return invalid_argument(source.arg + ": hwloc could not load this XML (" +
                                std::strerror(errno) + "); expected `lstopo --of xml` output");
      }
      topo.host.source = "hwloc-xml:" + source.arg;
      break;
    case HwlocSource::Kind::kSynthetic:
      TSR_RETURN_IF_ERROR(check_synthetic_size(source.arg));
      if (hwloc_topology_set_synthetic(t, source.arg.c_str()) != 0) {
        return invalid_argument("hwloc synthetic description '" + source.arg +
                                "': not understood; expected e.g. \"pack:2 numa:2 core:4 pu:2\"");
      }
      topo.host.source = "synthetic:" + source.arg;
      break;
  }
  if (hwloc_topology_load(t) != 0) {
    std::string what = source.kind == HwlocSource::Kind::kLive ? "the live machine" : source.arg;
    return invalid_argument(what + ": hwloc_topology_load failed (" + std::strerror(errno) + ")");
  }
  Walker(t, topo).run();
  return Status();
}

#else

Status discover_hwloc(const HwlocSource& source, Topology& topo) {
  std::string what = source.kind == HwlocSource::Kind::kLive ? "hwloc" : source.arg;
  return unimplemented(what + ": hwloc not found when Tessera was built (install libhwloc-dev)");
}

#endif

}  // namespace tessera::topo
