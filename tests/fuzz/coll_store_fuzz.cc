// The TCP rendezvous store's requests (collectives/src/bootstrap/tcp_store_server.cc): any local
// or remote client can connect and send bytes. The input is sent on one connection to a server
// running in this process (small limits, so the fuzzer reaches them), the write side is closed,
// and the replies are read until the server closes or stays quiet. The server keeps its state
// between inputs, as it does between clients.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "fuzz_target.h"
#include "tessera/coll/bootstrap.h"

namespace {

tessera::coll::TcpStoreServer& server() {
  static const auto instance = [] {
    tessera::coll::TcpStoreLimits limits;
    limits.max_key_bytes = 256;
    limits.max_value_bytes = 4096;
    limits.max_store_bytes = 64 << 10;
    limits.max_buffered_bytes = 64 << 10;
    limits.max_connections = 8;
    limits.stall_timeout = std::chrono::milliseconds(200);
    auto started = tessera::coll::start_tcp_store_server("127.0.0.1", 0, limits);
    FUZZ_CHECK(started.ok(), "cannot start the TCP store server");
    return std::move(*started);
  }();
  return *instance;
}

// Waits up to `ms` for `events` on fd.
bool ready(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms) > 0;
}

}  // namespace

TESSERA_FUZZ_TARGET(coll_store) {
  const int port = server().port();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
             "cannot connect to the store");
  char sink[4096];
  size_t sent = 0;
  while (sent < size) {
    // Read replies while sending: the server stops reading a client whose replies are unread.
    while (ready(fd, POLLIN, 0) && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    if (!ready(fd, POLLOUT, 50)) break;  // the server stopped reading (a refused request)
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  ::shutdown(fd, SHUT_WR);
  // Replies until the server closes, or 20 ms of silence (a get waiting for its key).
  while (ready(fd, POLLIN, 20) && ::recv(fd, sink, sizeof sink, 0) > 0) {
  }
  ::close(fd);
  return 0;
}
