// The TCP store server: one poll() loop on a background thread. A get for a missing key parks
// its connection until a set/add writes the key or the request's own timeout passes, so waiting
// costs nothing. A client that disconnects, even mid-request, only loses its own connection.
//
// Nothing a client sends can grow the server without bound (TcpStoreLimits): a request over the
// key, value or store-size limit is refused to that client and skipped without being buffered;
// the unparsed input of all connections together is capped (a connection is not read while the
// cap is reached) and a request or reply that stalls is dropped; connections over the limit get
// an error and are closed; replies share the stored value instead of copying it; and when the
// process runs out of descriptors the listener is set aside until one frees instead of spinning.
//
// With a job token (start_tcp_store_server's `token`), a connection's first request must be a
// hello carrying it. Anything else first, a wrong token, a hello larger than kMaxHelloBody, or no
// hello within kAuthTimeout closes that connection with a log line naming the peer; nothing it
// sent reaches the data, so the job is not affected.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "internal.h"
#include "socket.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/log.h"

namespace tessera::coll {
namespace {

using detail::Clock;
using detail::Fd;
using detail::StoreOp;
using detail::StoreReply;
using Bytes = std::shared_ptr<const std::string>;

// Bookkeeping charged for every key on top of its bytes (map node, string headers).
constexpr size_t kEntryOverhead = 64;
// How long the listener rests after accept() ran out of descriptors, unless a connection closes
// first (which frees one).
constexpr std::chrono::milliseconds kAcceptPause{250};
// Before authentication a connection may send one small frame (a hello: op, key length, token)
// and must do so promptly, so that strangers cannot hold buffers or connection slots for long.
constexpr size_t kMaxHelloBody = 5 + 1024;
constexpr std::chrono::milliseconds kAuthTimeout{10000};
// Refusals of unauthenticated connections logged one by one before only every 1000th is.
constexpr uint64_t kLoggedRefusals = 20;

struct Connection {
  Fd fd;
  std::string peer;       // "127.0.0.1:53122", for the log
  std::string in;         // bytes received, not yet parsed (charged to buffered_)
  size_t discard = 0;     // bytes of a refused request still to skip unread
  std::deque<Bytes> out;  // replies to send; values are shared with the store
  size_t out_offset = 0;  // bytes of out.front() already sent
  bool close_after_send = false;
  bool waiting = false;
  std::string wait_key;
  Clock::time_point wait_deadline;
  Clock::time_point busy_since{};  // when its current request or reply started; {} when idle
  bool closed = false;
  bool authenticated = false;    // said the job's token (or the store has none)
  Clock::time_point accepted{};  // for kAuthTimeout

  bool busy() const { return !in.empty() || discard > 0 || !out.empty(); }
  // A whole request is buffered and may be answered now.
  bool ready() const {
    if (closed || waiting || !out.empty() || discard > 0 || in.size() < 4) return false;
    return in.size() >= 4 + size_t{detail::get_u32(in.data())};
  }
};

std::string peer_name(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown peer";
  }
  return detail::endpoint_name(host, std::atoi(port));
}

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(Fd listener, Fd wake_read, Fd wake_write, int port, TcpStoreLimits limits,
                     std::string token)
      : listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        port_(port),
        limits_(limits),
        token_(std::move(token)) {
    thread_ = std::thread([this] { serve(); });
  }

  ~TcpStoreServerImpl() override {
    const char byte = 1;
    while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

  int port() const override { return port_; }

  detail::TcpStoreServerStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }

 private:
  void serve();
  std::vector<pollfd> poll_set(std::vector<Connection*>& order, Clock::time_point now);
  void accept_clients();
  bool accept_one();
  void refuse_connection(Fd fd, const std::string& peer);
  void read_from(Connection& c);
  void absorb(Connection& c, const char* data, size_t n);
  void consume(Connection& c, size_t n);
  void write_to(Connection& c);
  void process(Connection& c);
  void handle(Connection& c, std::string_view frame);
  void handle_hello(Connection& c, std::string_view token);
  void refuse_unauthenticated(Connection& c, const std::string& why);
  void handle_set(Connection& c, const std::string& key, std::string_view value);
  void handle_add(Connection& c, const std::string& key, std::string_view tail);
  bool fits(const std::string& key, size_t new_value_bytes, std::string* why) const;
  void store(const std::string& key, Bytes value);
  void reply(Connection& c, StoreReply code, std::string_view tail);
  void reply_value(Connection& c, Bytes value);
  void wake_waiters(const std::string& key);
  void expire(Clock::time_point now);
  void remove_closed();
  int poll_timeout_ms(Clock::time_point now) const;
  size_t max_request_body() const {
    return 5 + limits_.max_key_bytes + std::max<size_t>(limits_.max_value_bytes, 8);
  }
  std::string where() const { return "TCP store on port " + std::to_string(port_); }

