// Subcommands of the `tessera` tool. Each add_*_command registers its CLI11 subcommand and the
// callback that runs it; the callback throws CLI::RuntimeError(exit_code) on failure after
// printing one clear line to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::tools {

void add_bench_coll_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_devices_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_probe_command(CLI::App& app);
void add_version_command(CLI::App& app);

}  // namespace tessera::tools
