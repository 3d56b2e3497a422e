// `tessera launch` as a user runs it: rank prefixes, the environment, device slices, the exit
// code and prompt stop when a rank fails, signal forwarding, restarts and their backoff, exec
// failures, nothing outliving the launcher, and a real bootstrap through the store the launcher
// hosts. Runs the built binary (TESSERA_BIN).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cli_run.h"
#include "support/launchers.h"

namespace {

using tessera::coll::testing::count;
using tessera::coll::testing::has;
using tessera::testing::CliRun;

CliRun launch(const std::string& args) {
  return tessera::testing::run_cli(TESSERA_BIN, "launch", args);
}

TEST(LaunchCli, PrefixesEveryLineOfEveryRankOnTheSameStream) {
  const CliRun r = launch(
      "-n 3 -- sh -c 'echo hello from $RANK of $WORLD_SIZE; echo oops $RANK >&2; printf "
      "tail$RANK'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string tag = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(has(r.out, tag + "hello from " + std::to_string(rank) + " of 3\n")) << r.out;
    EXPECT_TRUE(has(r.out, tag + "tail" + std::to_string(rank) + "\n")) << r.out;  // partial line
    EXPECT_TRUE(has(r.err, tag + "oops " + std::to_string(rank) + "\n")) << r.err;
  }
  const CliRun plain = launch("--no-tag-output -n 2 -- sh -c 'echo plain'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out, "plain\nplain\n");
}

TEST(LaunchCli, GivesEachRankTheTorchrunStyleEnvironment) {
  const CliRun r = launch(
      "-n 2 -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
      "$TESSERA_LAUNCHER $TESSERA_STORE_HOSTED $TESSERA_GENERATION; test -n \"$MASTER_PORT\"'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 0] 0 2 0 2 127.0.0.1 tessera 1 0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1] 1 2 1 2 127.0.0.1 tessera 1 0\n")) << r.out;
}

TEST(LaunchCli, DevicesPerRankGivesEachRankItsSlice) {
  const CliRun r = tessera::testing::run_cli(
      "TESSERA_HOST_DEVICES=1 " + std::string(TESSERA_BIN), "launch",
      "-n 2 --devices-per-rank 2 -- sh -c "
      "'echo $TESSERA_HOST_DEVICES $CUDA_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES $ZE_AFFINITY_MASK'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 0] 2 0,1 0,1 0,1\n")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1] 2 2,3 2,3 2,3\n")) << r.out;
  // The discrete mode of the parent's host devices stays (only the count is per rank).
  const CliRun discrete = tessera::testing::run_cli(
      "TESSERA_HOST_DEVICES=4:discrete " + std::string(TESSERA_BIN), "launch",
      "-n 2 --devices-per-rank 2 -- sh -c 'echo $TESSERA_HOST_DEVICES'");
  ASSERT_EQ(discrete.code, 0) << discrete.err;
  EXPECT_TRUE(has(discrete.out, "[rank 1] 2:discrete\n")) << discrete.out;
  const CliRun sliced = tessera::testing::run_cli(
      "CUDA_VISIBLE_DEVICES=4,5,6,7 " + std::string(TESSERA_BIN), "launch",
      "-n 2 --devices-per-rank 2 -- sh -c 'echo $CUDA_VISIBLE_DEVICES'");
  ASSERT_EQ(sliced.code, 0) << sliced.err;
  EXPECT_TRUE(has(sliced.out, "[rank 1] 6,7\n")) << sliced.out;
  const CliRun short_list =
      tessera::testing::run_cli("CUDA_VISIBLE_DEVICES=0,1 " + std::string(TESSERA_BIN), "launch",
                                "-n 2 --devices-per-rank 2 -- true");
  EXPECT_EQ(short_list.code, 2) << short_list.err;
  EXPECT_TRUE(has(short_list.err, "CUDA_VISIBLE_DEVICES='0,1'")) << short_list.err;
}

TEST(LaunchCli, AFailingRankSetsTheExitCodeAndTheOthersAreStoppedPromptly) {
  const auto start = std::chrono::steady_clock::now();
  const CliRun r = launch("-n 3 -- sh -c 'if [ $RANK = 1 ]; then exit 3; fi; sleep 60'");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "rank 1 exited with code 3")) << r.err;
  EXPECT_LT(took, std::chrono::seconds(10)) << "the sleeping ranks were not stopped";
}

