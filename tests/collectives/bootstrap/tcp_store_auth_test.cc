// The TCP store with a job token (issue 18): a client with the token is served; a wrong token, no
// token, a request before the hello, garbage, half and oversized first frames are refused and
// closed without touching the data; many such connections at once do not stop a job of
// well-behaved clients from completing. The raw socket speaks the wire protocol (socket.h).
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "internal.h"
#include "socket.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll {
namespace {

using namespace std::chrono_literals;
using detail::Clock;
using detail::StoreOp;
using detail::StoreReply;

constexpr std::string_view kToken = "0123456789abcdef-job-token";

std::unique_ptr<TcpStoreServer> serve(std::string_view token) {
  auto server = start_tcp_store_server("127.0.0.1", 0, {}, token);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(*server) : nullptr;
}

std::string frame(StoreOp op, std::string_view key, std::string_view tail) {
  std::string out;
  detail::put_u32(out, static_cast<uint32_t>(5 + key.size() + tail.size()));
  out.push_back(static_cast<char>(op));
  detail::put_u32(out, static_cast<uint32_t>(key.size()));
  out.append(key);
  out.append(tail);
  return out;
}

// A raw connection: sends bytes, then reads the reply the server sends before closing.
class Raw {
 public:
  explicit Raw(int port) {
    auto fd = detail::connect_tcp("127.0.0.1", port, Clock::now() + 5s, true);
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    if (fd.ok()) fd_ = std::move(*fd);
  }
  void send(std::string_view bytes) {
    EXPECT_TRUE(
        detail::send_all(fd_.get(), bytes.data(), bytes.size(), Clock::now() + 5s, "raw").ok());
  }
  // The reply code, or -1 when none came; then whether the server closed the connection.
  std::pair<int, bool> refusal() {
    const auto deadline = Clock::now() + 5s;
    char header[4];
    if (!detail::recv_all(fd_.get(), header, 4, deadline, "raw").ok()) return {-1, false};
    std::string body(detail::get_u32(header), '\0');
    if (body.empty() ||
        !detail::recv_all(fd_.get(), body.data(), body.size(), deadline, "raw").ok())
      return {-1, false};
    char byte;
    Status after = detail::recv_all(fd_.get(), &byte, 1, deadline, "raw");
    return {static_cast<unsigned char>(body[0]), after.code() == StatusCode::kUnavailable};
  }

 private:
  detail::Fd fd_;
};

constexpr int kUnauthenticated = static_cast<int>(StoreReply::kUnauthenticated);

TEST(TcpStoreAuth, AClientWithTheTokenIsServedOnEveryConnection) {
  auto server = serve(kToken);
  ASSERT_TRUE(server);
  auto store = connect_tcp_store("127.0.0.1", server->port(), 5000ms, kToken);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  // A parked get makes the client open a second connection for the set (each says hello).
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE((*store)->set("k", "v").ok());
  });
  auto value = (*store)->get("k", 5000ms);
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status().to_string();
  EXPECT_EQ(*value, "v");
  EXPECT_EQ((*store)->add("n", 2).value_or(-1), 2);
}

TEST(TcpStoreAuth, AWrongOrMissingTokenIsUnauthenticatedAndNamesNoToken) {
  auto server = serve(kToken);
  ASSERT_TRUE(server);
  auto wrong = connect_tcp_store("127.0.0.1", server->port(), 2000ms, "wrong");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated) << wrong.status().to_string();
  EXPECT_NE(wrong.status().message().find("a wrong token"), std::string::npos);
  EXPECT_EQ(wrong.status().message().find(kToken), std::string::npos);
  // Without a token no hello is sent: the first call is refused.
  auto none = connect_tcp_store("127.0.0.1", server->port(), 2000ms, "");
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  Status refused = (*none)->set("k", "v");
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.to_string();
  EXPECT_NE(refused.message().find("a request before the hello"), std::string::npos);
  EXPECT_NE(refused.message().find("no TESSERA_STORE_TOKEN"), std::string::npos);
  // Counted at the end of the server's turn: polled, bounded.
  auto stats = detail::tcp_store_server_stats(*server);
  for (int i = 0; i < 5000 && stats.refused_unauthenticated < 2; ++i) {
    std::this_thread::sleep_for(1ms);
    stats = detail::tcp_store_server_stats(*server);
  }
  EXPECT_EQ(stats.refused_unauthenticated, 2u);
}

