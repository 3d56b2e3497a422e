#include "socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tessera::coll::detail {
namespace {

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1000000 ? 1000000 : static_cast<int>(left.count());
}

std::string errno_text(int err) {
  return std::strerror(err);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

Status resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const bool any = host.empty() || host == "0.0.0.0" || host == "*";
  const int rc = getaddrinfo(any ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
  if (rc != 0) {
    return unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return {};
}

// Waits for `events` on fd until the deadline; DEADLINE_EXCEEDED when it passes.
Status wait_fd(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return {};
    if (rc == 0) return deadline_exceeded(std::string(what) + ": timed out");
    if (errno != EINTR) return unavailable(std::string(what) + ": poll: " + errno_text(errno));
  }
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string endpoint_name(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<Fd> listen_tcp(const std::string& host, int port, int* out_port) {
  const std::string where = endpoint_name(host.empty() ? "0.0.0.0" : host, port);
  AddrInfo ai;
  TSR_RETURN_IF_ERROR(resolve(host, port, true, &ai).with_context("TCP store listen on " + where));
  std::string last_error = "no address";
  // Prefer IPv4 for a wildcard bind: clients most often name an IPv4 address.
  for (int pass = 0; pass < 2; ++pass) {
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      if ((pass == 0) != (a->ai_family == AF_INET)) continue;
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_error = "socket: " + errno_text(errno);
        continue;
      }
      const int one = 1;
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        last_error = "bind: " + errno_text(errno);
        continue;
      }
      if (::listen(fd.get(), 512) != 0) {
        last_error = "listen: " + errno_text(errno);
        continue;
      }
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
      *out_port = bound.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      return fd;
    }
  }
  return unavailable("TCP store cannot listen on " + where + ": " + last_error);
}

Result<Fd> connect_tcp(const std::string& host, int port, Clock::time_point deadline, bool retry) {
  const std::string where = "TCP store at " + endpoint_name(host, port);
  std::string last_error;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    AddrInfo ai;
    Status resolved = resolve(host, port, false, &ai);
    if (!resolved.ok()) {
      last_error = resolved.message();
    } else {
      for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
        Fd fd(
            ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
        if (!fd.valid()) {
          last_error = "socket: " + errno_text(errno);
          continue;
        }
        int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          Status ready = wait_fd(fd.get(), POLLOUT, deadline, where);
          if (!ready.ok()) {
            last_error = "connect: timed out";
            continue;
          }
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rc != 0) {
          last_error = "connect: " + errno_text(errno);
          continue;
        }
        const int flags = fcntl(fd.get(), F_GETFL);
        fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
        const int one = 1;
        setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
      }
    }
    if (!retry) return unavailable(where + ": " + last_error);
    if (Clock::now() + backoff >= deadline) {
      return deadline_exceeded(
          where + " not reachable before the timeout (last error: " + last_error + ")");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Status send_all(int fd, const void* data, size_t size, Clock::time_point deadline,
                std::string_view what) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    TSR_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, what));
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return unavailable(std::string(what) + ": connection lost (" + errno_text(errno) + ")");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return {};
}

Status recv_all(int fd, void* data, size_t size, Clock::time_point deadline,
                std::string_view what) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    TSR_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, what));
    const ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n == 0) return unavailable(std::string(what) + ": the store closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return unavailable(std::string(what) + ": connection lost (" + errno_text(errno) + ")");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return {};
}

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace tessera::coll::detail
