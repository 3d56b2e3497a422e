// detect_launch() for each launcher's environment, the precedence between them, and bad values.
#include <gtest/gtest.h>

#include "env_guard.h"
#include "internal.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll {
namespace {

using tessera::testing::LaunchEnvGuard;

void expect_error_naming(const Result<LaunchInfo>& r, const std::string& text) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().to_string();
}

TEST(DetectLaunch, NoLauncherIsRankZeroOfOne) {
  LaunchEnvGuard env;
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::kNone);
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->size, 1);
  EXPECT_TRUE(info->store_host.empty());
  EXPECT_FALSE(info->hostname.empty());
  EXPECT_EQ(launcher_name(info->launcher), "none");
}

TEST(DetectLaunch, ReadsTorchrunStyleVariables) {
  LaunchEnvGuard env;
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "1");
  env.set("LOCAL_WORLD_SIZE", "4");
  env.set("MASTER_ADDR", "node7");
  env.set("MASTER_PORT", "29500");
  env.set("TESSERA_GENERATION", "2");
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::kTorchrun);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 4);
  EXPECT_EQ(info->store_host, "node7");
  EXPECT_EQ(info->store_port, 29500);
  EXPECT_FALSE(info->store_hosted_by_launcher);
  EXPECT_EQ(info->generation, 2);
}

TEST(DetectLaunch, TesseraStorePortMovesTheStoreOffMasterPort) {
  LaunchEnvGuard env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "29500");
  env.set("TESSERA_STORE_PORT", "29601");
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->store_port, 29601);
  EXPECT_EQ(info->local_size, 2);  // no LOCAL_* variables: one host
}

TEST(DetectLaunch, TesseraLaunchMeansTheLauncherHostsTheStore) {
  LaunchEnvGuard env;
  env.set("TESSERA_LAUNCHER", "tessera");
  env.set("TESSERA_STORE_HOSTED", "1");
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("LOCAL_RANK", "0");
  env.set("LOCAL_WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "40000");
  env.set("OMPI_COMM_WORLD_RANK", "1");  // loses: tessera comes first
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::kTessera);
  EXPECT_TRUE(info->store_hosted_by_launcher);
  EXPECT_EQ(info->rank, 0);
}

TEST(DetectLaunch, ReadsOpenMpiVariables) {
  LaunchEnvGuard env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.set("PMIX_RANK", "3");  // mpirun sets both; OpenMPI's variables win
  env.set("SLURM_PROCID", "0");
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
  EXPECT_TRUE(info->store_host.empty());
}

TEST(DetectLaunch, ReadsSlurmVariablesAndPlacesTheStoreOnTheFirstNode) {
  LaunchEnvGuard env;
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "1");
  env.set("SLURM_NODEID", "2");
  env.set("SLURM_STEP_TASKS_PER_NODE", "2(x3),2");
  env.set("SLURM_STEP_NODELIST", "gpu[07-10],cpu1");
  env.set("SLURM_JOB_ID", "1234");
  env.set("SLURM_STEP_ID", "0");
  auto info = detect_launch();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, Launcher::kSlurm);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
  EXPECT_EQ(info->store_host, "gpu07");
  EXPECT_EQ(info->store_port, detail::slurm_derived_port(1234, 0));
  env.set("TESSERA_STORE_PORT", "31000");
  auto pinned = detect_launch();
  ASSERT_TRUE(pinned.ok()) << pinned.status().to_string();
  EXPECT_EQ(pinned->store_port, 31000);
}

