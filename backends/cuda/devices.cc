// Device enumeration and properties. Everything is read once at init (describe_device) and served
// from memory afterwards; peak FLOP/s comes from a small per-architecture table times the clock.
#include <cstdio>
#include <cstring>

#include "api.h"
#include "errors.h"
#include "state.h"

#ifndef TESSERA_CUDA_VENDOR
#define TESSERA_CUDA_VENDOR "NVIDIA"
#endif

// Hooks a runtime header may define where its stack differs (backends/hip/hip_runtime_names.h):
// the vendor string from the device's properties, and the 16-byte UUID.
#ifndef TSR_RT_DEVICE_VENDOR
#define TSR_RT_DEVICE_VENDOR(prop) TESSERA_CUDA_VENDOR
#endif
#ifndef TSR_RT_DEVICE_UUID
#define TSR_RT_DEVICE_UUID(prop, index, out)                                   \
  do {                                                                         \
    static_assert(sizeof(prop).uuid.bytes == 16, "a device UUID is 16 bytes"); \
    std::memcpy((out), (prop).uuid.bytes, 16);                                 \
  } while (0)
#endif

namespace tessera::cuda {
namespace {

#if TESSERA_CUDA_NVIDIA_TABLES
// Dense FLOP per clock per SM, by compute capability: FP64 (tensor cores where the architecture
// has FP64 MMA), FP32 (CUDA cores; cuBLAS does not use TF32 unless asked), FP16 and BF16 tensor
// cores accumulating in FP32. Times SMs and the maximum clock the driver reports, which is a few
// percent above some datasheets (an H100/H200 SXM gives 1070 TFLOP/s bf16 at 1.98 GHz where the
// datasheet quotes 989 at 1.83 GHz). Unknown architectures stay 0 ("unknown").
struct Rates {
  int major, minor;
  double f64, f32, f16, bf16;
};
constexpr Rates kRates[] = {
    {7, 0, 64, 128, 1024, 0},      // V100 (no bf16 tensor cores)
    {7, 5, 4, 128, 1024, 0},       // T4, Turing
    {8, 0, 128, 128, 2048, 2048},  // A100, A800, A30
    {8, 6, 4, 256, 1024, 1024},    // A10, A40, RTX 30xx
    {8, 9, 4, 256, 1024, 1024},    // L4, L40S, RTX 40xx
    {9, 0, 256, 256, 4096, 4096},  // H100, H800, H200, H20 (per-SM rate; H20 has fewer SMs)
};
#endif

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

// The launch limits module.cc checks; an attribute the runtime does not answer stays 0 (no check).
void read_limits(int32_t index, LaunchLimits* limits) {
  auto read = [index](auto attribute) {
    int value = 0;
    if (rtDeviceGetAttribute(&value, attribute, index) != rtSuccess || value < 0) value = 0;
    return uint32_t(value);
  };
  limits->threads_per_block = read(rtDevAttrMaxThreadsPerBlock);
  limits->block[0] = read(rtDevAttrMaxBlockDimX);
  limits->block[1] = read(rtDevAttrMaxBlockDimY);
  limits->block[2] = read(rtDevAttrMaxBlockDimZ);
  limits->grid[0] = read(rtDevAttrMaxGridDimX);
  limits->grid[1] = read(rtDevAttrMaxGridDimY);
  limits->grid[2] = read(rtDevAttrMaxGridDimZ);
  limits->shared_bytes = read(rtDevAttrMaxSharedMemoryPerBlockOptin);
  (void)rtGetLastError();
}

}  // namespace

tsr_status describe_device(int32_t index, DeviceInfo* info) {
  static constexpr const char* kOp = "init";
  DeviceGuard guard;
  if (tsr_status s = guard.enter(kOp, index); s != TSR_OK) return s;
  rtDeviceProp prop;
  std::memset(&prop, 0, sizeof prop);
  TSR_RT_CHECK(kOp, rtGetDeviceProperties, &prop, index);
  int clock_khz = 0;
  int memory_clock_khz = 0;
  if (rtDeviceGetAttribute(&clock_khz, rtDevAttrClockRate, index) != rtSuccess) clock_khz = 0;
  if (rtDeviceGetAttribute(&memory_clock_khz, rtDevAttrMemoryClockRate, index) != rtSuccess) {
    memory_clock_khz = 0;
  }
  (void)rtGetLastError();
  TSR_RT_CHECK(kOp, rtDeviceGetStreamPriorityRange, &info->least_priority,
               &info->greatest_priority);

  read_limits(index, &info->limits);

  tsr_device_properties& p = info->properties;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  std::snprintf(p.name, sizeof p.name, "%.127s", prop.name);
  std::snprintf(p.vendor, sizeof p.vendor, "%s", TSR_RT_DEVICE_VENDOR(prop));
  TSR_RT_DEVICE_UUID(prop, index, p.uuid);
  std::snprintf(p.pci_bus_id, sizeof p.pci_bus_id, "%04x:%02x:%02x.0",
                unsigned(prop.pciDomainID) & 0xffffu, unsigned(prop.pciBusID) & 0xffu,
                unsigned(prop.pciDeviceID) & 0xffu);
  p.total_memory = uint64_t(prop.totalGlobalMem);
  p.compute_units = int32_t(prop.multiProcessorCount);
  p.numa_node = numa_node_of(p.pci_bus_id);
#if TESSERA_CUDA_NVIDIA_TABLES
  const double per_sm_hz = double(prop.multiProcessorCount) * double(clock_khz) * 1e3;
  for (const Rates& r : kRates) {
    if (r.major == prop.major && r.minor == prop.minor) {
      p.peak_flops_f64 = r.f64 * per_sm_hz;
      p.peak_flops_f32 = r.f32 * per_sm_hz;
      p.peak_flops_f16 = r.f16 * per_sm_hz;
      p.peak_flops_bf16 = r.bf16 * per_sm_hz;
    }
  }
#endif
  // Double data rate on the reported memory clock, times the bus width in bytes.
  p.memory_bandwidth = 2.0 * double(memory_clock_khz) * 1e3 * double(prop.memoryBusWidth) / 8.0;
  p.capabilities = TSR_CAP_UNIFIED_ADDRESSING | TSR_CAP_HOST_REGISTER | TSR_CAP_EVENT_TIMING;
#if TESSERA_CUDA_HAVE_IPC
  p.capabilities |= TSR_CAP_IPC;
#endif
  return TSR_OK;
}

namespace api {

int32_t device_count(const char** out_reason) {
  Backend* backend = current_backend();
  if (backend == nullptr) {
    if (out_reason) *out_reason = no_device_reason();
    return 0;
  }
  return int32_t(backend->devices.size());  // init fails with NO_DEVICE rather than leave 0
}

tsr_status device_properties(int32_t device, tsr_device_properties* out) {
  return guarded("device_properties", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_properties", &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, "device_properties", device); s != TSR_OK) return s;
    if (out == nullptr) return fail(TSR_INVALID_ARGUMENT, "device_properties: out is NULL");
    if (out->struct_size < sizeof(size_t)) {
      return fail(TSR_INVALID_ARGUMENT, "device_properties: out->struct_size is %zu",
                  out->struct_size);
    }
    tsr_device_properties full = backend->devices[size_t(device)].properties;
    if (gemm_available()) full.capabilities |= TSR_CAP_GEMM;
    if (collectives() != nullptr) full.capabilities |= TSR_CAP_NATIVE_COLLECTIVES;
    full.module_formats = module_formats();
    for (size_t peer = 0; peer < backend->devices.size(); ++peer) {
      int can = 0;
      if (int32_t(peer) != device && rtDeviceCanAccessPeer(&can, int(peer), device) == rtSuccess &&
          can) {
        full.capabilities |= TSR_CAP_PEER_ACCESS;
      }
    }
    (void)rtGetLastError();
    copy_prefix(out, &full, sizeof full);
    return TSR_OK;
  });
}

tsr_status memory_info(int32_t device, size_t* out_free, size_t* out_total) {
  return guarded("memory_info", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("memory_info", &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, "memory_info", device); s != TSR_OK) return s;
    if (out_free == nullptr || out_total == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "memory_info: %s is NULL",
                  out_free == nullptr ? "out_free" : "out_total");
    }
    DeviceGuard guard;
    if (tsr_status s = guard.enter("memory_info", device); s != TSR_OK) return s;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    TSR_RT_CHECK("memory_info", rtMemGetInfo, &free_bytes, &total_bytes);
    // The total is the one the properties report, so the two always agree.
    const size_t total = size_t(backend->devices[size_t(device)].properties.total_memory);
    *out_free = free_bytes < total ? free_bytes : total;
    *out_total = total;
    return TSR_OK;
  });
}

tsr_status device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can_access) {
  static constexpr const char* kOp = "device_can_access_peer";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, "device_can_access_peer (peer)", peer); s != TSR_OK) {
      return s;
    }
    if (out_can_access == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: out_can_access is NULL", kOp);
    }
    int can = 1;  // a device reaches its own memory
    if (peer != device) TSR_RT_CHECK(kOp, rtDeviceCanAccessPeer, &can, device, peer);
    *out_can_access = can ? 1 : 0;
    return TSR_OK;
  });
}

tsr_status device_enable_peer_access(int32_t device, int32_t peer) {
  static constexpr const char* kOp = "device_enable_peer_access";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, "device_enable_peer_access (peer)", peer);
        s != TSR_OK) {
      return s;
    }
    if (peer == device) return TSR_OK;
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    rtError_t error = rtDeviceEnablePeerAccess(peer, 0);
    if (error == rtErrorPeerAccessAlreadyEnabled) {
      (void)rtGetLastError();
      return TSR_OK;
    }
    if (error != rtSuccess) return fail_runtime(error, kOp, TSR_RT_NAME(rtDeviceEnablePeerAccess));
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::cuda