  Fd listener_, wake_read_, wake_write_;
  const int port_;
  const TcpStoreLimits limits_;
  const std::string token_;  // empty: no authentication asked
  std::list<Connection> connections_;
  std::map<std::string, Bytes, std::less<>> data_;
  size_t store_bytes_ = 0;  // keys + values + kEntryOverhead per key
  size_t buffered_ = 0;     // sum of every connection's `in`
  Clock::time_point accept_paused_until_{};
  bool accept_failure_logged_ = false;
  uint64_t refused_since_full_ = 0;
  detail::TcpStoreServerStats counters_;
  mutable std::mutex stats_mutex_;
  detail::TcpStoreServerStats stats_;
  std::thread thread_;
};

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

void TcpStoreServerImpl::accept_clients() {
  while (accept_one()) {
  }
}

// Accepts one pending connection; false when there is none or accept() failed. Out of
// descriptors (EMFILE, ENFILE) or kernel memory, the listener would stay readable and poll()
// would spin: it is left out of the poll set for kAcceptPause, or until a connection closes, and
// the pending clients wait in the backlog. Logged once per episode.
bool TcpStoreServerImpl::accept_one() {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  Fd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                  SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return false;
    if (err == EINTR || err == ECONNABORTED || err == EPROTO) return true;  // that client gave up
    ++counters_.accept_failures;
    accept_paused_until_ = Clock::now() + kAcceptPause;
    if (!accept_failure_logged_) {
      accept_failure_logged_ = true;
      TSR_LOG(kError, "coll") << where() << ": cannot accept a connection: " << std::strerror(err)
                              << (err == EMFILE || err == ENFILE
                                      ? " (out of file descriptors: raise `ulimit -n`)"
                                      : "")
                              << "; new clients wait until a descriptor frees";
    }
    return false;
  }
  if (accept_failure_logged_) {
    accept_failure_logged_ = false;
    TSR_LOG(kWarn, "coll") << where() << ": accepting connections again";
  }
  std::string peer = peer_name(addr, len);
  if (connections_.size() >= size_t(std::max(0, limits_.max_connections))) {
    refuse_connection(std::move(fd), peer);
    return true;
  }
  Connection& c = connections_.emplace_back();
  c.fd = std::move(fd);
  c.peer = std::move(peer);
  c.authenticated = token_.empty();
  c.accepted = Clock::now();
  return true;
}

// Over the connection limit: one kRefused frame (a fresh socket's send buffer takes it whole),
// then close. The first refusal of an episode is logged; the rest are counted.
void TcpStoreServerImpl::refuse_connection(Fd fd, const std::string& peer) {
  ++counters_.refused_connections;
  const std::string why = where() + " is at its limit of " +
                          std::to_string(limits_.max_connections) +
                          " connections; connection from " + peer + " refused";
  if (refused_since_full_++ == 0) {
    TSR_LOG(kWarn, "coll") << why << " (further refusals are counted until one closes)";
  }
  std::string frame;
  detail::put_u32(frame, static_cast<uint32_t>(1 + why.size()));
  frame.push_back(static_cast<char>(StoreReply::kRefused));
  frame += why;
  (void)::send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd.get(), SHUT_WR);
}