TEST(DetectLaunch, BadValuesNameTheVariableAndTheValue) {
  {
    LaunchEnvGuard env;
    env.set("RANK", "two");
    env.set("WORLD_SIZE", "4");
    expect_error_naming(detect_launch(), "RANK='two'");
  }
  {
    LaunchEnvGuard env;
    env.set("RANK", "4");
    env.set("WORLD_SIZE", "4");
    env.set("MASTER_ADDR", "h");
    env.set("MASTER_PORT", "1");
    expect_error_naming(detect_launch(), "RANK='4' is not below WORLD_SIZE='4'");
  }
  {
    LaunchEnvGuard env;
    env.set("RANK", "1");
    env.set("WORLD_SIZE", "4");
    env.set("MASTER_PORT", "29500");
    expect_error_naming(detect_launch(), "MASTER_ADDR");
  }
  {
    LaunchEnvGuard env;
    env.set("RANK", "1");
    env.set("WORLD_SIZE", "4");
    env.set("MASTER_ADDR", "h");
    env.set("MASTER_PORT", "70000");
    expect_error_naming(detect_launch(), "MASTER_PORT='70000'");
  }
  {
    LaunchEnvGuard env;
    env.set("TESSERA_LAUNCHER", "mpirun");
    expect_error_naming(detect_launch(), "TESSERA_LAUNCHER='mpirun'");
  }
  {
    LaunchEnvGuard env;
    env.set("TESSERA_GENERATION", "-1");
    expect_error_naming(detect_launch(), "TESSERA_GENERATION='-1'");
  }
  {
    LaunchEnvGuard env;
    env.set("OMPI_COMM_WORLD_RANK", "0");
    env.set("OMPI_COMM_WORLD_SIZE", "x2");
    expect_error_naming(detect_launch(), "OMPI_COMM_WORLD_SIZE='x2'");
  }
  {
    LaunchEnvGuard env;
    env.set("PMIX_RANK", "r0");
    expect_error_naming(detect_launch(), "PMIX_RANK='r0'");
  }
  {
    LaunchEnvGuard env;
    env.set("SLURM_PROCID", "0");
    env.set("SLURM_NTASKS", "2");
    env.set("SLURM_LOCALID", "0");
    env.set("SLURM_TASKS_PER_NODE", "2");
    env.set("SLURM_STEP_NODELIST", "node[01-02");
    env.set("SLURM_JOB_ID", "7");
    expect_error_naming(detect_launch(), "SLURM_STEP_NODELIST='node[01-02'");
  }
  {
    LaunchEnvGuard env;
    env.set("TESSERA_LAUNCHER", "tessera");
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "2");
    env.set("MASTER_ADDR", "127.0.0.1");
    env.set("MASTER_PORT", "1234");
    env.set("TESSERA_STORE_HOSTED", "yes");
    expect_error_naming(detect_launch(), "TESSERA_STORE_HOSTED='yes'");
  }
}

TEST(SlurmLists, FirstHostExpandsTheFirstBracketRange) {
  EXPECT_EQ(detail::slurm_first_host("node[01-04]").value_or(""), "node01");
  EXPECT_EQ(detail::slurm_first_host("node[7,9-10],gpu1").value_or(""), "node7");
  EXPECT_EQ(detail::slurm_first_host("a1,b2").value_or(""), "a1");
  EXPECT_EQ(detail::slurm_first_host("rack[2-3]-n[004-008]").value_or(""), "rack2-n004");
  EXPECT_FALSE(detail::slurm_first_host("").ok());
  EXPECT_FALSE(detail::slurm_first_host("n[1-2").ok());
}

TEST(SlurmLists, TasksPerNodeReadsRepeats) {
  EXPECT_EQ(detail::slurm_tasks_on_node("4", 0).value_or(-1), 4);
  EXPECT_EQ(detail::slurm_tasks_on_node("2(x3),1", 2).value_or(-1), 2);
  EXPECT_EQ(detail::slurm_tasks_on_node("2(x3),1", 3).value_or(-1), 1);
  EXPECT_FALSE(detail::slurm_tasks_on_node("2(x3),1", 4).ok());
  EXPECT_FALSE(detail::slurm_tasks_on_node("2(3)", 0).ok());
}

TEST(SlurmLists, DerivedPortsStayInTheirRange) {
  for (int64_t job : {0, 1, 99999, 123456789}) {
    const int port = detail::slurm_derived_port(job, 3);
    EXPECT_GE(port, 20000);
    EXPECT_LT(port, 30000);
  }
}

}  // namespace
}  // namespace tessera::coll
