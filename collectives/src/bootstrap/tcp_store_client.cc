// The TCP store client. Each call takes an idle connection from a small pool (or opens one), so
// threads sharing a client never wait behind each other's parked get. Every call is bounded: set
// and add by the timeout given at connect, get by its own timeout plus a short grace for the
// server's answer to arrive. With a token, each connection opens with a hello carrying it.
#include <mutex>
#include <vector>

#include "socket.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/env.h"

namespace tessera::coll {
namespace {

using detail::Clock;
using detail::Fd;
using detail::StoreOp;
using detail::StoreReply;

constexpr std::chrono::milliseconds kReplyGrace{2000};

std::string no_token_hint(const std::string& token) {
  return token.empty() ? " (this process has no TESSERA_STORE_TOKEN)" : "";
}

// Opens one connection: connect (retrying until `deadline` when `retry`), then, with a token, the
// hello. A refused hello is UNAUTHENTICATED (the server's reason is kept, the token is not); a
// store at its connection limit is RESOURCE_EXHAUSTED.
Result<Fd> open_connection(const std::string& host, int port, const std::string& token,
                           Clock::time_point deadline, bool retry) {
  TSR_ASSIGN_OR_RETURN(Fd fd, detail::connect_tcp(host, port, deadline, retry));
  if (token.empty()) return fd;  // a store with a token refuses the first request instead
  const std::string what = "TCP store at " + detail::endpoint_name(host, port) + ": hello";
  std::string frame;
  detail::put_u32(frame, static_cast<uint32_t>(5 + token.size()));
  frame.push_back(static_cast<char>(StoreOp::kHello));
  detail::put_u32(frame, static_cast<uint32_t>(token.size()));
  frame.append(token);
  TSR_RETURN_IF_ERROR(detail::send_all(fd.get(), frame.data(), frame.size(), deadline, what));
  char header[4];
  TSR_RETURN_IF_ERROR(detail::recv_all(fd.get(), header, sizeof header, deadline, what));
  const uint32_t body = detail::get_u32(header);
  if (body < 1 || body > 65536) {
    return data_loss(what + ": malformed reply (length " + std::to_string(body) + ")");
  }
  std::string reply(body, '\0');
  TSR_RETURN_IF_ERROR(detail::recv_all(fd.get(), reply.data(), body, deadline, what));
  const auto code = static_cast<StoreReply>(reply[0]);
  if (code == StoreReply::kOk) return fd;
  if (code == StoreReply::kRefused) return resource_exhausted(what + ": " + reply.substr(1));
  return Status(StatusCode::kUnauthenticated, what + ": " + reply.substr(1));
}

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(std::string host, int port, std::string token,
                 std::chrono::milliseconds op_timeout, Fd first)
      : host_(std::move(host)), port_(port), token_(std::move(token)), op_timeout_(op_timeout) {
    idle_.push_back(std::move(first));
  }

  Status set(std::string_view key, std::string_view value) override {
    return call(StoreOp::kSet, key, value, Clock::now() + op_timeout_, "set").status();
  }

  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    if (timeout.count() < 0) timeout = std::chrono::milliseconds(0);
    std::string tail;
    detail::put_u64(tail, static_cast<uint64_t>(timeout.count()));
    auto reply = call(StoreOp::kGet, key, tail, Clock::now() + timeout + kReplyGrace, "get");
    if (!reply.ok()) return reply.status();
    if (reply->first == StoreReply::kTimeout) {
      return deadline_exceeded("TCP store at " + where() + ": key '" + std::string(key) +
                               "' not set within " + std::to_string(timeout.count()) + " ms");
    }
    return std::move(reply->second);
  }

  Result<int64_t> add(std::string_view key, int64_t delta) override {
    std::string tail;
    detail::put_u64(tail, static_cast<uint64_t>(delta));
    auto reply = call(StoreOp::kAdd, key, tail, Clock::now() + op_timeout_, "add");
    if (!reply.ok()) return reply.status();
    if (reply->second.size() != 8) {
      return data_loss("TCP store at " + where() + ": malformed reply to add '" + std::string(key) +
                       "'");
    }
    return static_cast<int64_t>(detail::get_u64(reply->second.data()));
  }