// The abort notice (docs/LAUNCH.md, "Cross-host aborts"): the survivors find why the job failed in
// TESSERA_ABORT_NOTICE before the launcher's SIGTERM reaches them, and the file goes with the job.
TEST(LaunchCli, TheOtherRanksReadWhyARankFailedInTheAbortNotice) {
  const CliRun r = launch(
      "-n 2 -- sh -c 'if [ $RANK = 1 ]; then exit 3; fi; echo \"notice at $TESSERA_ABORT_NOTICE\"; "
      "for i in $(seq 100); do if [ -f \"$TESSERA_ABORT_NOTICE\" ]; then cat "
      "\"$TESSERA_ABORT_NOTICE\"; exit 0; fi; sleep 0.05; done; exit 9'");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 0] rank 1 exited with code 3\n")) << r.out << r.err;
  const size_t at = r.out.find("notice at ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string path = r.out.substr(at + 10, r.out.find('\n', at) - at - 10);
  EXPECT_TRUE(has(path, "/tessera-launch-")) << path;
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " outlived the job";
}

TEST(LaunchCli, ARankKilledByASignalIsReportedAs128PlusTheSignal) {
  const CliRun r = launch("-n 2 -- sh -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  EXPECT_EQ(r.code, 128 + 9) << r.err;
  EXPECT_TRUE(has(r.err, "rank 0 killed by signal 9")) << r.err;
}

TEST(LaunchCli, AllRanksSucceedingExitsZeroAndAMissingCommandExits127) {
  EXPECT_EQ(launch("-n 4 -- true").code, 0);
  const CliRun missing = launch("-n 2 -- /nonexistent/program");
  EXPECT_EQ(missing.code, 127);
  EXPECT_TRUE(has(missing.err, "/nonexistent/program")) << missing.err;
  EXPECT_EQ(launch("-n 0 -- true").code, 2);
}

TEST(LaunchCli, TimeoutStopsTheJobWith124) {
  const CliRun r = launch("-n 2 --timeout-s 1 -- sleep 60");
  EXPECT_EQ(r.code, 124) << r.err;
  EXPECT_TRUE(has(r.err, "--timeout-s 1")) << r.err;
}

TEST(LaunchCli, MaxRestartsRestartsAFailedRankWithTheNextGeneration) {
  const CliRun r = launch(
      "-n 2 --max-restarts 1 -- sh -c "
      "'if [ $RANK = 1 ] && [ $TESSERA_GENERATION = 0 ]; then exit 5; fi; echo gen "
      "$TESSERA_GENERATION'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 1] gen 1\n")) << r.out;
  EXPECT_TRUE(has(r.err, "restarting it")) << r.err;
}

TEST(LaunchCli, RestartsBackOffExponentiallyUpToTheCap) {
  // Rank 0 fails in generations 0, 1 and 2; each start prints the machine's uptime
  // (CLOCK_BOOTTIME, 10 ms steps), so the waits can be checked from below without timing them.
  const CliRun r = launch(
      "-n 1 --max-restarts 3 --restart-backoff-ms 100 --restart-backoff-max-ms 150 -- sh -c "
      "'read up rest < /proc/uptime; echo start $up; [ $TESSERA_GENERATION = 3 ]'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "restarting it now (restart 1 of 3")) << r.err;
  EXPECT_TRUE(has(r.err, "restarting it in 100 ms (restart 2 of 3")) << r.err;
  EXPECT_TRUE(has(r.err, "restarting it in 150 ms (restart 3 of 3")) << r.err;  // 200, capped
  std::vector<double> starts;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (const size_t at = line.find("start "); at != std::string::npos) {
      starts.push_back(std::stod(line.substr(at + 6)));
    }
  }
  ASSERT_EQ(starts.size(), 4u) << r.out;
  // A start comes after the previous start's exit plus the backoff.
  EXPECT_GE(starts[2] - starts[1], 0.1 - 0.011) << r.out;
  EXPECT_GE(starts[3] - starts[2], 0.15 - 0.011) << r.out;
  EXPECT_EQ(launch("-n 1 --restart-backoff-ms -1 -- true").code, 2);
  EXPECT_EQ(launch("-n 1 --restart-backoff-max-ms 99999999 -- true").code, 2);
}

TEST(LaunchCli, AMalformedGenerationIsRefusedNamingTheVariable) {
  for (const std::string value : {"abc", "-1", "1.5", "", "99999999999"}) {
    const CliRun r =
        tessera::testing::run_cli("TESSERA_GENERATION='" + value + "' " + std::string(TESSERA_BIN),
                                  "launch", "-n 1 -- echo ran");
    EXPECT_EQ(r.code, 2) << value << ": " << r.err;
    EXPECT_TRUE(has(r.err, "TESSERA_GENERATION")) << r.err;
    EXPECT_TRUE(r.out.empty()) << "a rank ran with TESSERA_GENERATION='" << value << "'";
  }
  const CliRun ok = tessera::testing::run_cli("TESSERA_GENERATION=7 " + std::string(TESSERA_BIN),
                                              "launch", "-n 1 -- sh -c 'echo $TESSERA_GENERATION'");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "[rank 0] 7\n");
}

