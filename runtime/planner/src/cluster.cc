// Cluster values: the compact JSON, presets from shared/reference/hardware.md, resizing.
#include "tessera/plan/cluster.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "tessera/common/untrusted.h"

#ifdef TESSERA_PLAN_HAVE_TOPOLOGY
#include "tessera/plan/topology_cluster.h"
#endif

namespace tessera::plan {
namespace {

using Json = nlohmann::json;

struct Reader {
  const std::string& source;

  Result<double> number(const Json& obj, const std::string& path, const char* key, double fallback,
                        bool required) const {
    if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) {
      if (!required) return fallback;
      return invalid_argument(source + ": field '" + path + key + "' missing");
    }
    if (!obj[key].is_number() || !(obj[key].get<double>() >= 0) ||
        !std::isfinite(obj[key].get<double>())) {
      return invalid_argument(source + ": field '" + path + key +
                              "' must be a non-negative number, got " + obj[key].dump());
    }
    return obj[key].get<double>();
  }
  // A count: a whole number in [min, max] (1.5 hosts is refused, not truncated to 1).
  Result<int> count(const Json& obj, const std::string& path, const char* key, int fallback,
                    bool required, int64_t min, int64_t max) const {
    TSR_ASSIGN_OR_RETURN(double v, number(obj, path, key, fallback, required));
    if (v != std::floor(v) || v < static_cast<double>(min) || v > static_cast<double>(max)) {
      return invalid_argument(source + ": field '" + path + key + "' must be an integer in " +
                              std::to_string(min) + ".." + std::to_string(max) + ", got " +
                              obj[key].dump());
    }
    return static_cast<int>(v);
  }
  std::string text(const Json& obj, const char* key, std::string fallback) const {
    if (obj.is_object() && obj.contains(key) && obj[key].is_string()) {
      return obj[key].get<std::string>();
    }
    return fallback;
  }
};

ClusterSpec dgx(std::string name, DeviceSpec device, LinkSpec intra, LinkSpec inter) {
  ClusterSpec c;
  c.name = std::move(name);
  c.hosts = 1;
  c.devices_per_host = 8;
  c.device = std::move(device);
  c.intra_host = std::move(intra);
  c.inter_host = std::move(inter);
  return c;
}

std::vector<ClusterSpec> presets() {
  return {
      // Figures from shared/reference/hardware.md: dense bf16/fp16 and fp32 peaks, HBM size and
      // bandwidth, NVLink per direction (A100 NVLink3 300, nccl-tests busbw ~230; H100 NVLink4
      // 450 = 900 GB/s both ways, ring busbw ~370), one NIC per GPU (DGX A100: 8 x HDR 200 Gb/s =
      // 25 GB/s, ~23.5 achieved; DGX H100: 8 x NDR 400 Gb/s = 50 GB/s, 45-48 achieved, 46 used).
      // SFU: 16 transcendentals per SM per clock: A100 108 SMs x 1.41 GHz, H100 132 x 1.83.
      // gemm_efficiency 0.8: hardware.md's 75-90 % large-GEMM range (an H200, same SMs and
      // clocks as the H100, measured 770-800 of 989 TFLOP/s at 8192^3).
      dgx("dgx-a100-80gb", {"A100-SXM4-80GB", 80, 312, 312, 19.5, 2039, 0.8, 3, 2.44},
          {"nvswitch", 300, 230, 3, 0}, {"infiniband", 25, 23.5, 5, 8}),
      dgx("dgx-h100", {"H100-SXM5-80GB", 80, 989, 989, 67, 3350, 0.8, 3, 3.86},
          {"nvswitch", 450, 370, 3, 0}, {"infiniband", 50, 46, 5, 8}),
      // Vendor figures, unverified (hardware.md): HCCS 7 links x 56 GB/s, 8 x 200GbE RoCE.
      dgx("ascend-910b-8", {"Ascend-910B", 64, 320, 320, 0, 1600, 0.8}, {"hccs", 392, 0, 5, 0},
          {"roce", 25, 0, 8, 8}),
      // Four MI250X = eight GCDs per node (Frontier-like); xGMI per GCD is an assumption.
      dgx("mi250x-8", {"MI250X-GCD", 64, 191.5, 191.5, 47.9, 1600, 0.8}, {"xgmi", 100, 0, 5, 0},
          {"slingshot", 25, 0, 5, 4}),
  };
}

void fill_busbw(LinkSpec& link) {
  if (link.busbw_gbps <= 0) link.busbw_gbps = link.bandwidth_gbps * link_busbw_factor(link.link);
}

}  // namespace

