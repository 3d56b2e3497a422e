// `tessera`: the command-line face of the runtime. Subcommands: devices, version (probe, plan,
// bench, ckpt, launch and demo come with their layers).
#include <cstdio>

#include "commands.h"
#include "tessera/common/log.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Tessera: a vendor-neutral accelerator HAL and distributed-training runtime.\n"
      "Environment variables are listed in docs/ENVIRONMENT.md; TESSERA_LOG=info shows what the "
      "runtime decides.",
      "tessera"};
  app.require_subcommand(1);
  app.fallthrough();
  tessera::tools::add_bench_coll_command(app);
  tessera::tools::add_ckpt_command(app);
  tessera::tools::add_demo_command(app);
  tessera::tools::add_devices_command(app);
  tessera::tools::add_launch_command(app);
  tessera::tools::add_plan_command(app);
  tessera::tools::add_probe_command(app);
  tessera::tools::add_version_command(app);
  // A malformed TESSERA_LOG / TESSERA_LOG_SUBSYS is a bad option like any other (exit 2), not a
  // warning the logger prints and a default it falls back to.
  if (tessera::Status env = tessera::log::check_environment(); !env.ok()) {
    std::fprintf(stderr, "tessera: %s\n", env.message().c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
