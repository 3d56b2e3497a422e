#include "tessera/topo/platform_json.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/hal/hal.h"

namespace tessera::topo {
namespace {

std::string uuid_text(const uint8_t (&uuid)[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[uuid[i] >> 4];
    out += kHex[uuid[i] & 15];
  }
  return out;
}

nlohmann::ordered_json device_json(const hal::Device& device) {
  const auto& p = device.properties();
  return {
      {"id", device.id()},
      {"index", device.index()},
      {"name", p.name},
      {"vendor", p.vendor},
      {"uuid", uuid_text(p.uuid)},
      {"pci_bus_id", p.pci_bus_id},
      {"total_memory_bytes", p.total_memory},
      {"compute_units", p.compute_units},
      {"numa_node", p.numa_node},
      {"peak_flops",
       {{"f64", p.peak_flops_f64},
        {"f32", p.peak_flops_f32},
        {"f16", p.peak_flops_f16},
        {"bf16", p.peak_flops_bf16}}},
      {"memory_bandwidth_bytes_per_s", p.memory_bandwidth},
      {"capabilities", capability_names(p.capabilities)},
      {"module_formats", hal::module_format_list(device.module_formats())},  // hal/module.h
  };
}

}  // namespace

std::vector<std::string> capability_names(uint64_t caps) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {TSR_CAP_UNIFIED_ADDRESSING, "unified-addressing"},
      {TSR_CAP_HOST_REGISTER, "host-register"},
      {TSR_CAP_PEER_ACCESS, "peer-access"},
      {TSR_CAP_IPC, "ipc"},
      {TSR_CAP_EVENT_TIMING, "event-timing"},
      {TSR_CAP_HOST_ACCESSIBLE, "host-accessible"},
      {TSR_CAP_GEMM, "gemm"},
      {TSR_CAP_NATIVE_COLLECTIVES, "native-collectives"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, name] : kNames) {
    if (caps & bit) out.emplace_back(name);
  }
  return out;
}

std::string platform_json(const hal::Platform& platform) {
  nlohmann::ordered_json backends = nlohmann::ordered_json::array();
  for (const auto& record : platform.registry().records()) {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& device : platform.devices(record.name)) devices.push_back(device_json(device));
    backends.push_back({
        {"name", record.name},
        {"state", hal::backend_state_name(record.state)},
        {"reason", record.reason},
        {"status",
         record.code == StatusCode::kOk ? "OK" : std::string(status_code_name(record.code))},
        {"library", record.path},
        {"version", record.version},
        {"abi_minor", record.abi_minor},
        {"device_count", record.device_count},
        {"devices", devices},
    });
  }
  const nlohmann::ordered_json doc = {
      {"tessera_version", TESSERA_VERSION},
      {"backend_abi", {{"major", TSR_BACKEND_ABI_MAJOR}, {"minor", TSR_BACKEND_ABI_MINOR}}},
      {"search_path", platform.registry().search_dirs()},
      {"device_count", platform.devices().size()},
      {"backends", backends},
  };
  return doc.dump(2);
}

}  // namespace tessera::topo
