// The TCP store under hostile clients (a raw socket speaking the wire protocol badly): oversized
// keys, values and frames, a full store, `add` overflow, garbage, half requests, too many
// connections, and a process out of descriptors. Each test checks that the offender gets a clear
// answer (or is dropped) and that a well-behaved client is served throughout.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
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

std::unique_ptr<TcpStoreServer> serve(TcpStoreLimits limits) {
  auto server = start_tcp_store_server("127.0.0.1", 0, limits);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<Store> client(int port) {
  auto store = connect_tcp_store("127.0.0.1", port, 5000ms);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? std::move(*store) : nullptr;
}

// Small limits, so that tests reach them with little data.
TcpStoreLimits small_limits() {
  TcpStoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 1024;
  limits.max_store_bytes = 64 << 10;
  limits.max_buffered_bytes = 16 << 10;
  limits.max_connections = 16;
  return limits;
}

std::string request(StoreOp op, std::string_view key, std::string_view tail) {
  std::string frame;
  detail::put_u32(frame, static_cast<uint32_t>(5 + key.size() + tail.size()));
  frame.push_back(static_cast<char>(op));
  detail::put_u32(frame, static_cast<uint32_t>(key.size()));
  frame.append(key);
  frame.append(tail);
  return frame;
}

// A client that writes whatever bytes it is given and reads reply frames.
class Raw {
 public:
  explicit Raw(int port) {
    auto fd = detail::connect_tcp("127.0.0.1", port, Clock::now() + 5s, true);
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    if (fd.ok()) fd_ = std::move(*fd);
  }
  explicit Raw(detail::Fd fd) : fd_(std::move(fd)) {}
  bool send(std::string_view bytes) {
    return detail::send_all(fd_.get(), bytes.data(), bytes.size(), Clock::now() + 5s, "raw").ok();
  }
  // The next reply frame: {code, tail}; {0xff, error} when none came.
  std::pair<int, std::string> reply() {
    const auto deadline = Clock::now() + 5s;
    char header[4];
    Status s = detail::recv_all(fd_.get(), header, 4, deadline, "raw");
    if (!s.ok()) return {0xff, s.to_string()};
    std::string body(detail::get_u32(header), '\0');
    s = detail::recv_all(fd_.get(), body.data(), body.size(), deadline, "raw");
    if (!s.ok() || body.empty()) return {0xff, s.to_string()};
    return {static_cast<unsigned char>(body[0]), body.substr(1)};
  }
  // True when the server closes the connection (within 5 s), reading past anything it sent.
  bool closed_by_server() {
    const auto deadline = Clock::now() + 5s;
    char byte;
    for (;;) {
      Status s = detail::recv_all(fd_.get(), &byte, 1, deadline, "raw");
      if (!s.ok()) return s.code() == StatusCode::kUnavailable;
    }
  }
  void close() { fd_.reset(); }

 private:
  detail::Fd fd_;
};

constexpr int kOk = static_cast<int>(StoreReply::kOk);
constexpr int kError = static_cast<int>(StoreReply::kError);
constexpr int kRefused = static_cast<int>(StoreReply::kRefused);

// Polls the server's stats until `done` holds (bounded: 5 s).
template <typename Pred>
detail::TcpStoreServerStats wait_stats(const TcpStoreServer& server, Pred done) {
  const auto deadline = Clock::now() + 5s;
  auto stats = detail::tcp_store_server_stats(server);
  while (!done(stats) && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    stats = detail::tcp_store_server_stats(server);
  }
  return stats;
}

TEST(TcpStoreLimits, OversizedKeyAndValueAreRefusedToThatClientOnly) {
  auto server = serve(small_limits());
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  Status big_value = store->set("big", std::string(2000, 'v'));
  EXPECT_EQ(big_value.code(), StatusCode::kResourceExhausted) << big_value.to_string();
  EXPECT_NE(big_value.message().find("'big'"), std::string::npos) << big_value.to_string();
  EXPECT_NE(big_value.message().find("1024"), std::string::npos) << big_value.to_string();
  Status long_key = store->set(std::string(100, 'k'), "v");
  EXPECT_EQ(long_key.code(), StatusCode::kResourceExhausted) << long_key.to_string();
  EXPECT_NE(long_key.message().find("at most 64 bytes"), std::string::npos) << long_key.to_string();
  // The same client, the same connection, carries on.
  ASSERT_TRUE(store->set("small", std::string(1024, 'v')).ok());
  EXPECT_EQ(store->get("small", 1000ms).value_or("?").size(), 1024u);
  EXPECT_FALSE(store->get("big", 10ms).ok());
}

TEST(TcpStoreLimits, AHugeFrameIsRefusedAfterItsLengthAndSkippedUnbuffered) {
  auto server = serve(small_limits());
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  Raw raw(server->port());
  std::string header;
  constexpr uint32_t kBody = 4u << 20;  // 256 times the input the server may buffer
  detail::put_u32(header, kBody);
  ASSERT_TRUE(raw.send(header));
  auto [code, text] = raw.reply();  // answered before the body is sent
  EXPECT_EQ(code, kRefused) << text;
  EXPECT_NE(text.find("request of 4194304 bytes refused"), std::string::npos) << text;
  const std::string chunk(64 << 10, 'x');
  for (uint32_t sent = 0; sent < kBody; sent += chunk.size()) {
    ASSERT_TRUE(
        raw.send(std::string_view(chunk).substr(0, std::min<size_t>(chunk.size(), kBody - sent))));
  }
  EXPECT_LE(detail::tcp_store_server_stats(*server).buffered_bytes, size_t{16} << 10);
  ASSERT_TRUE(raw.send(request(StoreOp::kSet, "after", "skip")));  // the next frame is parsed
  EXPECT_EQ(raw.reply().first, kOk);
  EXPECT_EQ(store->get("after", 1000ms).value_or("?"), "skip");
}

TEST(TcpStoreLimits, AFullStoreRefusesNewBytesButServesAndOverwrites) {
  TcpStoreLimits limits = small_limits();
  limits.max_store_bytes = 4096;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  Status full;
  int stored = 0;
  for (int i = 0; i < 100 && full.ok(); ++i) {
    full = store->set("k" + std::to_string(i), std::string(1000, 'v'));
    if (full.ok()) ++stored;
  }
  ASSERT_FALSE(full.ok()) << "the store took 100 KB past a 4 KB limit";
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.to_string();
  EXPECT_NE(full.message().find("store full"), std::string::npos) << full.to_string();
  EXPECT_NE(full.message().find("4096"), std::string::npos) << full.to_string();
  EXPECT_LE(detail::tcp_store_server_stats(*server).store_bytes, 4096u);
  // Fill it to the byte: then even a new counter does not fit.
  const size_t used = size_t(stored) * (2 + 1000 + 64);  // keys k0..k9, 64 bytes of bookkeeping
  ASSERT_LT(used + 3 + 64, 4096u);
  ASSERT_TRUE(store->set("pad", std::string(4096 - used - 3 - 64, 'p')).ok());
  auto counter = store->add("counter", 1);
  EXPECT_EQ(counter.status().code(), StatusCode::kResourceExhausted)
      << counter.status().to_string();
  ASSERT_TRUE(store->set("k0", "smaller").ok());  // overwriting with fewer bytes fits
  EXPECT_EQ(store->get("k0", 1000ms).value_or("?"), "smaller");
  EXPECT_EQ(store->get("k" + std::to_string(stored - 1), 1000ms).value_or("?").size(), 1000u);
}

TEST(TcpStoreLimits, AddOverflowIsRefusedAndLeavesTheValue) {
  auto server = serve(small_limits());
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  ASSERT_EQ(store->add("up", kMax).value_or(0), kMax);
  auto over = store->add("up", 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition) << over.status().to_string();
  EXPECT_NE(over.status().message().find("overflows"), std::string::npos)
      << over.status().to_string();
  EXPECT_EQ(store->get("up", 1000ms).value_or("?"), std::to_string(kMax));
  ASSERT_EQ(store->add("down", kMin).value_or(0), kMin);
  EXPECT_FALSE(store->add("down", -1).ok());
  EXPECT_EQ(store->add("down", 1).value_or(0), kMin + 1);
}

TEST(TcpStoreLimits, GarbageGetsAnErrorAndOnlyItsConnectionCloses) {
  auto server = serve(small_limits());
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  {
    Raw raw(server->port());  // an unknown operation: an error, the connection stays
    ASSERT_TRUE(raw.send(request(static_cast<StoreOp>(9), "k", "")));
    auto [code, text] = raw.reply();
    EXPECT_EQ(code, kError);
    EXPECT_NE(text.find("unknown store operation 9"), std::string::npos) << text;
    ASSERT_TRUE(raw.send(request(StoreOp::kSet, "raw", "ok")));
    EXPECT_EQ(raw.reply().first, kOk);
  }
  {
    Raw raw(server->port());  // a body too short to hold an operation
    std::string frame;
    detail::put_u32(frame, 2);
    frame += "ab";
    ASSERT_TRUE(raw.send(frame));
    auto [code, text] = raw.reply();
    EXPECT_EQ(code, kError);
    EXPECT_NE(text.find("malformed request"), std::string::npos) << text;
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    Raw raw(server->port());  // a key length past the end of its frame
    std::string frame;
    detail::put_u32(frame, 9);
    frame.push_back(static_cast<char>(StoreOp::kSet));
    detail::put_u32(frame, 1000);
    frame += "abcd";
    ASSERT_TRUE(raw.send(frame));
    EXPECT_EQ(raw.reply().first, kError);
    EXPECT_TRUE(raw.closed_by_server());
  }
  EXPECT_EQ(store->get("raw", 1000ms).value_or("?"), "ok");
}

TEST(TcpStoreLimits, HalfRequestsAreDroppedAndCannotHoldMoreThanTheBufferCap) {
  TcpStoreLimits limits = small_limits();
  limits.stall_timeout = 200ms;
  limits.max_connections = 64;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  // Each sends most of a 1 KB set and stops: together twice what the server may buffer.
  constexpr int kStallers = 32;
  std::vector<std::unique_ptr<Raw>> stallers;
  const std::string whole = request(StoreOp::kSet, "half", std::string(1000, 'h'));
  for (int i = 0; i < kStallers; ++i) {
    stallers.push_back(std::make_unique<Raw>(server->port()));
    ASSERT_TRUE(stallers.back()->send(std::string_view(whole).substr(0, whole.size() - 10)));
  }
  auto stats = wait_stats(*server, [](const auto& s) { return s.dropped_stalled > 0; });
  EXPECT_LE(stats.buffered_bytes, limits.max_buffered_bytes);
  // Served once the stalled requests are dropped, which frees the buffer.
  ASSERT_TRUE(store->set("well", "behaved").ok());
  EXPECT_EQ(store->get("well", 1000ms).value_or("?"), "behaved");
  for (auto& raw : stallers) EXPECT_TRUE(raw->closed_by_server());
  stats = wait_stats(*server, [](const auto& s) { return s.connections == 1; });
  EXPECT_EQ(stats.dropped_stalled, uint64_t{kStallers});
  EXPECT_EQ(stats.buffered_bytes, 0u);
  EXPECT_FALSE(store->get("half", 10ms).ok());
}

TEST(TcpStoreLimits, ConnectionsOverTheLimitAreRefusedWithAnError) {
  TcpStoreLimits limits = small_limits();
  limits.max_connections = 4;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->set("first", "1").ok());
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<Raw>(server->port()));
  wait_stats(*server, [](const auto& s) { return s.connections == 4; });
  Raw extra(server->port());
  auto [code, text] = extra.reply();  // sent at once, unasked
  EXPECT_EQ(code, kRefused) << text;
  EXPECT_NE(text.find("limit of 4 connections"), std::string::npos) << text;
  EXPECT_TRUE(extra.closed_by_server());
  auto late = connect_tcp_store("127.0.0.1", server->port(), 5000ms);
  ASSERT_TRUE(late.ok());
  Status refused = (*late)->set("late", "x");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.to_string();
  EXPECT_EQ(store->get("first", 1000ms).value_or("?"), "1");  // the holder of a slot is served
  held.pop_back();
  wait_stats(*server, [](const auto& s) { return s.connections == 3; });
  auto after = client(server->port());
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->set("late", "x").ok());
  EXPECT_EQ(detail::tcp_store_server_stats(*server).refused_connections, 2u);
}

