// Device enumeration and properties (read once at init), memory info and peer access.
#include <cstdio>
#include <cstring>

#include "ze.h"

namespace tessera::ze {
namespace {

int numa_node_of(const char* pci_bus_id) {
  if (pci_bus_id[0] == '\0') return -1;
  char path[128];
  std::snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", pci_bus_id);
  FILE* file = std::fopen(path, "r");
  if (file == nullptr) return -1;
  int node = -1;
  if (std::fscanf(file, "%d", &node) != 1) node = -1;
  std::fclose(file);
  return node < 0 ? -1 : node;
}

}  // namespace

tsr_status describe_device(const Loader& z, Device& d) {
  ze_device_properties_t prop{};
  prop.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  if (ze_result_t r = z.zeDeviceGetProperties(d.handle, &prop); r != ZE_RESULT_SUCCESS) {
    return fail_ze(r, "init", "zeDeviceGetProperties");
  }
  tsr_device_properties& p = d.properties;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  std::snprintf(p.name, sizeof p.name, "%.127s", prop.name);
  if (prop.vendorId == 0x8086) {
    std::snprintf(p.vendor, sizeof p.vendor, "Intel");
  } else {
    std::snprintf(p.vendor, sizeof p.vendor, "PCI vendor 0x%04x", unsigned(prop.vendorId));
  }
  static_assert(sizeof prop.uuid.id == sizeof p.uuid, "a device UUID is 16 bytes");
  std::memcpy(p.uuid, prop.uuid.id, sizeof p.uuid);
  if (z.zeDevicePciGetPropertiesExt != nullptr) {
    ze_pci_ext_properties_t pci{};
    pci.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES;
    if (z.zeDevicePciGetPropertiesExt(d.handle, &pci) == ZE_RESULT_SUCCESS) {
      std::snprintf(p.pci_bus_id, sizeof p.pci_bus_id, "%04x:%02x:%02x.%x",
                    pci.address.domain & 0xffffu, pci.address.bus & 0xffu,
                    pci.address.device & 0xffu, pci.address.function & 0xfu);
    }
  }
  uint32_t count = 0;
  if (z.zeDeviceGetMemoryProperties(d.handle, &count, nullptr) == ZE_RESULT_SUCCESS && count) {
    std::vector<ze_device_memory_properties_t> memory(count);
    for (auto& m : memory) m.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
    if (z.zeDeviceGetMemoryProperties(d.handle, &count, memory.data()) == ZE_RESULT_SUCCESS) {
      for (uint32_t i = 0; i < count; ++i) {
        p.total_memory += memory[i].totalSize;
        // maxClockRate in MHz, maxBusWidth in bits: double data rate.
        p.memory_bandwidth +=
            2.0 * double(memory[i].maxClockRate) * 1e6 * double(memory[i].maxBusWidth) / 8.0;
      }
    }
  }
  // Execution units: slices x sub-slices x EUs per sub-slice.
  p.compute_units = int32_t(prop.numSlices * prop.numSubslicesPerSlice * prop.numEUsPerSubslice);
  p.numa_node = numa_node_of(p.pci_bus_id);
  p.capabilities = TSR_CAP_UNIFIED_ADDRESSING | TSR_CAP_IPC | TSR_CAP_EVENT_TIMING;
  if (prop.flags & ZE_DEVICE_PROPERTY_FLAG_INTEGRATED) p.capabilities |= TSR_CAP_HOST_ACCESSIBLE;
  // Timer: ns per tick (properties 1.0 semantics) and the valid bits of kernel timestamps.
  d.timer_ns_per_tick = prop.timerResolution ? double(prop.timerResolution) : 1.0;
  d.timestamp_mask =
      prop.kernelTimestampValidBits >= 64 ? ~0ull : ((1ull << prop.kernelTimestampValidBits) - 1);
  // Launch limits for module_entries.cc; zero (no check) when the driver does not say.
  d.compute = ze_device_compute_properties_t{};
  d.compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
  if (z.zeDeviceGetComputeProperties(d.handle, &d.compute) != ZE_RESULT_SUCCESS) {
    d.compute = ze_device_compute_properties_t{};
  }
  // The first command queue group that computes (and therefore copies).
  uint32_t groups = 0;
  if (z.zeDeviceGetCommandQueueGroupProperties(d.handle, &groups, nullptr) == ZE_RESULT_SUCCESS) {
    std::vector<ze_command_queue_group_properties_t> props(groups);
    for (auto& g : props) g.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    if (z.zeDeviceGetCommandQueueGroupProperties(d.handle, &groups, props.data()) ==
        ZE_RESULT_SUCCESS) {
      for (uint32_t i = 0; i < groups; ++i) {
        if (props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
          d.compute_ordinal = i;
          break;
        }
      }
    }
  }
  return TSR_OK;
}

namespace api {

int32_t device_count(const char** out_reason) {
  Backend* b = current();
  if (b == nullptr) {
    if (out_reason) *out_reason = no_device_reason();
    return 0;
  }
  return int32_t(b->devices.size());
}

tsr_status device_properties(int32_t device, tsr_device_properties* out) {
  Backend* b = nullptr;
  if (tsr_status s = require("device_properties", &b); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, "device_properties", device); s != TSR_OK) return s;
  if (out == nullptr || out->struct_size < sizeof(size_t)) {
    return fail(TSR_INVALID_ARGUMENT,
                "device_properties: out is NULL or its struct_size too small");
  }
  tsr_device_properties full = b->devices[size_t(device)].properties;
  full.module_formats = 1u << TSR_MODULE_SPIRV;  // module_entries.cc
  for (size_t peer = 0; peer < b->devices.size(); ++peer) {
    ze_bool_t can = 0;
    if (int32_t(peer) != device &&
        ze().zeDeviceCanAccessPeer(b->devices[peer].handle, b->devices[size_t(device)].handle,
                                   &can) == ZE_RESULT_SUCCESS &&
        can) {
      full.capabilities |= TSR_CAP_PEER_ACCESS;
    }
  }
  const size_t wanted = out->struct_size;
  const size_t bytes = wanted < sizeof full ? wanted : sizeof full;
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
              reinterpret_cast<const char*>(&full) + sizeof(size_t), bytes - sizeof(size_t));
  if (wanted > sizeof full)
    std::memset(reinterpret_cast<char*>(out) + sizeof full, 0, wanted - sizeof full);
  return TSR_OK;
}

