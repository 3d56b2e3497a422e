// The TCP store: set/get/add, waiting gets, timeouts, many clients, clients that vanish
// mid-request, and a server that goes away under its clients.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "socket.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<TcpStoreServer> serve() {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<Store> client(int port) {
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(TcpStore, SetThenGetReturnsTheExactBytes) {
  auto server = serve();
  ASSERT_TRUE(server);
  EXPECT_GT(server->port(), 0);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store->set("k", value).ok());
  auto got = store->get("k", 1000ms);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(store->set("k", "").ok());  // overwrite, with an empty value
  EXPECT_EQ(store->get("k", 1000ms).value_or("?"), "");
}

TEST(TcpStore, GetWaitsUntilAnotherClientSetsTheKey) {
  auto server = serve();
  ASSERT_TRUE(server);
  auto reader = client(server->port());
  auto writer = client(server->port());
  ASSERT_TRUE(reader && writer);
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(writer->set("late", "here").ok());
  });
  auto got = reader->get("late", 10000ms);
  later.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "here");
}

TEST(TcpStore, GetOfAMissingKeyTimesOutNamingIt) {
  auto server = serve();
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  auto got = store->get("never/set", 100ms);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("never/set"), std::string::npos)
      << got.status().to_string();
  EXPECT_TRUE(store->set("after", "1").ok());  // the connection is still usable
}

TEST(TcpStore, AddIsAtomicAcrossConcurrentClients) {
  auto server = serve();
  ASSERT_TRUE(server);
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, port = server->port()] {
      auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
      if (!store.ok()) {
        ++failures;
        return;
      }
      for (int i = 0; i < kAdds; ++i) {
        if (!(*store)->add("counter", 1).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  EXPECT_EQ(store->add("counter", 0).value_or(-1), kClients * kAdds);
  EXPECT_EQ(store->add("fresh", -5).value_or(0), -5);
  EXPECT_EQ(store->get("counter", 100ms).value_or(""), std::to_string(kClients * kAdds));
  ASSERT_TRUE(store->set("text", "abc").ok());
  EXPECT_FALSE(store->add("text", 1).ok());
}

TEST(TcpStore, ThreadsSharingAClientDoNotWaitBehindEachOther) {
  auto server = serve();
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  Result<std::string> got = Status(StatusCode::kUnknown, "not run");
  std::thread waiter([&] { got = store->get("shared", 10000ms); });
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(store->set("shared", "v").ok());  // would deadlock on a single connection
  waiter.join();
  EXPECT_EQ(got.value_or("?"), "v");
}

TEST(TcpStore, ClientsVanishingMidRequestDoNotDisturbTheServer) {
  auto server = serve();
  ASSERT_TRUE(server);
  const auto deadline = detail::Clock::now() + 5s;
  {
    // Half a frame, then gone.
    auto raw = detail::connect_tcp("127.0.0.1", server->port(), deadline, true);
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    std::string frame;
    detail::put_u32(frame, 100);
    frame += "\x01\x05";
    ASSERT_TRUE(detail::send_all(raw->get(), frame.data(), frame.size(), deadline, "raw").ok());
  }
  {
    // A parked get, then gone.
    auto raw = detail::connect_tcp("127.0.0.1", server->port(), deadline, true);
    ASSERT_TRUE(raw.ok());
    std::string frame;
    detail::put_u32(frame, 5 + 4 + 8);
    frame.push_back(static_cast<char>(detail::StoreOp::kGet));
    detail::put_u32(frame, 4);
    frame += "gone";
    detail::put_u64(frame, 60000);
    ASSERT_TRUE(detail::send_all(raw->get(), frame.data(), frame.size(), deadline, "raw").ok());
  }
  {
    // Garbage: a length no frame has.
    auto raw = detail::connect_tcp("127.0.0.1", server->port(), deadline, true);
    ASSERT_TRUE(raw.ok());
    const std::string junk = "\xff\xff\xff\xff junk";
    ASSERT_TRUE(detail::send_all(raw->get(), junk.data(), junk.size(), deadline, "raw").ok());
  }
  auto store = client(server->port());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->set("gone", "still served").ok());
  EXPECT_EQ(store->get("gone", 1000ms).value_or("?"), "still served");
}

TEST(TcpStore, ServerGoneIsUnavailableNamingTheAddress) {
  auto server = serve();
  ASSERT_TRUE(server);
  const int port = server->port();
  auto store = client(port);
  auto parked = client(port);
  ASSERT_TRUE(store && parked);
  ASSERT_TRUE(store->set("k", "v").ok());
  Result<std::string> waiting = Status(StatusCode::kUnknown, "not run");
  std::thread waiter([&] { waiting = parked->get("never", 60000ms); });
  std::this_thread::sleep_for(100ms);
  server.reset();
  waiter.join();  // returns promptly: the connection closed under the parked get
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), StatusCode::kUnavailable) << waiting.status().to_string();
  auto got = store->get("k", 1000ms);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().to_string();
  EXPECT_NE(got.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << got.status().to_string();
}

TEST(TcpStore, ConnectRetriesUntilTheServerStarts) {
  int port = 0;
  {
    auto probe = serve();  // find a free port, then free it
    ASSERT_TRUE(probe);
    port = probe->port();
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    auto started = start_tcp_store_server("127.0.0.1", port);
    if (started.ok()) server = std::move(*started);
  });
  auto store = connect_tcp_store("127.0.0.1", port, 10000ms);
  starter.join();
  if (!server) GTEST_SKIP() << "port " << port << " was taken by someone else meanwhile";
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_TRUE((*store)->set("x", "y").ok());
}

TEST(TcpStore, ConnectGivesUpAtTheTimeout) {
  int port = 0;
  {
    auto probe = serve();
    ASSERT_TRUE(probe);
    port = probe->port();
  }
  auto store = connect_tcp_store("127.0.0.1", port, 200ms);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(store.status().message().find(std::to_string(port)), std::string::npos);
  EXPECT_EQ(connect_tcp_store("127.0.0.1", 0, 200ms).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::coll
