// Bootstrap: allgather and barrier across ranks running as threads over a real TCP store, the
// errors when a rank does not arrive, generations, and from_environment without a launcher.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "env_guard.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Bootstrap> rank_of(int rank, int size, int port, std::chrono::milliseconds timeout,
                                   int generation = 0) {
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return nullptr;
  LaunchInfo info;
  info.rank = rank;
  info.size = size;
  info.local_rank = rank;
  info.local_size = size;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.generation = generation;
  return Bootstrap::from_parts(info, std::move(*store), BootstrapOptions{timeout});
}

TEST(Bootstrap, FourRanksAsThreadsAllgatherInRankOrderAndPassBarriers) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  constexpr int kRanks = 4;
  std::vector<std::vector<std::string>> seen(kRanks);
  std::vector<Status> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto boot = rank_of(r, kRanks, (*server)->port(), 10000ms);
      if (!boot) return;
      for (int round = 0; round < 3; ++round) {
        const std::string name = "addr" + std::to_string(round);
        auto all = boot->allgather(name, "rank" + std::to_string(r) + "/" + name);
        if (!all.ok()) {
          errors[static_cast<size_t>(r)] = all.status();
          return;
        }
        seen[static_cast<size_t>(r)] = *all;
        Status b = boot->barrier("after" + std::to_string(round));
        if (!b.ok()) {
          errors[static_cast<size_t>(r)] = b;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(errors[static_cast<size_t>(r)].ok()) << errors[static_cast<size_t>(r)].to_string();
    ASSERT_EQ(seen[static_cast<size_t>(r)].size(), size_t{kRanks});
    for (int q = 0; q < kRanks; ++q) {
      EXPECT_EQ(seen[static_cast<size_t>(r)][static_cast<size_t>(q)],
                "rank" + std::to_string(q) + "/addr2");
    }
  }
}

TEST(Bootstrap, AllgatherNamesEveryRankThatDidNotArrive) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  std::vector<Result<std::vector<std::string>>> results(2, Status(StatusCode::kUnknown, ""));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // ranks 2 and 3 of 4 never come
    threads.emplace_back([&, r] {
      // Long enough that ranks 0 and 1 both arrive on a loaded machine: only 2 and 3 are named.
      auto boot = rank_of(r, 4, (*server)->port(), 2000ms);
      if (boot) results[static_cast<size_t>(r)] = boot->allgather("ids", "x");
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(result.status().message().find("ranks 2, 3 did not arrive"), std::string::npos)
        << result.status().to_string();
    EXPECT_NE(result.status().message().find("'ids'"), std::string::npos);
  }
}

TEST(Bootstrap, GenerationsDoNotSeeEachOthersKeys) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto old_rank1 = rank_of(1, 2, (*server)->port(), 200ms, /*generation=*/0);
  ASSERT_TRUE(old_rank1);
  ASSERT_TRUE(old_rank1->store().set("g0/ids/1", "stale").ok());
  auto rank0 = rank_of(0, 2, (*server)->port(), 200ms, /*generation=*/1);
  ASSERT_TRUE(rank0);
  auto all = rank0->allgather("ids", "fresh");
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("generation 1"), std::string::npos)
      << all.status().to_string();
}

TEST(Bootstrap, WithoutALauncherIsOneRankWithAnInProcessStore) {
  tessera::testing::LaunchEnvGuard env;
  auto boot = Bootstrap::from_environment(BootstrapOptions{1000ms});
  ASSERT_TRUE(boot.ok()) << boot.status().to_string();
  EXPECT_EQ((*boot)->info().launcher, Launcher::kNone);
  auto all = (*boot)->allgather("only", "me");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(*all, std::vector<std::string>{"me"});
  EXPECT_TRUE((*boot)->barrier("b").ok());
  EXPECT_EQ((*boot)->store().add("n", 2).value_or(0), 2);
  EXPECT_EQ((*boot)->timeout(), 1000ms);
}

TEST(Bootstrap, TorchrunStyleRankZeroHostsTheStoreAtMasterPort) {
  int port = 0;
  {
    auto probe = start_tcp_store_server("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  tessera::testing::LaunchEnvGuard env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(port));
  auto boot = Bootstrap::from_environment(BootstrapOptions{2000ms});
  ASSERT_TRUE(boot.ok()) << boot.status().to_string();
  EXPECT_EQ((*boot)->info().launcher, Launcher::kTorchrun);
  auto other = connect_tcp_store("127.0.0.1", port, 2000ms);  // the server is really there
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  auto all = (*boot)->allgather("x", "y");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ((*other)->get("g0/x/0", 1000ms).value_or(""), "y");
}

TEST(Bootstrap, TorchrunStyleWithAHostedStoreOnlyConnects) {
  int port = 0;
  {
    auto probe = start_tcp_store_server("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  tessera::testing::LaunchEnvGuard env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(port));
  env.set("TESSERA_STORE_HOSTED", "1");
  auto boot = Bootstrap::from_environment(BootstrapOptions{300ms});
  ASSERT_FALSE(boot.ok());  // nobody hosts it here
  EXPECT_EQ(boot.status().code(), StatusCode::kDeadlineExceeded) << boot.status().to_string();
  EXPECT_NE(boot.status().message().find(std::to_string(port)), std::string::npos);
}

}  // namespace
}  // namespace tessera::coll