tsr_status memory_info(int32_t device, size_t* out_free, size_t* out_total) {
  Backend* b = nullptr;
  if (tsr_status s = require("memory_info", &b); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, "memory_info", device); s != TSR_OK) return s;
  if (out_free == nullptr || out_total == nullptr) {
    return fail(TSR_INVALID_ARGUMENT, "memory_info: an output pointer is NULL");
  }
  // Core Level Zero has no free-memory query (Sysman does, needs ZES_ENABLE_SYSMAN): free is the
  // total less what this process allocated.
  const size_t total = size_t(b->devices[size_t(device)].properties.total_memory);
  std::lock_guard lock(b->mutex);
  const size_t used = b->allocated[size_t(device)];
  *out_total = total;
  *out_free = used < total ? total - used : 0;
  return TSR_OK;
}

tsr_status device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can_access) {
  static constexpr const char* kOp = "device_can_access_peer";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, peer); s != TSR_OK) return s;
  if (out_can_access == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out is NULL", kOp);
  ze_bool_t can = 1;
  if (peer != device) {
    TSR_ZE_CHECK(kOp, zeDeviceCanAccessPeer, b->devices[size_t(device)].handle,
                 b->devices[size_t(peer)].handle, &can);
  }
  *out_can_access = can ? 1 : 0;
  return TSR_OK;
}

tsr_status device_enable_peer_access(int32_t device, int32_t peer) {
  static constexpr const char* kOp = "device_enable_peer_access";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, peer); s != TSR_OK) return s;
  // Level Zero needs no enabling: peer access follows from the shared context.
  return TSR_OK;
}

}  // namespace api
}  // namespace tessera::ze
