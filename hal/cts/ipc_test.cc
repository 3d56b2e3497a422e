// IPC handles between two processes: this process exports device memory, a child (this binary
// re-executed with --ipc-child, see ipc_child.cc) opens it, checks our pattern and writes its
// own, which we then read. The child runs under a deadline and is killed past it: never a hang.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fixture.h"
#include "ipc_child.h"
#include "support.h"

extern char** environ;

namespace tessera::cts {
namespace {

class Ipc : public DeviceTest {};

constexpr auto kChildDeadline = std::chrono::seconds(120);  // generous for sanitizer builds

// Runs the child and returns its exit status as text ("exit 0", "signal 9", ...), or fails.
::testing::AssertionResult run_child(const std::string& hex_handle, std::string* outcome) {
  const Context& ctx = context();
  if (ctx.self_exe.empty()) return ::testing::AssertionFailure() << "cannot find /proc/self/exe";
  std::vector<std::string> args = {ctx.self_exe, "--ipc-child", hex_handle, "--backend",
                                   ctx.backend->path()};
  if (!ctx.options.empty()) {
    args.push_back("--options");
    args.push_back(ctx.options);
  }
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, ctx.self_exe.c_str(), nullptr, nullptr, argv.data(), environ);
  if (spawned != 0) {
    return ::testing::AssertionFailure() << "posix_spawn failed: " << std::strerror(spawned);
  }
  const auto deadline = std::chrono::steady_clock::now() + kChildDeadline;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return ::testing::AssertionFailure() << "waitpid failed";
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return ::testing::AssertionFailure() << "the IPC child did not finish within "
                                           << kChildDeadline.count() << " s and was killed";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) {
    *outcome = "exit " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    *outcome = "signal " + std::to_string(WTERMSIG(status));
  } else {
    *outcome = "status " + std::to_string(status);
  }
  return ::testing::AssertionSuccess();
}

CTS_TEST(Ipc, SharesDeviceMemoryWithAChildProcess, "ipc_get_handle", "ipc_open_handle",
         "ipc_close_handle") {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory shared;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, kIpcBytes, &shared));
  const auto parent_pattern = make_pattern(kIpcBytes, kIpcParentSalt);
  ASSERT_TRUE(copy_and_wait(shared.get(), parent_pattern.data(), kIpcBytes, stream));
  tsr_ipc_handle handle{};
  CTS_ASSERT_OK(api().ipc_get_handle(shared.get(), &handle));

  std::string outcome;
  ASSERT_TRUE(run_child(hex_encode(handle), &outcome));
  ASSERT_EQ(outcome, "exit 0") << "the IPC child failed (its stderr says why)";

  std::vector<uint8_t> seen(kIpcBytes);
  ASSERT_TRUE(copy_and_wait(seen.data(), shared.get(), kIpcBytes, stream));
  const auto child_pattern = make_pattern(kIpcBytes, kIpcChildSalt);
  EXPECT_TRUE(same_bytes(child_pattern.data(), seen.data(), kIpcBytes))
      << "the child's writes are not visible to the exporter";
}

CTS_TEST(Ipc, RefusesAGarbageHandleWithoutCrashing, "ipc_open_handle") {
  SCOPED_TRACE(seed_note());
  auto rng = make_rng();
  tsr_ipc_handle zero{};
  tsr_ipc_handle random{};
  for (auto& byte : random.bytes) byte = static_cast<uint8_t>(rng());
  for (const tsr_ipc_handle* handle : {&zero, &random}) {
    void* mapped = reinterpret_cast<void*>(uintptr_t{0x7e57});
    const tsr_status status = api().ipc_open_handle(0, handle, &mapped);
    EXPECT_NE(status, TSR_OK) << "a " << (handle == &zero ? "zero" : "random")
                              << " handle was accepted";
    if (status != TSR_OK) {
      EXPECT_STRNE(api().last_error(), "") << "the refusal has no message";
    }
    EXPECT_EQ(mapped, reinterpret_cast<void*>(uintptr_t{0x7e57}))
        << "outputs are written only on TSR_OK";
  }
}

CTS_TEST(Ipc, RefusesToExportAnythingButTheBaseOfADeviceAllocation, "ipc_get_handle") {
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 8192, &block));
  int on_stack = 0;
  tsr_ipc_handle handle{};
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().ipc_get_handle(block.get() + 256, &handle));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().ipc_get_handle(&on_stack, &handle));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().ipc_get_handle(nullptr, &handle));
}

}  // namespace
}  // namespace tessera::cts
