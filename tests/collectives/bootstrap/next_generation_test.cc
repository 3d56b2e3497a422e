// Bootstrap::next_generation: switching to the generation the launcher publishes after a restart,
// the clear timeout when no restart happens, and the bootstraps that cannot re-form.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "env_guard.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Bootstrap> tcp_rank(int rank, int size, int port, int generation) {
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return nullptr;
  LaunchInfo info;
  info.rank = rank;
  info.size = size;
  info.local_rank = rank;
  info.local_size = size;
  info.launcher = Launcher::kTessera;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.generation = generation;
  return Bootstrap::from_parts(info, std::move(*store), BootstrapOptions{5000ms});
}

TEST(NextGeneration, TimesOutNamingTheGenerationWaitedForWhenNoRankIsRestarted) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto boot = tcp_rank(0, 2, (*server)->port(), 0);
  ASSERT_NE(boot, nullptr);
  ASSERT_TRUE(boot->store().set(kGenerationKey, "0").ok());  // what tessera launch publishes
  auto next = boot->next_generation(300ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(next.status().message().find("waiting for generation 1"), std::string::npos)
      << next.status().to_string();
  EXPECT_NE(next.status().message().find("no restart within 300 ms"), std::string::npos)
      << next.status().to_string();
  EXPECT_EQ(boot->info().generation, 0);
}

TEST(NextGeneration, TimesOutTooWhenTheKeyWasNeverPublished) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto boot = tcp_rank(1, 2, (*server)->port(), 3);
  ASSERT_NE(boot, nullptr);
  auto next = boot->next_generation(200ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(next.status().message().find("rank 1 waiting for generation 4"), std::string::npos)
      << next.status().to_string();
  EXPECT_NE(next.status().message().find("not set"), std::string::npos)
      << next.status().to_string();
}

TEST(NextGeneration, SwitchesToThePublishedGenerationAndMeetsTheRestartedRank) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int port = (*server)->port();
  auto survivor = tcp_rank(0, 2, port, 0);
  ASSERT_NE(survivor, nullptr);
  ASSERT_TRUE(survivor->store().set(kGenerationKey, "0").ok());
  EXPECT_EQ(survivor->next_world_index(), 0u);
  EXPECT_EQ(survivor->next_world_index(), 1u);
  // The launcher: restarts rank 1 a little later, publishing generation 1 first.
  std::thread launcher([&] {
    std::this_thread::sleep_for(100ms);
    auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->set(kRestartedRankKey, "1").ok());
    ASSERT_TRUE((*store)->set(kGenerationKey, "1").ok());
  });
  auto next = survivor->next_generation(5000ms);
  launcher.join();
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(*next, 1);
  EXPECT_EQ(survivor->info().generation, 1);
  // World communicator names restart in the new generation, as in the restarted rank.
  EXPECT_EQ(survivor->next_world_index(), 0u);

  // The restarted rank starts in generation 1; both exchange under generation 1's keys.
  auto restarted = tcp_rank(1, 2, port, 1);
  ASSERT_NE(restarted, nullptr);
  Result<std::vector<std::string>> theirs = internal_error("not run");
  std::thread other([&] { theirs = restarted->allgather("after-restart", "r1"); });
  auto mine = survivor->allgather("after-restart", "r0");
  other.join();
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  ASSERT_TRUE(theirs.ok()) << theirs.status().to_string();
  EXPECT_EQ(*mine, (std::vector<std::string>{"r0", "r1"}));
  EXPECT_EQ(*theirs, *mine);
}

TEST(NextGeneration, IsUnimplementedForASingleRankWithoutALauncher) {
  tessera::testing::LaunchEnvGuard env;
  auto boot = Bootstrap::from_environment(BootstrapOptions{1000ms});
  ASSERT_TRUE(boot.ok()) << boot.status().to_string();
  auto next = (*boot)->next_generation(100ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kUnimplemented) << next.status().to_string();
  EXPECT_NE(next.status().message().find("no restarts"), std::string::npos)
      << next.status().to_string();
}

}  // namespace
}  // namespace tessera::coll
