#include "devices.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "api.h"
#include "config.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {
namespace {

// Identity of this machine, so device N has the same UUID in every process on the host (as a GPU
// has), and different UUIDs on different hosts.
std::string machine_identity() {
  for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
    std::ifstream file(path);
    std::string id;
    if (file && std::getline(file, id) && !id.empty()) return id;
  }
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) return host;
  return "unknown-host";
}

// CPUs this process may run on (its affinity mask, which containers and taskset narrow), falling
// back to the online count.
int32_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return int32_t(std::max(1u, std::thread::hardware_concurrency()));
}

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t hash = seed;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// A deterministic RFC 4122 version-8 ("custom") UUID from the machine identity and device index.
void device_uuid(int32_t index, uint8_t out[16]) {
  static const std::string machine = machine_identity();
  std::string key = "tessera-host-device|" + machine + "|" + std::to_string(index);
  uint64_t hi = fnv1a(key, 0xcbf29ce484222325ull);
  uint64_t lo = fnv1a(key, 0x84222325cbf29ce4ull ^ hi);
  for (int i = 0; i < 8; ++i) {
    out[i] = uint8_t(hi >> (56 - 8 * i));
    out[8 + i] = uint8_t(lo >> (56 - 8 * i));
  }
  out[6] = uint8_t((out[6] & 0x0f) | 0x80);  // version 8
  out[8] = uint8_t((out[8] & 0x3f) | 0x80);  // RFC 4122 variant
}

}  // namespace

uint64_t host_capabilities(bool discrete) {
  uint64_t caps = TSR_CAP_UNIFIED_ADDRESSING | TSR_CAP_PEER_ACCESS | TSR_CAP_IPC |
                  TSR_CAP_EVENT_TIMING | TSR_CAP_GEMM;
  if (!discrete) caps |= TSR_CAP_HOST_ACCESSIBLE | TSR_CAP_HOST_REGISTER;
  return caps;
}

Device::Device(int32_t index, uint64_t capacity, const char* capacity_source, bool discrete)
    : index_(index), capacity_(capacity), capacity_source_(capacity_source), discrete_(discrete) {}

tsr_status Device::reserve(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) {
      return fail(TSR_RESOURCE_EXHAUSTED,
                  "host device %d: cannot allocate %s: %s of %s in use (%s)", index_,
                  format_bytes(bytes).c_str(), format_bytes(used).c_str(),
                  format_bytes(capacity_).c_str(), capacity_source_);
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return TSR_OK;
}

void Device::release(uint64_t bytes) {
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

void Device::describe(tsr_device_properties* out) const {
  std::memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  std::snprintf(out->name, sizeof out->name, "host device %d", index_);
  std::snprintf(out->vendor, sizeof out->vendor, "Tessera");
  device_uuid(index_, out->uuid);
  out->pci_bus_id[0] = '\0';
  out->total_memory = capacity_;
  out->compute_units = usable_cpus();
  out->numa_node = -1;
  // Peak FLOP/s and bandwidth are left 0 ("unknown"): a CPU's figures depend on the ISA and the
  // other tenants of the machine; the planner measures the host through gemm_async instead.
  out->capabilities = host_capabilities(discrete_);
  out->module_formats = 1u << TSR_MODULE_HOST_ELF;  // module.h
}

namespace api {

int32_t device_count(const char** out_reason) {
  Backend* backend = current_backend();
  if (backend == nullptr) {
    if (out_reason) *out_reason = "host backend not initialised";
    return 0;
  }
  int32_t count = int32_t(backend->devices.size());
  if (count == 0 && out_reason) {
    *out_reason =
        "the host backend was configured with 0 devices (TESSERA_HOST_DEVICES=0 or "
        "devices=0)";
  }
  return count;
}

tsr_status device_properties(int32_t device, tsr_device_properties* out) {
  return guarded("device_properties", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_properties", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "device_properties", device, &dev); s != TSR_OK) {
      return s;
    }
    if (out == nullptr) return fail(TSR_INVALID_ARGUMENT, "device_properties: out is NULL");
    if (out->struct_size < sizeof(size_t)) {
      return fail(TSR_INVALID_ARGUMENT, "device_properties: out->struct_size is %zu",
                  out->struct_size);
    }
    tsr_device_properties full;
    dev->describe(&full);
    if (backend->config.collectives) full.capabilities |= TSR_CAP_NATIVE_COLLECTIVES;  // ccl.h
    copy_prefix(out, &full, sizeof full);
    return TSR_OK;
  });
}

tsr_status memory_info(int32_t device, size_t* out_free, size_t* out_total) {
  return guarded("memory_info", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("memory_info", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "memory_info", device, &dev); s != TSR_OK) return s;
    if (out_free == nullptr || out_total == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "memory_info: %s is NULL",
                  out_free == nullptr ? "out_free" : "out_total");
    }
    uint64_t used = std::min(dev->used(), dev->capacity());
    *out_free = size_t(dev->capacity() - used);
    *out_total = size_t(dev->capacity());
    return TSR_OK;
  });
}

tsr_status device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can_access) {
  return guarded("device_can_access_peer", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_can_access_peer", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "device_can_access_peer", device, &dev);
        s != TSR_OK) {
      return s;
    }
    if (tsr_status s = lookup_device(*backend, "device_can_access_peer (peer)", peer, &dev);
        s != TSR_OK) {
      return s;
    }
    if (out_can_access == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "device_can_access_peer: out_can_access is NULL");
    }
    *out_can_access = 1;  // one address space: every device reads every other directly
    return TSR_OK;
  });
}

tsr_status device_enable_peer_access(int32_t device, int32_t peer) {
  return guarded("device_enable_peer_access", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_enable_peer_access", &backend); s != TSR_OK) {
      return s;
    }
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "device_enable_peer_access", device, &dev);
        s != TSR_OK) {
      return s;
    }
    return lookup_device(*backend, "device_enable_peer_access (peer)", peer, &dev);
  });
}

}  // namespace api
}  // namespace tessera::host