// Restores RLIMIT_NOFILE and closes the descriptors a test used up.
struct DescriptorHog {
  rlimit saved{};
  std::vector<int> fds;
  ~DescriptorHog() {
    for (int fd : fds) ::close(fd);
    setrlimit(RLIMIT_NOFILE, &saved);
  }
};

TEST(TcpStoreLimits, OutOfDescriptorsTheServerPausesInsteadOfSpinning) {
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer preset builds with UBSan too, whose vptr check opens a pipe to validate a
  // dynamic type: with every descriptor taken it reports each iostream access as an invalid
  // object. The default build runs this test.
  GTEST_SKIP() << "descriptor exhaustion breaks UBSan's vptr check (it needs a pipe)";
#endif
  auto server = serve(small_limits());
  ASSERT_TRUE(server);
  auto store = client(server->port());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->set("before", "1").ok());  // its connection is accepted
  // The raw client's socket exists before the descriptors run out; it connects after.
  detail::Fd socket_fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(socket_fd.valid());
  DescriptorHog hog;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &hog.saved), 0);
  rlimit low = hog.saved;
  const int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  low.rlim_cur = std::min<rlim_t>(hog.saved.rlim_cur, rlim_t(probe) + 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (;;) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    hog.fds.push_back(fd);
  }
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(socket_fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);  // completes in the listen backlog; the server's accept fails
  Raw raw(std::move(socket_fd));
  auto stats = wait_stats(*server, [](const auto& s) { return s.accept_failures > 0; });
  ASSERT_GT(stats.accept_failures, 0u);
  // A connected client is served while the listener rests (and the get's wait is time a
  // spinning server would spend failing accept() thousands of times).
  EXPECT_EQ(store->get("missing", 100ms).status().code(), StatusCode::kDeadlineExceeded);
  Status during = store->set("during", "pause");
  ASSERT_TRUE(during.ok()) << during.to_string();
  for (int fd : hog.fds) ::close(fd);
  hog.fds.clear();
  ASSERT_TRUE(raw.send(request(StoreOp::kSet, "after", "resumed")));  // accepted once fds free
  EXPECT_EQ(raw.reply().first, kOk);
  EXPECT_LT(detail::tcp_store_server_stats(*server).accept_failures, 100u);
  EXPECT_EQ(store->get("after", 1000ms).value_or("?"), "resumed");
}

}  // namespace
}  // namespace tessera::coll
