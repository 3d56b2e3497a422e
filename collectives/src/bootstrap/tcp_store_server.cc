// The TCP store server's life: start_tcp_store_server checks the limits and binds, the serving
// thread runs one poll() loop over the wake pipe, the listener and every connection, and each
// turn of the loop ends by answering what became answerable, expiring what waited too long and
// publishing the stats. What the server guarantees, and which file holds each responsibility,
// is in tcp_store_server.h.
#include "tcp_store_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/common/log.h"

namespace tessera::coll {
namespace detail {

TcpStoreServerImpl::TcpStoreServerImpl(Fd listener, Fd wake_read, Fd wake_write, int port,
                                       TcpStoreLimits limits, std::string token)
    : listener_(std::move(listener)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      port_(port),
      limits_(limits),
      token_(std::move(token)) {
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServerImpl::~TcpStoreServerImpl() {
  const char byte = 1;
  while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

TcpStoreServerStats TcpStoreServerImpl::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

void TcpStoreServerImpl::serve() {
  for (;;) {
    std::vector<Connection*> order;
    std::vector<pollfd> fds = poll_set(order, Clock::now());
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (rc < 0 && errno != EINTR) {
      TSR_LOG(kError, "coll") << where() << ": poll failed: " << std::strerror(errno);
      return;
    }
    if (rc > 0) {
      if (fds[0].revents != 0) return;  // destructor asked us to stop
      if (fds[1].fd >= 0 && (fds[1].revents & POLLIN)) accept_clients();
      for (size_t i = 0; i < order.size(); ++i) {
        Connection& c = *order[i];
        const short ev = fds[i + 2].revents;
        if (!c.closed && (ev & POLLOUT)) write_to(c);
        if (!c.closed && (ev & (POLLIN | POLLHUP | POLLERR))) read_from(c);
        if (ev & (POLLHUP | POLLERR)) c.closed = true;  // whatever it sent is read; it is gone
      }
    }
    // Requests that became answerable this turn (a reply went out, a parked get was answered).
    // Done here rather than from wake_waiters so that chains of pipelined requests cannot recurse.
    for (Connection& c : connections_) process(c);
    expire(Clock::now());
    remove_closed();
  }
}

// The wake pipe, the listener (fd -1, ignored by poll, while accepting is paused), then one entry
// per connection. A connection is not read while its own input or everyone's together is at its
// cap, nor while a reply to it is pending (it must read before it may ask again); poll() only
// reports what read_from() can act on, so it never spins.
std::vector<pollfd> TcpStoreServerImpl::poll_set(std::vector<Connection*>& order,
                                                 Clock::time_point now) {
  std::vector<pollfd> fds;
  fds.push_back({wake_read_.get(), POLLIN, 0});
  fds.push_back({now >= accept_paused_until_ ? listener_.get() : -1, POLLIN, 0});
  const size_t input_cap = 4 + max_request_body();
  for (Connection& c : connections_) {
    short events = 0;
    const bool room = c.in.size() < input_cap && buffered_ < limits_.max_buffered_bytes;
    if (c.discard > 0 || (room && c.out.empty())) events |= POLLIN;
    if (!c.out.empty()) events |= POLLOUT;
    fds.push_back({c.fd.get(), events, 0});
    order.push_back(&c);
  }
  return fds;
}

int TcpStoreServerImpl::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  for (const Connection& c : connections_) {
    if (c.ready()) return 0;
    if (c.waiting) next = std::min(next, c.wait_deadline);
    if (c.busy()) next = std::min(next, c.busy_since + limits_.stall_timeout);
    if (!c.authenticated) next = std::min(next, c.accepted + kAuthTimeout);
  }
  if (accept_paused_until_ > now) next = std::min(next, accept_paused_until_);
  if (next == Clock::time_point::max()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms + 1, 1000000)));
}

// Parked gets whose timeout passed are answered; connections stalled mid-request or mid-reply
// are dropped.
void TcpStoreServerImpl::expire(Clock::time_point now) {
  for (Connection& c : connections_) {
    if (c.closed) continue;
    if (!c.authenticated && c.out.empty() && now - c.accepted >= kAuthTimeout) {
      refuse_unauthenticated(c, "no hello within " + std::to_string(kAuthTimeout.count()) + " ms");
      write_to(c);
      continue;
    }
    if (c.waiting && c.wait_deadline <= now) {
      c.waiting = false;
      reply(c, StoreReply::kTimeout, {});
      write_to(c);
    }
    if (c.closed) continue;
    if (!c.busy()) {
      c.busy_since = {};
    } else if (c.busy_since == Clock::time_point{}) {
      c.busy_since = now;
    } else if (now - c.busy_since >= limits_.stall_timeout) {
      ++counters_.dropped_stalled;
      TSR_LOG(kWarn, "coll") << where() << ": dropping the connection from " << c.peer << ": "
                             << (c.out.empty() ? "a request" : "a reply") << " stalled for "
                             << limits_.stall_timeout.count() << " ms";
      c.closed = true;
    }
  }
}

TcpStoreServerStats tcp_store_server_stats(const TcpStoreServer& server) {
  return static_cast<const TcpStoreServerImpl&>(server).stats();
}

}  // namespace detail

Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const std::string& host, int port,
                                                               TcpStoreLimits limits,
                                                               std::string_view token) {
  if (port < 0 || port > 65535) {
    return invalid_argument("TCP store port " + std::to_string(port) + " is not in 0..65535");
  }
  if (limits.max_buffered_bytes < 4 + 5 + limits.max_key_bytes + limits.max_value_bytes) {
    return invalid_argument("TCP store limits: max_buffered_bytes " +
                            std::to_string(limits.max_buffered_bytes) +
                            " cannot hold one request of the largest key and value");
  }
  int bound = 0;
  TSR_ASSIGN_OR_RETURN(detail::Fd listener, detail::listen_tcp(host, port, &bound));
  const int flags = fcntl(listener.get(), F_GETFL);
  fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("TCP store server: pipe: ") + std::strerror(errno));
  }
  TSR_LOG(kInfo, "coll") << "TCP store serving on "
                         << detail::endpoint_name(host.empty() ? "0.0.0.0" : host, bound)
                         << (token.empty() ? " without a token" : " (token required)");
  return std::unique_ptr<TcpStoreServer>(std::make_unique<detail::TcpStoreServerImpl>(
      std::move(listener), detail::Fd(pipe_fds[0]), detail::Fd(pipe_fds[1]), bound, limits,
      std::string(token)));
}

}  // namespace tessera::coll
