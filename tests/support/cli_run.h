// Runs a `tessera` subcommand as a user would and captures what it printed, for the CLI contract
// tests (exit codes, one-line errors, JSON on stdout). Header-only; needs GoogleTest for TempDir.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace tessera::testing {

struct CliRun {
  int code = -1;  // exit status; -1 if the command could not run or was killed
  std::string out, err;
};

// `binary subcommand args` through the shell (args may quote). stderr goes to a file named by
// this process's pid, since CTest runs the tests in parallel processes.
inline CliRun run_cli(const std::string& binary, const std::string& subcommand,
                      const std::string& args) {
  const std::string err_path =
      ::testing::TempDir() + "/tessera_" + subcommand + "_err." + std::to_string(getpid()) + ".txt";
  const std::string cmd = binary + " " + subcommand + " " + args + " 2>" + err_path;
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  r.err = text.str();
  std::remove(err_path.c_str());
  return r;
}

}  // namespace tessera::testing
