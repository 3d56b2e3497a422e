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

// What node 0's launcher publishes when node 1 (ranks 2 and 3 of 4) is lost: the old ranks of
// the new generation's world first, then the generation.
void publish_shrink(int port, int generation, const std::string& old_ranks) {
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->set(generation_old_ranks_key(generation), old_ranks).ok());
  ASSERT_TRUE((*store)->set(kGenerationKey, std::to_string(generation)).ok());
}

TEST(NextGeneration, TakesTheSurvivorsNewRankAndSizeWhenTheWorldShrinks) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int port = (*server)->port();
  // Ranks 0 and 2 of 4 survive (nodes of one rank each): they become ranks 0 and 1 of 2.
  auto first = tcp_rank(0, 4, port, 0);
  auto second = tcp_rank(2, 4, port, 0);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->old_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(first->shrunk());
  ASSERT_TRUE(first->store().set(kGenerationKey, "0").ok());
  publish_shrink(port, 1, "0,2");
  for (auto* boot : {&first, &second}) {
    auto next = (*boot)->next_generation(5000ms);
    ASSERT_TRUE(next.ok()) << next.status().to_string();
    EXPECT_EQ(*next, 1);
    EXPECT_EQ((*boot)->info().size, 2);
    EXPECT_EQ((*boot)->info().local_size, 4);  // the node's layout is not the world's
    EXPECT_EQ((*boot)->old_ranks(), (std::vector<int>{0, 2}));
    EXPECT_TRUE((*boot)->shrunk());
  }
  EXPECT_EQ(first->info().rank, 0);
  EXPECT_EQ(second->info().rank, 1);
  EXPECT_EQ(second->info().local_rank, 2);
  // Both exchange in the smaller world.
  Result<std::vector<std::string>> theirs = internal_error("not run");
  std::thread other([&] { theirs = second->allgather("after-shrink", "b"); });
  auto mine = first->allgather("after-shrink", "a");
  other.join();
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  ASSERT_TRUE(theirs.ok()) << theirs.status().to_string();
  EXPECT_EQ(*mine, (std::vector<std::string>{"a", "b"}));
  // A later restart without a node loss keeps the world: the identity again.
  ASSERT_TRUE(first->store().set(kGenerationKey, "2").ok());
  auto restarted = first->next_generation(5000ms);
  ASSERT_TRUE(restarted.ok()) << restarted.status().to_string();
  EXPECT_EQ(first->info().rank, 0);
  EXPECT_EQ(first->info().size, 2);
  EXPECT_EQ(first->old_ranks(), (std::vector<int>{0, 1}));
  EXPECT_FALSE(first->shrunk());
}

TEST(NextGeneration, RefusesAWorldThatLeavesThisRankOut) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto boot = tcp_rank(3, 4, (*server)->port(), 0);
  ASSERT_NE(boot, nullptr);
  publish_shrink((*server)->port(), 1, "0,1");
  auto next = boot->next_generation(5000ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kFailedPrecondition) << next.status().to_string();
  EXPECT_NE(next.status().message().find("rank 3 of 4 is not in generation 1's world"),
            std::string::npos)
      << next.status().to_string();
  EXPECT_EQ(boot->info().generation, 0);
  EXPECT_EQ(boot->info().rank, 3);
}

TEST(NextGeneration, RankListsAreDistinctNonNegativeIntegers) {
  auto ok = parse_rank_list("0,1,5");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, (std::vector<int>{0, 1, 5}));
  for (const char* bad : {"", "0,", ",1", "0,,1", "0,x", "-1", "1,1", "2 3"}) {
    auto parsed = parse_rank_list(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_EQ(generation_old_ranks_key(7), "tessera/generation/7/old_ranks");
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