TEST(TcpStoreAuth, HostileFirstFramesAreRefusedAndClosedWithoutTouchingTheData) {
  auto server = serve(kToken);
  ASSERT_TRUE(server);
  const int port = server->port();
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::string oversized;
  detail::put_u32(oversized, 1u << 24);
  std::string tiny;
  detail::put_u32(tiny, 2);
  tiny += "ab";
  const Case cases[] = {
      {"a set before the hello", frame(StoreOp::kSet, "stolen", "value")},
      {"a get before the hello", frame(StoreOp::kGet, "k", std::string(8, '\0'))},
      {"a wrong token", frame(StoreOp::kHello, "wrong", "")},
      {"an empty token", frame(StoreOp::kHello, "", "")},
      {"a hello with a tail", frame(StoreOp::kHello, kToken, "x")},
      {"an oversized first frame", oversized},
      {"a frame too short for an operation", tiny},
      {"garbage", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Raw raw(port);
    raw.send(c.bytes);
    auto [code, closed] = raw.refusal();
    EXPECT_EQ(code, kUnauthenticated);
    EXPECT_TRUE(closed);
  }
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms, kToken);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ((*store)->get("stolen", 0ms).status().code(), StatusCode::kDeadlineExceeded);
}

// Four ranks exchange through the store (set, then get each other's key) while 64 connections
// that never authenticate, half a hello among them, stay open, and garbage keeps arriving.
TEST(TcpStoreAuth, AJobCompletesWhileStrangersHoldConnectionsAndSendGarbage) {
  auto server = serve(kToken);
  ASSERT_TRUE(server);
  const int port = server->port();
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 64; ++i) {
    idle.push_back(std::make_unique<Raw>(port));
    if (i % 2 == 0) idle.back()->send(frame(StoreOp::kHello, kToken, "").substr(0, 7));
  }
  std::atomic<bool> done{false};
  std::thread garbage([&] {
    for (int i = 0; i < 200 && !done; ++i) {
      Raw raw(port);
      raw.send(std::string(64, static_cast<char>(i)));
    }
  });
  constexpr int kRanks = 4;
  std::vector<std::thread> ranks;
  std::vector<Status> results(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto store = connect_tcp_store("127.0.0.1", port, 5000ms, kToken);
      if (!store.ok()) {
        results[r] = store.status();
        return;
      }
      Status s = (*store)->set("rank/" + std::to_string(r), std::to_string(r));
      for (int peer = 0; peer < kRanks && s.ok(); ++peer) {
        auto v = (*store)->get("rank/" + std::to_string(peer), 10000ms);
        if (!v.ok()) s = v.status();
        if (v.ok() && *v != std::to_string(peer)) s = data_loss("rank " + std::to_string(peer));
      }
      results[r] = s;
    });
  }
  for (auto& t : ranks) t.join();
  done = true;
  garbage.join();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].to_string();
}

TEST(TcpStoreAuth, TheTokenComesFromTheEnvironmentAndAStoreWithoutOneAcceptsAny) {
  auto guarded = serve(kToken);
  auto open = serve("");
  ASSERT_TRUE(guarded && open);
  ::setenv(kStoreTokenEnv, std::string(kToken).c_str(), 1);
  auto with_env = connect_tcp_store("127.0.0.1", guarded->port(), 5000ms);
  auto to_open = connect_tcp_store("127.0.0.1", open->port(), 5000ms);
  ::unsetenv(kStoreTokenEnv);
  auto without_env = connect_tcp_store("127.0.0.1", guarded->port(), 2000ms);
  ASSERT_TRUE(with_env.ok()) << with_env.status().to_string();
  EXPECT_TRUE((*with_env)->set("a", "1").ok());
  ASSERT_TRUE(to_open.ok()) << to_open.status().to_string();
  EXPECT_TRUE((*to_open)->set("a", "1").ok());
  ASSERT_TRUE(without_env.ok()) << without_env.status().to_string();
  Status refused = (*without_env)->set("a", "1");
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.to_string();
  EXPECT_NE(refused.message().find("no TESSERA_STORE_TOKEN"), std::string::npos);
}

}  // namespace
}  // namespace tessera::coll
