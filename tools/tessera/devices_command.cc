// `tessera devices [--json] [--backends LIST]`: every backend's state with its reason, and every
// device of the enabled ones. Exit status 0 whenever the listing itself worked, even with zero
// devices (zero devices is a normal state); 2 on bad options.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "format.h"
#include "tessera/hal/hal.h"
#include "tessera/topo/platform_json.h"

namespace tessera::tools {
namespace {

struct DevicesOptions {
  bool json = false;
  std::string backends;  // empty: TESSERA_BACKENDS or all
};

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
  Table devices(
      {"DEVICE", "NAME", "VENDOR", "MEMORY", "UNITS", "PCI", "CAPABILITIES", "MODULE FORMATS"});
  for (const auto& device : platform.devices()) {
    const auto& p = device.properties();
    std::string caps;
    for (const auto& name : topo::capability_names(p.capabilities))
      caps += (caps.empty() ? "" : ",") + name;
    devices.add({device.id(), p.name, p.vendor, format_bytes(p.total_memory),
                 std::to_string(p.compute_units), p.pci_bus_id[0] ? p.pci_bus_id : "-", caps,
                 hal::module_format_names(device.module_formats())});
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
      std::cout << topo::platform_json(**platform) << "\n";
    } else {
      std::cout << platform_text(**platform);
    }
  });
}

}  // namespace tessera::tools
