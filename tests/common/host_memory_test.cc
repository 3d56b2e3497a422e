// The RAM probe over sample /proc and cgroup trees: MemAvailable, cgroup v2 and v1 limits minus
// usage (reclaimable cache given back), the tightest level winning, "no limit" in both spellings.
#include "tessera/common/host_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::host_memory {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kGiB = uint64_t(1) << 30;

// A fresh sample root: root()/proc and root()/cgroup, removed at the end of the test.
class SampleTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("host_memory_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    write("proc/meminfo",
          "MemTotal:       25165824 kB\nMemFree:  1000 kB\n"
          "MemAvailable:   20971520 kB\n");  // 24 GiB, 20 GiB available
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  Roots roots() const { return {(root_ / "proc").string(), (root_ / "cgroup").string()}; }
  fs::path root_;
};

TEST(HostMemoryParsing, ReadsMeminfoLimitsAndStatFields) {
  EXPECT_EQ(meminfo_bytes("MemTotal: 10 kB\nMemAvailable:    2048 kB\n", "MemAvailable"), 2u << 20);
  EXPECT_EQ(meminfo_bytes("MemTotal: 10 kB\n", "MemAvailable"), std::nullopt);
  EXPECT_EQ(meminfo_bytes("MemAvailable: lots kB\n", "MemAvailable"), std::nullopt);
  EXPECT_EQ(parse_limit("4294967296\n"), 4 * kGiB);
  EXPECT_EQ(parse_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_limit("9223372036854771712\n"), std::nullopt) << "cgroup v1's no limit";
  EXPECT_EQ(stat_field("active_file 5\ninactive_file 1024\n", "inactive_file"), 1024u);
  EXPECT_EQ(stat_field("total_inactive_file 7\n", "inactive_file"), std::nullopt);
}

TEST_F(SampleTree, WithoutACgroupLimitMemAvailableIsUsable) {
  write("proc/self/cgroup", "0::/user.slice/job\n");
  write("cgroup/user.slice/job/memory.max", "max\n");
  const HostMemory m = probe(roots());
  EXPECT_EQ(m.physical, 24 * kGiB);
  EXPECT_EQ(m.usable, 20 * kGiB);
  EXPECT_FALSE(m.cgroup_free.has_value());
}

// A 4 GiB cgroup v2 limit with 1.5 GiB in use, 0.5 GiB of it inactive file cache: 3 GiB usable,
// though the machine has 20 GiB available.
TEST_F(SampleTree, ACgroupV2LimitMinusItsUsageBoundsUsableMemory) {
  write("proc/self/cgroup", "0::/job\n");
  write("cgroup/job/memory.max", "4294967296\n");
  write("cgroup/job/memory.current", std::to_string(3 * kGiB / 2) + "\n");
  write("cgroup/job/memory.stat", "anon 1\ninactive_file " + std::to_string(kGiB / 2) + "\n");
  const HostMemory m = probe(roots());
  EXPECT_EQ(m.usable, 3 * kGiB);
  EXPECT_EQ(m.cgroup_limit, 4 * kGiB);
  EXPECT_NE(m.describe().find("limit 4.0 GiB, 3.0 GiB free"), std::string::npos) << m.describe();
  EXPECT_NE(m.describe().find("MemAvailable 20.0 GiB"), std::string::npos) << m.describe();
}

// The parent's limit is the tighter one; a level without files (the host's path seen from inside
// a container) is skipped.
TEST_F(SampleTree, TheTightestCgroupLevelWins) {
  write("proc/self/cgroup", "0::/outer/inner\n");
  write("cgroup/outer/memory.max", std::to_string(2 * kGiB) + "\n");
  write("cgroup/outer/memory.current", std::to_string(kGiB) + "\n");
  write("cgroup/outer/inner/memory.max", std::to_string(8 * kGiB) + "\n");
  write("cgroup/outer/inner/memory.current", "0\n");
  HostMemory m = probe(roots());
  EXPECT_EQ(m.usable, kGiB);
  EXPECT_EQ(fs::path(m.cgroup_dir).filename(), "outer");

  write("proc/self/cgroup", "0::/host/path/of/container\n");
  write("cgroup/memory.max", std::to_string(6 * kGiB) + "\n");  // the container's own cgroup
  m = probe(roots());
  EXPECT_EQ(m.usable, 6 * kGiB);
}

TEST_F(SampleTree, ACgroupV1MemoryControllerLimitBoundsUsableMemory) {
  write("proc/self/cgroup", "5:devices:/\n4:cpu,memory:/docker/abc\n0::/\n");
  write("cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  write("cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(kGiB) + "\n");
  write("cgroup/memory/docker/abc/memory.stat", "total_inactive_file 0\n");
  write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  const HostMemory m = probe(roots());
  EXPECT_EQ(m.usable, 3 * kGiB);
}

TEST_F(SampleTree, AMachineWithoutMeminfoFallsBackToPhysicalMemory) {
  fs::remove(root_ / "proc/meminfo");
  const HostMemory m = probe(roots());
  EXPECT_FALSE(m.available.has_value());
  EXPECT_EQ(m.usable, m.physical);
  EXPECT_GT(m.physical, 0u);
}

TEST(HostMemoryProbe, TheRealMachineHasSomeUsableMemoryNoMoreThanItsRam) {
  const HostMemory m = probe();
  EXPECT_GT(m.usable, 0u);
  EXPECT_LE(m.usable, m.physical);
}

}  // namespace
}  // namespace tessera::host_memory