 private:
  std::string where() const { return detail::endpoint_name(host_, port_); }

  Result<Fd> acquire(Clock::time_point deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        Fd fd = std::move(idle_.back());
        idle_.pop_back();
        return fd;
      }
    }
    return open_connection(host_, port_, token_, deadline, /*retry=*/false);
  }

  void release(Fd fd) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(fd));
  }

  // Sends one request and reads its reply. kError replies become FAILED_PRECONDITION and kRefused
  // ones (over a server limit) RESOURCE_EXHAUSTED; kOk and kTimeout come back with their tail. A
  // connection that saw any failure is dropped, not reused.
  Result<std::pair<StoreReply, std::string>> call(StoreOp op, std::string_view key,
                                                  std::string_view tail, Clock::time_point deadline,
                                                  std::string_view verb) {
    const std::string what =
        "TCP store at " + where() + ": " + std::string(verb) + " '" + std::string(key) + "'";
    if (5 + key.size() + tail.size() > detail::kMaxFrameBytes) {
      return invalid_argument(what + ": request larger than " +
                              std::to_string(detail::kMaxFrameBytes) + " bytes");
    }
    auto fd = acquire(deadline);
    if (!fd.ok()) return fd.status().with_context(what);
    std::string frame;
    detail::put_u32(frame, static_cast<uint32_t>(5 + key.size() + tail.size()));
    frame.push_back(static_cast<char>(op));
    detail::put_u32(frame, static_cast<uint32_t>(key.size()));
    frame.append(key);
    frame.append(tail);
    TSR_RETURN_IF_ERROR(detail::send_all(fd->get(), frame.data(), frame.size(), deadline, what));
    char header[4];
    TSR_RETURN_IF_ERROR(detail::recv_all(fd->get(), header, sizeof header, deadline, what));
    const uint32_t body = detail::get_u32(header);
    if (body < 1 || body > detail::kMaxFrameBytes) {
      return data_loss(what + ": malformed reply (length " + std::to_string(body) + ")");
    }
    std::string reply(body, '\0');
    TSR_RETURN_IF_ERROR(detail::recv_all(fd->get(), reply.data(), body, deadline, what));
    release(std::move(*fd));
    const auto code = static_cast<StoreReply>(reply[0]);
    reply.erase(0, 1);
    if (code == StoreReply::kError) return failed_precondition(what + ": " + reply);
    if (code == StoreReply::kRefused) return resource_exhausted(what + ": " + reply);
    if (code == StoreReply::kUnauthenticated) {
      return Status(StatusCode::kUnauthenticated, what + ": " + reply + no_token_hint(token_));
    }
    if (code != StoreReply::kOk && code != StoreReply::kTimeout) {
      return data_loss(what + ": unknown reply code " + std::to_string(static_cast<int>(code)));
    }
    return std::make_pair(code, std::move(reply));
  }

  const std::string host_;
  const int port_;
  const std::string token_;
  const std::chrono::milliseconds op_timeout_;
  std::mutex mu_;
  std::vector<Fd> idle_;
};

}  // namespace

Result<std::unique_ptr<Store>> connect_tcp_store(const std::string& host, int port,
                                                 std::chrono::milliseconds timeout,
                                                 std::string_view token) {
  if (port <= 0 || port > 65535) {
    return invalid_argument("TCP store port " + std::to_string(port) + " is not in 1..65535");
  }
  TSR_ASSIGN_OR_RETURN(Fd fd, open_connection(host, port, std::string(token),
                                              Clock::now() + timeout, /*retry=*/true));
  return std::unique_ptr<Store>(
      std::make_unique<TcpStoreClient>(host, port, std::string(token), timeout, std::move(fd)));
}

Result<std::unique_ptr<Store>> connect_tcp_store(const std::string& host, int port,
                                                 std::chrono::milliseconds timeout) {
  return connect_tcp_store(host, port, timeout, env::get(kStoreTokenEnv).value_or(""));
}

}  // namespace tessera::coll
