// `tessera version [--json]`: the version, the backend ABI and how this build was made.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::tools {

void add_version_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("version", "Print the Tessera version and build facts");
  cmd->add_flag("--json", *json, "Print JSON for machines");
  cmd->callback([json] {
    nlohmann::ordered_json out = {
        {"version", TESSERA_VERSION},
        {"backend_abi", {{"major", TSR_BACKEND_ABI_MAJOR}, {"minor", TSR_BACKEND_ABI_MINOR}}},
        {"build_type", TESSERA_BUILD_TYPE},
        {"compiler", TESSERA_COMPILER},
        {"backends_built", TESSERA_BUILT_BACKENDS},
    };
    if (*json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::cout << "tessera " << TESSERA_VERSION << "\n"
              << "backend ABI " << TSR_BACKEND_ABI_MAJOR << "." << TSR_BACKEND_ABI_MINOR << "\n"
              << "build " << TESSERA_BUILD_TYPE << ", " << TESSERA_COMPILER << "\n"
              << "backends built: " << TESSERA_BUILT_BACKENDS << "\n";
  });
}

}  // namespace tessera::tools
