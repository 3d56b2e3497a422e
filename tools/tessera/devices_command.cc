// `tessera devices [--json] [--backends LIST]`: every backend's state with its reason, and every
// device of the enabled ones. Exit status 0 whenever the listing itself worked, even with zero
// devices (zero devices is a normal state); 2 on bad options.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "format.h"
#include "tessera/hal/hal.h"

namespace tessera::tools {
namespace {

struct DevicesOptions {
  bool json = false;
  std::string backends;  // empty: TESSERA_BACKENDS or all
};

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
  };
}

nlohmann::ordered_json platform_json(const hal::Platform& platform) {
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
  return {
      {"tessera_version", TESSERA_VERSION},
      {"backend_abi", {{"major", TSR_BACKEND_ABI_MAJOR}, {"minor", TSR_BACKEND_ABI_MINOR}}},
      {"search_path", platform.registry().search_dirs()},
      {"device_count", platform.devices().size()},
      {"backends", backends},
  };
}

std::string platform_text(const hal::Platform& platform) {
  Table backends({"BACKEND", "STATE", "DEVICES", "LIBRARY OR REASON"});
  for (const auto& record : platform.registry().records()) {
    std::string detail = record.state == hal::BackendState::kEnabled ? record.path : record.reason;
    backends.add({record.name, std::string(hal::backend_state_name(record.state)),
                  std::to_string(record.device_count), detail});
  }
  std::string out = backends.to_string();
  if (platform.devices().empty()) {
    out += "\nNo devices. Search path: ";
    for (const auto& dir : platform.registry().search_dirs()) out += dir + " ";
    out += "\n";
    return out;
  }
  Table devices({"DEVICE", "NAME", "VENDOR", "MEMORY", "UNITS", "PCI", "CAPABILITIES"});
  for (const auto& device : platform.devices()) {
    const auto& p = device.properties();
    std::string caps;
    for (const auto& name : capability_names(p.capabilities))
      caps += (caps.empty() ? "" : ",") + name;
    devices.add({device.id(), p.name, p.vendor, format_bytes(p.total_memory),
                 std::to_string(p.compute_units), p.pci_bus_id[0] ? p.pci_bus_id : "-", caps});
  }
  return out + "\n" + devices.to_string();
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto options = std::make_shared<DevicesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "devices", "List every backend with its state (and why it is not enabled) and every device");
  cmd->add_flag("--json", options->json, "Print JSON for machines");
  cmd->add_option("--backends", options->backends,
                  "Comma-separated backends to load (default: $TESSERA_BACKENDS, else all); "
                  "'^a,b' loads all but a and b");
  cmd->callback([options] {
    hal::PlatformOptions platform_options;
    if (!options->backends.empty()) platform_options.registry.selection = options->backends;
    auto platform = hal::Platform::create(platform_options);
    if (!platform.ok()) {
      std::fprintf(stderr, "tessera devices: %s\n", platform.status().to_string().c_str());
      throw CLI::RuntimeError(2);
    }
    if (options->json) {
      std::cout << platform_json(**platform).dump(2) << "\n";
    } else {
      std::cout << platform_text(**platform);
    }
  });
}

}  // namespace tessera::tools