// A file under the test's temporary directory with `text` and permission bits `mode`.
std::string write_file(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path =
      ::testing::TempDir() + "/launch_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(LaunchCli, ACommandThatCannotBeExecutedSaysWhyAndPrintsNothingAsTheRank) {
  const std::string no_shebang = write_file("no_shebang", "echo hi\n", 0755);
  const std::string bad_interpreter =
      write_file("bad_interpreter", "#!/nonexistent/interp -x\necho hi\n", 0755);
  const std::string not_executable = write_file("not_executable", "#!/bin/sh\n", 0644);
  const std::string directory = ::testing::TempDir() + "/launch_" + std::to_string(getpid());
  std::filesystem::create_directories(directory);
  struct Case {
    std::string path, why;
  };
  const Case cases[] = {
      {no_shebang, "no #! line"},
      {bad_interpreter, "its interpreter '/nonexistent/interp' (from the #! line) was not found"},
      {not_executable, "is not executable"},
      {directory, "is a directory"},
  };
  for (const Case& c : cases) {
    for (const std::string tag : {"", "--no-tag-output "}) {
      const CliRun r = launch(tag + "-n 2 -- " + c.path);
      EXPECT_EQ(r.code, 127) << r.err;
      EXPECT_TRUE(has(r.err, "'" + c.path + "'")) << r.err;
      EXPECT_TRUE(has(r.err, c.why)) << r.err;
      // Only the launcher speaks, and once: the forked child writes nothing before exec.
      EXPECT_FALSE(has(r.err, "[rank ")) << r.err;
      EXPECT_FALSE(has(r.err, "execve failed")) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
  EXPECT_TRUE(has(launch("-n 1 -- " + no_shebang).err, "(Exec format error, ENOEXEC)"));
  EXPECT_TRUE(has(launch("-n 1 -- " + bad_interpreter).err, "(No such file or directory, ENOENT)"));
  for (const std::string& path : {no_shebang, bad_interpreter, not_executable}) {
    std::remove(path.c_str());
  }
  std::filesystem::remove(directory);
}

TEST(LaunchCli, RanksBootstrapThroughTheStoreTheLauncherHosts) {
  const CliRun r = launch("-n 4 -- " + std::string(TESSERA_BOOTSTRAP_PROBE));
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(has(r.out, "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                               " of 4 (tessera): 0,1,2,3\n"))
        << r.out;
  }
}

// Starts `tessera launch -n N -- sh -c SCRIPT` with its stdout on a pipe; returns the launcher's
// pid and the read end.
pid_t start_launcher(int n, const std::string& script, int* read_end) {
  int out[2];
  if (pipe(out) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    const std::string ranks = std::to_string(n);
    execl(TESSERA_BIN, TESSERA_BIN, "launch", "-n", ranks.c_str(), "--", "sh", "-c", script.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  *read_end = out[0];
  return pid;
}

// Reads from `fd` until `word` appeared `times` times or the pipe closed.
void read_until(int fd, const std::string& word, int times, std::string* text) {
  char buf[4096];
  ssize_t n;
  while (count(*text, word) < times && (n = read(fd, buf, sizeof buf)) > 0) text->append(buf, n);
}

void read_all(int fd, std::string* text) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text->append(buf, n);
}

class LaunchForwards : public ::testing::TestWithParam<int> {};

TEST_P(LaunchForwards, TheSignalToEveryRankAndExits128PlusIt) {
  const int signo = GetParam();
  const std::string name = sigabbrev_np(signo);
  int out = -1;
  const pid_t pid = start_launcher(
      3,
      "trap 'echo got " + name + "; exit 0' " + name + "; echo ready; while :; do sleep 0.1; done",
      &out);
  ASSERT_GT(pid, 0);
  std::string text;
  read_until(out, "ready", 3, &text);
  ASSERT_EQ(count(text, "ready"), 3) << text;
  kill(pid, signo);
  read_all(out, &text);
  close(out);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + signo);
  EXPECT_EQ(count(text, "got " + name), 3) << text;
}

INSTANTIATE_TEST_SUITE_P(Signals, LaunchForwards,
                         ::testing::Values(SIGTERM, SIGINT, SIGHUP, SIGQUIT),
                         [](const ::testing::TestParamInfo<int>& signal) {
                           return std::string("SIG") + sigabbrev_np(signal.param);
                         });

// A process that has exited: gone, or a zombie nobody has reaped yet.
bool exited(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

TEST(LaunchCli, RanksDieWithALauncherKilledBySigkill) {
  int out = -1;
  const pid_t pid = start_launcher(2, "echo pid $$; while :; do sleep 0.1; done", &out);
  ASSERT_GT(pid, 0);
  std::string text;
  read_until(out, "pid ", 2, &text);
  std::vector<pid_t> ranks;
  for (size_t at = text.find("pid "); at != std::string::npos; at = text.find("pid ", at + 1)) {
    ranks.push_back(static_cast<pid_t>(std::atoi(text.c_str() + at + 4)));
  }
  ASSERT_EQ(ranks.size(), 2u) << text;
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(out);
  // Bounded, not timed: the ranks get SIGKILL as the launcher dies; allow a slow machine 30 s.
  for (pid_t rank : ranks) {
    bool gone = false;
    for (int i = 0; i < 300 && !gone; ++i) {
      gone = exited(rank);
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(gone) << "rank pid " << rank << " outlived its launcher";
    if (!gone) kill(rank, SIGKILL);
  }
}

// Polls for at most 30 s (a slow machine) until `pid` has exited; bounded, not timed.
bool exits_soon(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    if (exited(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// The pids printed after `word ` in `text`.
std::vector<pid_t> pids_after(const std::string& text, const std::string& word) {
  std::vector<pid_t> pids;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    pids.push_back(static_cast<pid_t>(std::atoi(text.c_str() + at + word.size())));
  }
  return pids;
}

TEST(LaunchCli, ChildrenOfRanksDieWithALauncherKilledBySigkill) {
  // PR_SET_PDEATHSIG kills each rank, not the sleep it started; the watchdog kills its group.
  int out = -1;
  const pid_t pid = start_launcher(2, "sleep 1000 & echo child $!; wait", &out);
  ASSERT_GT(pid, 0);
  std::string text;
  read_until(out, "child ", 2, &text);
  const std::vector<pid_t> children = pids_after(text, "child ");
  ASSERT_EQ(children.size(), 2u) << text;
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(out);
  for (pid_t child : children) {
    const bool gone = exits_soon(child);
    EXPECT_TRUE(gone) << "pid " << child << ", started by a rank, outlived its launcher";
    if (!gone) kill(child, SIGKILL);
  }
}

TEST(LaunchCli, BackgroundProcessesIgnoringSigtermDoNotOutliveAFinishedJob) {
  // The rank exits 0 and leaves a sleep that ignores SIGTERM and holds none of its pipes.
  const CliRun r =
      launch("-n 1 -- sh -c \"trap '' TERM; sleep 1000 >/dev/null 2>&1 & echo child \\$!\"");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<pid_t> children = pids_after(r.out, "child ");
  ASSERT_EQ(children.size(), 1u) << r.out;
  const bool gone = exits_soon(children[0]);
  EXPECT_TRUE(gone) << "pid " << children[0] << ", started by a rank, outlived its launcher";
  if (!gone) kill(children[0], SIGKILL);
}

}  // namespace