void TcpStoreServerImpl::read_from(Connection& c) {
  char buf[65536];
  const size_t input_cap = 4 + max_request_body();
  for (;;) {
    if (c.close_after_send) break;  // refused: nothing more it sends is read
    size_t want = sizeof buf;
    if (c.discard > 0) {
      want = std::min(want, c.discard);
    } else {
      if (c.in.size() >= input_cap || buffered_ >= limits_.max_buffered_bytes) break;
      want = std::min({want, input_cap - c.in.size(), limits_.max_buffered_bytes - buffered_});
    }
    const ssize_t n = ::recv(c.fd.get(), buf, want, MSG_DONTWAIT);
    if (n > 0) {
      absorb(c, buf, static_cast<size_t>(n));
      if (c.discard == 0 && c.out.empty()) process(c);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.closed = true;  // EOF or error: the client is gone, its parked get with it
    return;
  }
  process(c);
}

void TcpStoreServerImpl::absorb(Connection& c, const char* data, size_t n) {
  const size_t skipped = std::min(c.discard, n);
  c.discard -= skipped;
  c.in.append(data + skipped, n - skipped);
  buffered_ += n - skipped;
}

void TcpStoreServerImpl::consume(Connection& c, size_t n) {
  n = std::min(n, c.in.size());
  c.in.erase(0, n);
  buffered_ -= n;
}

void TcpStoreServerImpl::write_to(Connection& c) {
  while (!c.out.empty()) {
    iovec iov[16];
    int count = 0;
    for (auto it = c.out.begin(); it != c.out.end() && count < 16; ++it, ++count) {
      const size_t skip = count == 0 ? c.out_offset : 0;
      iov[count] = {const_cast<char*>((*it)->data()) + skip, (*it)->size() - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.closed = true;
      return;
    }
    size_t sent = static_cast<size_t>(n);
    while (sent > 0) {
      const size_t left = c.out.front()->size() - c.out_offset;
      const size_t step = std::min(sent, left);
      c.out_offset += step;
      sent -= step;
      if (c.out_offset == c.out.front()->size()) {
        c.out.pop_front();
        c.out_offset = 0;
      }
    }
  }
  if (c.close_after_send) {
    c.closed = true;
    return;
  }
  c.busy_since = Clock::now();  // a reply went out whole: progress
}

void TcpStoreServerImpl::reply(Connection& c, StoreReply code, std::string_view tail) {
  std::string frame;
  detail::put_u32(frame, static_cast<uint32_t>(1 + tail.size()));
  frame.push_back(static_cast<char>(code));
  frame.append(tail);
  c.out.push_back(std::make_shared<const std::string>(std::move(frame)));
}

void TcpStoreServerImpl::reply_value(Connection& c, Bytes value) {
  std::string header;
  detail::put_u32(header, static_cast<uint32_t>(1 + value->size()));
  header.push_back(static_cast<char>(StoreReply::kOk));
  c.out.push_back(std::make_shared<const std::string>(std::move(header)));
  if (!value->empty()) c.out.push_back(std::move(value));
}

// Parses and answers the complete requests of `c`, one at a time: it stops at a get that has to
// wait, at a reply the client has not read yet, and at a partial request. A request longer than
// any limit allows is refused after its 4-byte length and skipped unread.
void TcpStoreServerImpl::process(Connection& c) {
  while (!c.closed && !c.waiting && c.out.empty() && c.discard == 0 && c.in.size() >= 4) {
    const uint32_t body = detail::get_u32(c.in.data());
    if (!c.authenticated && (body < 5 || body > kMaxHelloBody)) {
      refuse_unauthenticated(c, "a first request of " + std::to_string(body) +
                                    " bytes, not a hello (5.." + std::to_string(kMaxHelloBody) +
                                    " bytes)");
      write_to(c);
      return;
    }
    if (body < 5) {
      reply(c, StoreReply::kError,
            "malformed request: a body of " + std::to_string(body) + " bytes (at least 5)");
      c.close_after_send = true;
    } else if (body > max_request_body()) {
      reply(c, StoreReply::kRefused,
            "request of " + std::to_string(body) + " bytes refused: the store takes keys of at " +
                "most " + std::to_string(limits_.max_key_bytes) + " bytes and values of at most " +
                std::to_string(limits_.max_value_bytes) + " bytes");
      const size_t frame = 4 + size_t{body};
      const size_t held = std::min(frame, c.in.size());
      consume(c, held);
      c.discard = frame - held;
    } else if (c.in.size() < 4 + size_t{body}) {
      return;  // the rest has not arrived yet
    } else {
      handle(c, std::string_view(c.in).substr(4, body));
      consume(c, 4 + size_t{body});
    }
    c.busy_since = Clock::now();  // a request complete: progress
    write_to(c);
  }
}

// One complete request (op, key length, key, tail).
void TcpStoreServerImpl::handle(Connection& c, std::string_view frame) {
  const auto op = static_cast<StoreOp>(frame[0]);
  const uint32_t key_len = detail::get_u32(frame.data() + 1);
  if (!c.authenticated && (op != StoreOp::kHello || key_len != frame.size() - 5)) {
    refuse_unauthenticated(
        c, op == StoreOp::kHello ? "a malformed hello" : "a request before the hello");
    return;
  }
  if (op == StoreOp::kHello) {
    if (key_len != frame.size() - 5) {
      reply(c, StoreReply::kError, "malformed hello");
      c.close_after_send = true;
      return;
    }
    handle_hello(c, frame.substr(5));
    return;
  }
  if (key_len > frame.size() - 5) {
    reply(c, StoreReply::kError,
          "malformed request: a key of " + std::to_string(key_len) + " bytes in a body of " +
              std::to_string(frame.size()) + " bytes");
    c.close_after_send = true;
    return;
  }
  if (key_len > limits_.max_key_bytes) {
    reply(c, StoreReply::kRefused,
          "key of " + std::to_string(key_len) + " bytes refused: the store takes keys of at most " +
              std::to_string(limits_.max_key_bytes) + " bytes");
    return;
  }
  std::string key(frame.substr(5, key_len));
  const std::string_view tail = frame.substr(5 + key_len);
  switch (op) {
    case StoreOp::kSet: handle_set(c, key, tail); break;
    case StoreOp::kGet: {
      if (tail.size() != 8) {
        reply(c, StoreReply::kError, "malformed get '" + key + "': the timeout is not 8 bytes");
        c.close_after_send = true;
        return;
      }
      auto it = data_.find(key);
      if (it != data_.end()) {
        reply_value(c, it->second);
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
    case StoreOp::kAdd: handle_add(c, key, tail); break;
    default:
      reply(c, StoreReply::kError,
            "unknown store operation " + std::to_string(static_cast<unsigned char>(frame[0])));
      break;
  }
}

// A hello carries the job token; without a token on this store any hello is welcome (clients of
// a job with a token may meet a store started without one).
void TcpStoreServerImpl::handle_hello(Connection& c, std::string_view token) {
  if (!token_.empty()) {
    // Compared in time independent of where the first difference is.
    unsigned char diff = token.size() == token_.size() ? 0 : 1;
    for (size_t i = 0; i < token.size() && i < token_.size(); ++i) {
      diff |= static_cast<unsigned char>(token[i] ^ token_[i]);
    }
    if (diff != 0) {
      refuse_unauthenticated(c, token.empty() ? "an empty token" : "a wrong token");
      return;
    }
  }
  c.authenticated = true;
  reply(c, StoreReply::kOk, {});
}

// Closes a connection that did not authenticate, after one kRefused frame saying why. Logged one
// by one up to kLoggedRefusals, then every 1000th, so that a flood cannot flood the log.
void TcpStoreServerImpl::refuse_unauthenticated(Connection& c, const std::string& why) {
  const uint64_t n = ++counters_.refused_unauthenticated;
  if (n <= kLoggedRefusals || n % 1000 == 0) {
    TSR_LOG(kWarn, "coll") << where() << ": refused the connection from " << c.peer << ": " << why
                           << " (the store asks for the job token; " << n << " refused so far)";
  }
  reply(c, StoreReply::kUnauthenticated,
        "the store refused this connection: " + why +
            " (it asks for the job's token, "
            "TESSERA_STORE_TOKEN)");
  c.close_after_send = true;
  c.discard = 0;
  consume(c, c.in.size());
}

void TcpStoreServerImpl::handle_set(Connection& c, const std::string& key, std::string_view value) {
  if (value.size() > limits_.max_value_bytes) {
    reply(c, StoreReply::kRefused,
          "value of " + std::to_string(value.size()) +
              " bytes refused: the store takes values of at most " +
              std::to_string(limits_.max_value_bytes) + " bytes");
    return;
  }
  std::string why;
  if (!fits(key, value.size(), &why)) {
    reply(c, StoreReply::kRefused, why);
    return;
  }
  store(key, std::make_shared<const std::string>(value));
  reply(c, StoreReply::kOk, {});
  wake_waiters(key);
}

// add: the stored decimal integer (0 when absent) plus the delta; refused when the value is not
// an integer or the sum leaves int64.
void TcpStoreServerImpl::handle_add(Connection& c, const std::string& key, std::string_view tail) {
  if (tail.size() != 8) {
    reply(c, StoreReply::kError, "malformed add '" + key + "': the delta is not 8 bytes");
    c.close_after_send = true;
    return;
  }
  const auto delta = static_cast<int64_t>(detail::get_u64(tail.data()));
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = *it->second;
    char* end = nullptr;
    errno = 0;
    current = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0) {
      reply(c, StoreReply::kError, "add '" + key + "': the value is not an integer");
      return;
    }
  }
  int64_t updated = 0;
  if (__builtin_add_overflow(current, delta, &updated)) {
    reply(c, StoreReply::kError,
          "add '" + key + "': " + std::to_string(current) + " + " + std::to_string(delta) +
              " overflows a 64-bit integer; the value is left unchanged");
    return;
  }
  std::string text = std::to_string(updated);
  std::string why;
  if (!fits(key, text.size(), &why)) {
    reply(c, StoreReply::kRefused, why);
    return;
  }
  store(key, std::make_shared<const std::string>(std::move(text)));
  std::string out;
  detail::put_u64(out, static_cast<uint64_t>(updated));
  reply(c, StoreReply::kOk, out);
  wake_waiters(key);
}

// Whether writing `new_value_bytes` at `key` keeps the store within max_store_bytes.
bool TcpStoreServerImpl::fits(const std::string& key, size_t new_value_bytes,
                              std::string* why) const {
  size_t after = store_bytes_ + new_value_bytes;
  auto it = data_.find(key);
  if (it != data_.end()) {
    after -= it->second->size();
  } else {
    after += key.size() + kEntryOverhead;
  }
  if (after <= limits_.max_store_bytes) return true;
  *why = "store full: writing '" + key + "' (" + std::to_string(new_value_bytes) +
         " bytes) would hold " + std::to_string(after) + " bytes, over the limit of " +
         std::to_string(limits_.max_store_bytes);
  return false;
}

void TcpStoreServerImpl::store(const std::string& key, Bytes value) {
  auto [it, inserted] = data_.try_emplace(key);
  if (inserted) {
    store_bytes_ += key.size() + kEntryOverhead;
  } else {
    store_bytes_ -= it->second->size();
  }
  store_bytes_ += value->size();
  it->second = std::move(value);
}

void TcpStoreServerImpl::wake_waiters(const std::string& key) {
  const Bytes value = data_.find(key)->second;
  for (Connection& c : connections_) {
    if (c.closed || !c.waiting || c.wait_key != key) continue;
    c.waiting = false;
    reply_value(c, value);
    write_to(c);  // requests it sent while waiting are answered by serve()
  }
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

void TcpStoreServerImpl::remove_closed() {
  size_t removed = 0;
  connections_.remove_if([&](const Connection& c) {
    if (!c.closed) return false;
    buffered_ -= c.in.size();
    ++removed;
    return true;
  });
  if (removed > 0) {
    accept_paused_until_ = {};  // a descriptor freed: try accepting again
    if (refused_since_full_ > 0) {
      TSR_LOG(kWarn, "coll") << where() << ": " << refused_since_full_
                             << " connection(s) were refused at the limit of "
                             << limits_.max_connections;
      refused_since_full_ = 0;
    }
  }
  detail::TcpStoreServerStats s = counters_;
  s.connections = connections_.size();
  s.store_bytes = store_bytes_;
  s.buffered_bytes = buffered_;
  s.accept_paused = accept_paused_until_ > Clock::now();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = s;
}

}  // namespace

namespace detail {
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
  return std::unique_ptr<TcpStoreServer>(std::make_unique<TcpStoreServerImpl>(
      std::move(listener), detail::Fd(pipe_fds[0]), detail::Fd(pipe_fds[1]), bound, limits,
      std::string(token)));
}

}  // namespace tessera::coll