std::string_view dtype_name(Dtype dtype) {
  return dtype == Dtype::kBf16 ? "bf16" : "fp16";
}

double DeviceSpec::peak_flops(Dtype dtype) const {
  return 1e12 * (dtype == Dtype::kBf16 ? peak_tflops_bf16 : peak_tflops_fp16);
}

double DeviceSpec::sfu_ops() const {
  if (sfu_tops > 0) return sfu_tops * 1e12;
  return peak_tflops_fp32 * 1e12 / 8;
}

double link_busbw_factor(std::string_view link) {
  if (link == "nvswitch" || link == "nvlink") return 230.0 / 300.0;
  if (link == "infiniband" || link == "ib") return 23.5 / 25.0;
  if (link == "roce" || link == "ethernet" || link == "slingshot") return 0.9;
  if (link == "pcie") return 0.8;
  return 0.8;  // hccs, xgmi, vendor links: no published nccl-tests-style figure at hand
}

Result<ClusterSpec> cluster_from_json(std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(source + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(source + ": not a JSON object");
  const Reader r{source};
  ClusterSpec c;
  c.name = r.text(j, "name", source);
  TSR_ASSIGN_OR_RETURN(c.devices_per_host,
                       r.count(j, "", "devices_per_host", 1, true, 1, kMaxDevicesPerHost));
  TSR_ASSIGN_OR_RETURN(c.hosts,
                       r.count(j, "", "hosts", 1, true, 1, kMaxDevices / c.devices_per_host));
  if (!j.contains("device")) return invalid_argument(source + ": field 'device' missing");
  const Json& d = j["device"];
  c.device.name = r.text(d, "name", "device");
  TSR_ASSIGN_OR_RETURN(c.device.memory_gib, r.number(d, "device.", "memory_gib", 0, true));
  TSR_ASSIGN_OR_RETURN(c.device.memory_bandwidth_gbps,
                       r.number(d, "device.", "memory_bandwidth_gbps", 0, true));
  TSR_ASSIGN_OR_RETURN(c.device.gemm_efficiency,
                       r.number(d, "device.", "gemm_efficiency", 0.8, false));
  TSR_ASSIGN_OR_RETURN(c.device.kernel_launch_us,
                       r.number(d, "device.", "kernel_launch_us", 3, false));
  TSR_ASSIGN_OR_RETURN(c.device.sfu_tops, r.number(d, "device.", "sfu_tops", 0, false));
  if (!d.contains("peak_tflops") || !d["peak_tflops"].is_object()) {
    return invalid_argument(source + ": field 'device.peak_tflops' missing");
  }
  const Json& peak = d["peak_tflops"];
  TSR_ASSIGN_OR_RETURN(c.device.peak_tflops_bf16,
                       r.number(peak, "device.peak_tflops.", "bf16", 0, false));
  TSR_ASSIGN_OR_RETURN(c.device.peak_tflops_fp16, r.number(peak, "device.peak_tflops.", "fp16",
                                                           c.device.peak_tflops_bf16, false));
  TSR_ASSIGN_OR_RETURN(c.device.peak_tflops_fp32,
                       r.number(peak, "device.peak_tflops.", "fp32", 0, false));
  if (c.device.peak_tflops_bf16 <= 0 && c.device.peak_tflops_fp16 <= 0) {
    return invalid_argument(source + ": field 'device.peak_tflops' needs bf16 or fp16");
  }
  if (c.device.memory_gib <= 0 || c.device.memory_bandwidth_gbps <= 0) {
    return invalid_argument(source + ": device memory_gib and memory_bandwidth_gbps must be > 0");
  }
  const Json intra = j.value("intra_host", Json::object());
  c.intra_host.link = r.text(intra, "link", "nvswitch");
  TSR_ASSIGN_OR_RETURN(c.intra_host.bandwidth_gbps,
                       r.number(intra, "intra_host.", "bandwidth_gbps", 0, c.devices_per_host > 1));
  TSR_ASSIGN_OR_RETURN(c.intra_host.busbw_gbps,
                       r.number(intra, "intra_host.", "busbw_gbps", 0, false));
  TSR_ASSIGN_OR_RETURN(c.intra_host.latency_us,
                       r.number(intra, "intra_host.", "latency_us", 3, false));
  const Json inter = j.value("inter_host", Json::object());
  c.inter_host.link = r.text(inter, "link", "infiniband");
  const bool multi_host = c.hosts > 1;
  TSR_ASSIGN_OR_RETURN(c.inter_host.nics_per_host,
                       r.count(inter, "inter_host.", "nics_per_host", 1, multi_host, 0, 1 << 16));
  TSR_ASSIGN_OR_RETURN(c.inter_host.bandwidth_gbps,
                       r.number(inter, "inter_host.", "bandwidth_gbps_per_nic", 0, multi_host));
  TSR_ASSIGN_OR_RETURN(c.inter_host.busbw_gbps,
                       r.number(inter, "inter_host.", "busbw_gbps", 0, false));
  TSR_ASSIGN_OR_RETURN(c.inter_host.latency_us,
                       r.number(inter, "inter_host.", "latency_us", 5, false));
  if (multi_host && (c.inter_host.nics_per_host < 1 || c.inter_host.bandwidth_gbps <= 0)) {
    return invalid_argument(source + ": inter_host needs nics_per_host >= 1 and a bandwidth");
  }
  if (c.device.gemm_efficiency <= 0 || c.device.gemm_efficiency > 1) {
    return invalid_argument(source + ": field 'device.gemm_efficiency' must be in (0, 1], got " +
                            std::to_string(c.device.gemm_efficiency));
  }
  fill_busbw(c.intra_host);
  fill_busbw(c.inter_host);
  // The dtype is not known here: either peak suffices now, search_plans checks the one used.
  const Dtype any = c.device.peak_tflops_bf16 > 0 ? Dtype::kBf16 : Dtype::kFp16;
  TSR_RETURN_IF_ERROR(validate_cluster(c, any).with_context(source));
  return c;
}

Status validate_cluster(const ClusterSpec& c, Dtype dtype) {
  const std::string where = "cluster '" + c.name + "': ";
  auto positive = [&](const char* field, double v) -> Status {
    if (v > 0 && std::isfinite(v)) return Status();
    return invalid_argument(where + field + " must be a positive finite number, got " +
                            std::to_string(v));
  };
  if (c.hosts < 1 || c.devices_per_host < 1 || c.devices_per_host > kMaxDevicesPerHost ||
      c.devices() > kMaxDevices) {
    return invalid_argument(where + std::to_string(c.hosts) + " hosts x " +
                            std::to_string(c.devices_per_host) + " devices: need 1.." +
                            std::to_string(kMaxDevicesPerHost) + " devices per host and at most " +
                            std::to_string(kMaxDevices) + " devices");
  }
  const char* peak = dtype == Dtype::kBf16 ? "device.peak_tflops.bf16" : "device.peak_tflops.fp16";
  if (!(c.device.peak_flops(dtype) > 0) || !std::isfinite(c.device.peak_flops(dtype))) {
    return invalid_argument(where + peak + " is " +
                            std::to_string(c.device.peak_flops(dtype) / 1e12) + ": no " +
                            std::string(dtype_name(dtype)) +
                            " plan can be priced (give the figure or use the other --dtype)");
  }
  TSR_RETURN_IF_ERROR(positive("device.memory_gib", c.device.memory_gib));
  TSR_RETURN_IF_ERROR(positive("device.memory_bandwidth_gbps", c.device.memory_bandwidth_gbps));
  TSR_RETURN_IF_ERROR(positive("device.gemm_efficiency", c.device.gemm_efficiency));
  if (c.devices_per_host > 1) {
    TSR_RETURN_IF_ERROR(positive("intra_host.bandwidth_gbps", c.intra_host.bandwidth_gbps));
    TSR_RETURN_IF_ERROR(positive("intra_host.busbw_gbps", c.intra_host.busbw_gbps));
  }
  if (c.hosts > 1) {
    if (c.inter_host.nics_per_host < 1) {
      return invalid_argument(where + "inter_host.nics_per_host must be at least 1 with " +
                              std::to_string(c.hosts) + " hosts");
    }
    TSR_RETURN_IF_ERROR(positive("inter_host.bandwidth_gbps_per_nic", c.inter_host.bandwidth_gbps));
    TSR_RETURN_IF_ERROR(positive("inter_host.busbw_gbps", c.inter_host.busbw_gbps));
  }
  for (double latency : {c.intra_host.latency_us, c.inter_host.latency_us}) {
    if (!(latency >= 0) || !std::isfinite(latency)) {
      return invalid_argument(where + "link latency_us must be a finite number >= 0");
    }
  }
  return Status();
}

Result<ClusterSpec> cluster_preset(std::string_view name) {
  for (ClusterSpec c : presets()) {
    if (c.name == name) {
      fill_busbw(c.intra_host);
      fill_busbw(c.inter_host);
      return c;
    }
  }
  std::string known;
  for (const auto& n : cluster_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return not_found("unknown cluster preset '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const ClusterSpec& c : presets()) names.push_back(c.name);
  return names;
}

Result<ClusterSpec> load_cluster(std::string_view spec, bool calibrated) {
  for (const auto& name : cluster_preset_names()) {
    if (name == spec) return cluster_preset(spec);
  }
  Result<std::string> text = read_text_file(std::string(spec), kMaxConfigFileBytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return not_found(std::string(spec) + ": cannot open (not a file or a known preset)");
  }
  if (!text.ok()) return text.status();
  // The topology layer's form (`tessera probe --cluster hosts=N --json`) has a list of host
  // groups; the compact form a number.
  const Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("hosts") && j["hosts"].is_array()) {
#ifdef TESSERA_PLAN_HAVE_TOPOLOGY
    return cluster_from_topology_json(*text, spec, calibrated);
#else
    return unimplemented(std::string(spec) +
                         ": a topology cluster spec, but this build has no "
                         "topology layer (nlohmann-json was missing); use the compact JSON");
#endif
  }
  return cluster_from_json(*text, spec);
}

Result<ClusterSpec> with_devices(const ClusterSpec& cluster, int64_t devices) {
  if (devices < 1 || devices > kMaxDevices) {
    return invalid_argument("--devices must be in 1.." + std::to_string(kMaxDevices) + ", got " +
                            std::to_string(devices));
  }
  ClusterSpec c = cluster;
  if (devices <= cluster.devices_per_host) {
    c.hosts = 1;
    c.devices_per_host = static_cast<int>(devices);
    return c;
  }
  if (devices % cluster.devices_per_host != 0) {
    return invalid_argument("--devices " + std::to_string(devices) + " is not a multiple of " +
                            std::to_string(cluster.devices_per_host) + " devices per host");
  }
  c.hosts = static_cast<int>(devices / cluster.devices_per_host);
  return c;
}

}  // namespace tessera::plan
