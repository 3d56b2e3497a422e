// The TCP store server's connection accounting: accepting clients up to
// TcpStoreLimits::max_connections, refusing the rest with one frame that says why, resting the
// listener when the process runs out of descriptors (so poll() does not spin on it), and
// removing closed connections, which frees their buffered input and a descriptor.
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "tcp_store_server.h"
#include "tessera/common/log.h"

namespace tessera::coll::detail {
namespace {

std::string peer_name(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown peer";
  }
  return endpoint_name(host, std::atoi(port));
}

}  // namespace

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
  put_u32(frame, static_cast<uint32_t>(1 + why.size()));
  frame.push_back(static_cast<char>(StoreReply::kRefused));
  frame += why;
  (void)::send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd.get(), SHUT_WR);
}

// Drops the closed connections (and their buffered input), then publishes the turn's stats.
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
  TcpStoreServerStats s = counters_;
  s.connections = connections_.size();
  s.store_bytes = store_bytes_;
  s.buffered_bytes = buffered_;
  s.accept_paused = accept_paused_until_ > Clock::now();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = s;
}

}  // namespace tessera::coll::detail
