// `tessera bench coll` as a user runs it, under `tessera launch`: checked runs of every operation
// report zero wrong elements, the table has one row per size, --json is one object, bad options
// exit 2 with one line.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

using tessera::testing::run_cli;

std::string launched(int nranks, const std::string& bench_args) {
  return "-n " + std::to_string(nranks) + " --no-tag-output -- " TESSERA_BIN " bench coll " +
         bench_args;
}

TEST(BenchColl, CheckedRunsOfEveryOperationFindNoWrongElements) {
  for (const char* op : {"allreduce", "reduce", "broadcast", "allgather", "reduce_scatter",
                         "alltoall", "sendrecv"}) {
    auto r = run_cli(TESSERA_BIN, "launch",
                     launched(3, std::string("-o ") + op +
                                     " -d bf16 -r max --root 2 -b 4 -e 40K "
                                     "-f 10 -n 2 -w 1 -c 1"));
    EXPECT_EQ(r.code, 0) << op << ": " << r.err;
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << op << r.out;
    int rows = 0;
    for (size_t at = 0; (at = r.out.find("\n ", at)) != std::string::npos; ++at) ++rows;
    EXPECT_EQ(rows, 5) << op << ": one row per size 4, 40, 400, 4000, 40000\n" << r.out;
  }
}

TEST(BenchColl, JsonHasOneRowPerSizeWithBothPlacements) {
  auto r = run_cli(TESSERA_BIN, "launch",
                   launched(2,
                            "-o reduce_scatter -d half -r avg -b 1K -e 64K -f 8 -n 2 -w 1 "
                            "--json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["op"], "reduce_scatter");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["wrong"], 0);
  ASSERT_EQ(j["rows"].size(), 3u);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["out_of_place"]["wrong"], 0);
    EXPECT_EQ(row["in_place"]["wrong"], 0);
    EXPECT_GT(row["out_of_place"]["time_us"].get<double>(), 0);
  }
}

TEST(BenchColl, BadOptionsExitTwoWithOneLine) {
  auto r = run_cli(TESSERA_BIN, "bench", "coll -o sum");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-r here"), std::string::npos) << r.err;
  r = run_cli(TESSERA_BIN, "bench", "coll -b 1X");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-b '1X'"), std::string::npos) << r.err;
  r = run_cli(TESSERA_BIN, "bench", "coll --memory gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--memory 'gpu': expected host or device"), std::string::npos) << r.err;
  r = run_cli(TESSERA_BIN, "bench", "coll -G 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-G expects 0"), std::string::npos) << r.err;
  r = run_cli(TESSERA_BIN, "bench", "coll -G 0 --memory device");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("-G 0 and --memory device disagree"), std::string::npos) << r.err;
}

// A size whose buffers cannot fit is refused before anything is allocated, naming the size, the
// need and the limit, instead of the rank being OOM-killed or the machine swapping. The limits are
// injected: a host device of 64 MiB (two 64 MiB device buffers do not fit it), and a host device
// declared far larger than any machine's RAM, so that the RAM check (MemAvailable, cgroup limit)
// is what refuses 4 TiB buffers.
TEST(BenchColl, RefusesSizesWhoseBuffersCannotFitNamingTheNeedAndTheLimit) {
  auto r = run_cli("TESSERA_HOST_DEVICE_MEMORY=64M " TESSERA_BIN, "launch",
                   launched(2, "-b 64M -e 64M -n 1 -w 0"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("-e 64.0 MiB: allreduce over 2 ranks needs buffers of 64.0 MiB: 128.0 MiB "
                       "of device memory (2 buffers) on host:0, which has 64.0 MiB free of "
                       "64.0 MiB"),
            std::string::npos)
      << r.err;
  r = run_cli("TESSERA_HOST_DEVICE_MEMORY=64T " TESSERA_BIN, "bench", "coll -b 4T -e 4T -n 1");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("20.0 TiB of RAM on this host (1 local rank(s) x 20.0 TiB, host device "
                       "memory included), but the ranks can use"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("MemAvailable"), std::string::npos) << r.err;
  r = run_cli(TESSERA_BIN, "bench", "coll -G 0 -b 4T -e 4T -n 1");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("8.0 TiB of RAM on this host"), std::string::npos) << r.err;
}

// A malformed logging variable is a bad option of every command, not a warning and a default.
TEST(BenchColl, AMalformedLoggingVariableExitsTwoNamingIt) {
  auto r = run_cli("TESSERA_LOG=whatever " TESSERA_BIN, "bench", "coll -G 0 -b 1K -e 1K -n 1");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("TESSERA_LOG='whatever': expected error, warn, info, debug or trace"),
            std::string::npos)
      << r.err;
  r = run_cli("TESSERA_LOG_SUBSYS=coll,nccl " TESSERA_BIN, "bench", "coll -G 0 -b 1K -e 1K -n 1");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("TESSERA_LOG_SUBSYS='coll,nccl': 'nccl' is not a subsystem"),
            std::string::npos)
      << r.err;
}

// Device memory by default, as nccl-tests; the header and the JSON say which memory and which
// route. On discrete host devices (the CPU cannot touch them) the route is staged.
TEST(BenchColl, DeviceMemoryByDefaultAndTheHeaderNamesMemoryAndRoute) {
  auto r = run_cli("TESSERA_HOST_DEVICES=1:discrete TESSERA_COLL_DEVICE_PATH=staged " TESSERA_BIN,
                   "launch", launched(2, "-b 1M -e 1M -n 2 -w 1"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("memory: device host:0 (not addressable by the CPU) route: staged"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  r = run_cli(TESSERA_BIN, "launch", launched(2, "-G 0 -b 1K -e 1K -n 2 -w 1 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["memory"], "host");
  EXPECT_EQ(j["route"], "host");
  EXPECT_EQ(j["wrong"], 0);
}

}  // namespace
