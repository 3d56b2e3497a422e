// The TCP store server: one poll() loop on a background thread. A get for a missing key parks
// its connection until a set/add writes the key or the request's own timeout passes, so waiting
// costs nothing. A client that disconnects, even mid-request, only loses its own connection.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <vector>

#include "socket.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/log.h"

namespace tessera::coll {
namespace {

using detail::Clock;
using detail::Fd;
using detail::StoreOp;
using detail::StoreReply;

struct Connection {
  Fd fd;
  std::string in;   // bytes received, not yet parsed
  std::string out;  // bytes to send
  bool waiting = false;
  std::string wait_key;
  Clock::time_point wait_deadline;
  bool closed = false;
};

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(Fd listener, Fd wake_read, Fd wake_write, int port)
      : listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        port_(port) {
    thread_ = std::thread([this] { serve(); });
  }

  ~TcpStoreServerImpl() override {
    const char byte = 1;
    while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

  int port() const override { return port_; }

 private:
  void serve();
  void accept_clients();
  void read_from(Connection& c);
  void write_to(Connection& c);
  void process(Connection& c);
  void reply(Connection& c, StoreReply code, std::string_view tail);
  void wake_waiters(const std::string& key);
  void expire_waiters();
  int poll_timeout_ms() const;

  Fd listener_, wake_read_, wake_write_;
  int port_;
  std::list<Connection> connections_;
  std::map<std::string, std::string, std::less<>> data_;
  std::thread thread_;
};

void TcpStoreServerImpl::serve() {
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    std::vector<Connection*> order;
    for (Connection& c : connections_) {
      short events = POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      order.push_back(&c);
    }
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (rc < 0 && errno != EINTR) {
      TSR_LOG(kError, "coll") << "TCP store server on port " << port_
                              << ": poll failed: " << std::strerror(errno);
      return;
    }
    if (rc > 0) {
      if (fds[0].revents != 0) return;  // destructor asked us to stop
      if (fds[1].revents & POLLIN) accept_clients();
      for (size_t i = 0; i < order.size(); ++i) {
        Connection& c = *order[i];
        const short ev = fds[i + 2].revents;
        if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        if (!c.closed && (ev & POLLOUT)) write_to(c);
      }
    }
    expire_waiters();
    connections_.remove_if([](const Connection& c) { return c.closed; });
  }
}

int TcpStoreServerImpl::poll_timeout_ms() const {
  int timeout = -1;
  const auto now = Clock::now();
  for (const Connection& c : connections_) {
    if (!c.waiting) continue;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.wait_deadline - now).count();
    ms = std::max<int64_t>(0, std::min<int64_t>(ms + 1, 1000000));
    if (timeout < 0 || ms < timeout) timeout = static_cast<int>(ms);
  }
  return timeout;
}

void TcpStoreServerImpl::accept_clients() {
  for (;;) {
    Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN, or a client that gave up; either way nothing to do
    Connection& c = connections_.emplace_back();
    c.fd = std::move(fd);
  }
}

void TcpStoreServerImpl::read_from(Connection& c) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > detail::kMaxFrameBytes + 64) {
        c.closed = true;  // a frame this large is not ours
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.closed = true;  // EOF or error: the client is gone, its parked get with it
    return;
  }
  process(c);
}

void TcpStoreServerImpl::write_to(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.closed = true;
    return;
  }
}

void TcpStoreServerImpl::reply(Connection& c, StoreReply code, std::string_view tail) {
  detail::put_u32(c.out, static_cast<uint32_t>(1 + tail.size()));
  c.out.push_back(static_cast<char>(code));
  c.out.append(tail);
  write_to(c);
}

// Parses and answers every complete request of `c`, stopping at a get that has to wait.
void TcpStoreServerImpl::process(Connection& c) {
  while (!c.closed && !c.waiting && c.in.size() >= 4) {
    const uint32_t body = detail::get_u32(c.in.data());
    if (body < 5 || body > detail::kMaxFrameBytes) {
      c.closed = true;
      return;
    }
    if (c.in.size() < 4 + size_t{body}) return;
    const std::string frame = c.in.substr(4, body);
    c.in.erase(0, 4 + size_t{body});
    const auto op = static_cast<StoreOp>(frame[0]);
    const uint32_t key_len = detail::get_u32(frame.data() + 1);
    if (key_len > frame.size() - 5) {
      c.closed = true;
      return;
    }
    std::string key = frame.substr(5, key_len);
    const std::string_view tail = std::string_view(frame).substr(5 + key_len);
    switch (op) {
      case StoreOp::kSet:
        data_[key] = std::string(tail);
        reply(c, StoreReply::kOk, {});
        wake_waiters(key);
        break;
      case StoreOp::kGet: {
        if (tail.size() != 8) {
          c.closed = true;
          return;
        }
        auto it = data_.find(key);
        if (it != data_.end()) {
          reply(c, StoreReply::kOk, it->second);
          break;
        }
        // At most a day, so the deadline cannot overflow.
        const auto timeout_ms = static_cast<int64_t>(
            std::min<uint64_t>(detail::get_u64(tail.data()), uint64_t{86400000}));
        c.waiting = true;
        c.wait_key = std::move(key);
        c.wait_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        break;
      }
      case StoreOp::kAdd: {
        if (tail.size() != 8) {
          c.closed = true;
          return;
        }
        const auto delta = static_cast<int64_t>(detail::get_u64(tail.data()));
        int64_t current = 0;
        auto it = data_.find(key);
        if (it != data_.end()) {
          char* end = nullptr;
          errno = 0;
          current = std::strtoll(it->second.c_str(), &end, 10);
          if (it->second.empty() || *end != '\0' || errno != 0) {
            reply(c, StoreReply::kError, "add '" + key + "': the value is not an integer");
            break;
          }
        }
        const int64_t updated = current + delta;
        data_[key] = std::to_string(updated);
        std::string out;
        detail::put_u64(out, static_cast<uint64_t>(updated));
        reply(c, StoreReply::kOk, out);
        wake_waiters(key);
        break;
      }
      default:
        reply(c, StoreReply::kError, "unknown store operation " + std::to_string(frame[0]));
        break;
    }
  }
}

void TcpStoreServerImpl::wake_waiters(const std::string& key) {
  const std::string& value = data_[key];
  for (Connection& c : connections_) {
    if (c.closed || !c.waiting || c.wait_key != key) continue;
    c.waiting = false;
    reply(c, StoreReply::kOk, value);
    process(c);  // requests it sent while waiting (a pipelining client)
  }
}

void TcpStoreServerImpl::expire_waiters() {
  const auto now = Clock::now();
  for (Connection& c : connections_) {
    if (c.closed || !c.waiting || c.wait_deadline > now) continue;
    c.waiting = false;
    reply(c, StoreReply::kTimeout, {});
    process(c);
  }
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> start_tcp_store_server(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return invalid_argument("TCP store port " + std::to_string(port) + " is not in 0..65535");
  }
  int bound = 0;
  TSR_ASSIGN_OR_RETURN(detail::Fd listener, detail::listen_tcp(host, port, &bound));
  const int flags = fcntl(listener.get(), F_GETFL);
  fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("TCP store server: pipe: ") + std::strerror(errno));
  }
  TSR_LOG(kInfo, "coll") << "TCP store serving on " << detail::endpoint_name(host, bound);
  return std::unique_ptr<TcpStoreServer>(std::make_unique<TcpStoreServerImpl>(
      std::move(listener), detail::Fd(pipe_fds[0]), detail::Fd(pipe_fds[1]), bound));
}

}  // namespace tessera::coll
