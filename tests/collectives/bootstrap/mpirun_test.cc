// The bootstrap under OpenMPI's mpirun: identity from OMPI_COMM_WORLD_*, the exchange through
// PMIx. Skips where mpirun or PMIx is missing.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "internal.h"

namespace {

TEST(Mpirun, TwoRanksBootstrapAndAllgatherThroughPmix) {
  const std::string mpirun = TESSERA_MPIRUN;
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not found at configure time";
  if (!tessera::coll::detail::pmix_available()) GTEST_SKIP() << "built without PMIx";
  // Under ASan, LeakSanitizer would flag the few bytes libpmix keeps until exit.
  const std::string cmd =
      "timeout 60 " + mpirun +
      " --allow-run-as-root --oversubscribe -n 2 -x LSAN_OPTIONS=suppressions=" +
      TESSERA_LSAN_SUPPRESSIONS + " " + TESSERA_BOOTSTRAP_PROBE + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  ASSERT_EQ(WEXITSTATUS(status), 0) << cmd << "\n" << out;
  EXPECT_NE(out.find("rank 0 of 2 (openmpi): 0,1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 of 2 (openmpi): 0,1\n"), std::string::npos) << out;
}

}  // namespace
