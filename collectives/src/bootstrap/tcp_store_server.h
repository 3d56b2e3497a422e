// The TCP store server's state, shared by the files that each hold one of its responsibilities:
//   tcp_store_server.cc       start_tcp_store_server, the poll() loop, its timeouts and stats
//   tcp_store_connections.cc  accepting, refusing over the limit, and removing connections
//   tcp_store_framing.cc      reading and writing frames within the input and size limits
//   tcp_store_auth.cc         the job token's hello and refusing strangers
//   tcp_store_commands.cc     set, get and add on the stored data, and waking parked gets
//
// One poll() loop on a background thread owns everything here; a get for a missing key parks
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
//
// Private to collectives/src/bootstrap. Only stats() and the destructor may be called from
// another thread; every other member runs on the server's own thread.
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "internal.h"
#include "socket.h"
#include "tessera/coll/bootstrap.h"

namespace tessera::coll::detail {

struct StoreConnection {
  using Bytes = std::shared_ptr<const std::string>;

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
    return in.size() >= 4 + size_t{get_u32(in.data())};
  }
};

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  // Starts the serving thread on `listener` (non-blocking); a byte on `wake_write` stops it.
  TcpStoreServerImpl(Fd listener, Fd wake_read, Fd wake_write, int port, TcpStoreLimits limits,
                     std::string token);
  ~TcpStoreServerImpl() override;  // stops and joins the thread; closes every connection

  int port() const override { return port_; }
  TcpStoreServerStats stats() const;  // thread-safe

 private:
  using Bytes = StoreConnection::Bytes;
  using Connection = StoreConnection;

  // Bookkeeping charged for every key on top of its bytes (map node, string headers).
  static constexpr size_t kEntryOverhead = 64;
  // How long the listener rests after accept() ran out of descriptors, unless a connection
  // closes first (which frees one).
  static constexpr std::chrono::milliseconds kAcceptPause{250};
  // Before authentication a connection may send one small frame (a hello: op, key length,
  // token) and must do so promptly, so that strangers cannot hold buffers or connection slots
  // for long.
  static constexpr size_t kMaxHelloBody = 5 + 1024;
  static constexpr std::chrono::milliseconds kAuthTimeout{10000};
  // Refusals of unauthenticated connections logged one by one before only every 1000th is.
  static constexpr uint64_t kLoggedRefusals = 20;

  // The loop (tcp_store_server.cc).
  void serve();
  std::vector<pollfd> poll_set(std::vector<Connection*>& order, Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
  void expire(Clock::time_point now);
  // Connections (tcp_store_connections.cc).
  void accept_clients();
  bool accept_one();
  void refuse_connection(Fd fd, const std::string& peer);
  void remove_closed();
  // Frames (tcp_store_framing.cc).
  void read_from(Connection& c);
  void absorb(Connection& c, const char* data, size_t n);
  void consume(Connection& c, size_t n);
  void write_to(Connection& c);
  void process(Connection& c);
  void reply(Connection& c, StoreReply code, std::string_view tail);
  void reply_value(Connection& c, Bytes value);
  size_t max_request_body() const {
    return 5 + limits_.max_key_bytes + std::max<size_t>(limits_.max_value_bytes, 8);
  }
  // Authentication (tcp_store_auth.cc).
  void handle_hello(Connection& c, std::string_view token);
  void refuse_unauthenticated(Connection& c, const std::string& why);
  // Commands (tcp_store_commands.cc).
  void handle(Connection& c, std::string_view frame);
  void handle_set(Connection& c, const std::string& key, std::string_view value);
  void handle_get(Connection& c, std::string key, std::string_view tail);
  void handle_add(Connection& c, const std::string& key, std::string_view tail);
  bool fits(const std::string& key, size_t new_value_bytes, std::string* why) const;
  void store(const std::string& key, Bytes value);
  void wake_waiters(const std::string& key);

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
  TcpStoreServerStats counters_;
  mutable std::mutex stats_mutex_;
  TcpStoreServerStats stats_;
  std::thread thread_;
};

}  // namespace tessera::coll::detail
