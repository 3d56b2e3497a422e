// The cluster the planner plans for: a value, never live devices. Until the topology layer lands
// this is the planner's own minimal type, read from the compact JSON of issue 6 or a preset:
//
//   {"name": "a100-cluster", "hosts": 384, "devices_per_host": 8,
//    "device": {"name": "A100-SXM4-80GB", "memory_gib": 80,
//               "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5},
//               "memory_bandwidth_gbps": 2039},
//    "intra_host": {"link": "nvswitch", "bandwidth_gbps": 300},
//    "inter_host": {"link": "infiniband", "nics_per_host": 8, "bandwidth_gbps_per_nic": 25,
//                   "latency_us": 5}}
//
// Bandwidths are GB/s (1e9 bytes/s) per direction, per device (intra) or per NIC (inter).
// Optional: device.gemm_efficiency (large-GEMM fraction of peak, default 0.8),
// device.kernel_launch_us (the device's idle gap per kernel, default 3), device.sfu_tops
// (transcendentals per second x 1e-12, default fp32 peak / 8), *.busbw_gbps (the
// nccl-tests bus bandwidth the link achieves; default: line rate x a per-link-class factor),
// intra_host.latency_us (default 3). Thread-safe (values).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::plan {

enum class Dtype { kBf16, kFp16 };
std::string_view dtype_name(Dtype dtype);

struct DeviceSpec {
  std::string name;
  double memory_gib = 0;
  double peak_tflops_bf16 = 0, peak_tflops_fp16 = 0, peak_tflops_fp32 = 0;
  double memory_bandwidth_gbps = 0;
  double gemm_efficiency = 0.8;  // achievable fraction of peak for large GEMMs (hardware.md)
  // Seconds x 1e6 the device idles per kernel: launch latency plus the ramp-up and tail of a
  // kernel's last wave. Work split into many small kernels pays it per kernel.
  double kernel_launch_us = 3;
  // Transcendental operations per second x 1e-12 (the special-function units: 16 per SM per
  // clock on A100 and H100). 0: the fp32 peak / 8 (the A100's ratio).
  double sfu_tops = 0;
  double sfu_ops() const;                // per second
  double peak_flops(Dtype dtype) const;  // FLOP/s
};

struct LinkSpec {
  std::string link;           // nvswitch, nvlink, pcie, infiniband, roce, hccs, xgmi, ...
  double bandwidth_gbps = 0;  // intra: per device; inter: per NIC. Per direction.
  double busbw_gbps = 0;      // achieved nccl-tests bus bandwidth per device/NIC
  double latency_us = 0;      // per message step
  int nics_per_host = 0;      // inter only
};

struct ClusterSpec {
  std::string name;
  int hosts = 1;
  int devices_per_host = 1;
  DeviceSpec device;
  LinkSpec intra_host;
  LinkSpec inter_host;
  int64_t devices() const { return static_cast<int64_t>(hosts) * devices_per_host; }
};

// Sizes the planner accepts: beyond any machine built, small enough that the search's integer
// arithmetic (tp x cp x pp x dp, divisor lists) stays in range.
inline constexpr int64_t kMaxDevices = int64_t{1} << 24;
inline constexpr int64_t kMaxDevicesPerHost = int64_t{1} << 12;

// Checks what the cost model divides by: the peak FLOP/s of `dtype`, memory size and
// bandwidth, the intra-host link when a host has several devices, the network when there are
// several hosts; every figure finite, counts within the limits above. Errors name the cluster and
// the field ("c.json: device.peak_tflops.bf16 is 0: ...").
Status validate_cluster(const ClusterSpec& cluster, Dtype dtype);

// Typical achieved/line-rate factor per link class (hardware.md: NVLink3 allreduce busbw ~230 of
// 300, IB HDR ~23.5 of 25, RoCE ~90%, PCIe ~80%). Unknown links get 0.8.
double link_busbw_factor(std::string_view link);

// Parses the compact JSON; errors name `source` and the field. Counts must be integers.
Result<ClusterSpec> cluster_from_json(std::string_view json_text, std::string_view source);
// dgx-a100-80gb, dgx-h100, ascend-910b-8, mi250x-8: one host each (use with_devices to scale).
Result<ClusterSpec> cluster_preset(std::string_view name);
std::vector<std::string> cluster_preset_names();
// A preset name or a JSON file (a regular file of at most kMaxConfigFileBytes): the compact form
// above, or the topology layer's cluster spec (docs/TOPOLOGY.md; converted by topology_cluster.h).
// `calibrated`: the caller will apply a calibration, so a device without known peak FLOP/s is
// accepted.
Result<ClusterSpec> load_cluster(std::string_view preset_or_path, bool calibrated = false);

// The same hosts, resized to `devices`: fewer than one host shrinks the host; more must be a
// multiple of devices_per_host.
Result<ClusterSpec> with_devices(const ClusterSpec& cluster, int64_t devices);

}  // namespace tessera::plan
