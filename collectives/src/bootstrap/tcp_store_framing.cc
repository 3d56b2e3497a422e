// The TCP store server's frames on the wire (socket.h: a u32 body length, then the body).
// Reading is bounded: a connection's unparsed input stops at one largest request and all
// connections' together at TcpStoreLimits::max_buffered_bytes; a request longer than any limit
// allows is refused after its length and skipped unread. Replies are queued as shared buffers
// (a stored value is sent without being copied) and written with sendmsg as the socket takes them.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <string_view>

#include "tcp_store_server.h"

namespace tessera::coll::detail {

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
  put_u32(frame, static_cast<uint32_t>(1 + tail.size()));
  frame.push_back(static_cast<char>(code));
  frame.append(tail);
  c.out.push_back(std::make_shared<const std::string>(std::move(frame)));
}

void TcpStoreServerImpl::reply_value(Connection& c, Bytes value) {
  std::string header;
  put_u32(header, static_cast<uint32_t>(1 + value->size()));
  header.push_back(static_cast<char>(StoreReply::kOk));
  c.out.push_back(std::make_shared<const std::string>(std::move(header)));
  if (!value->empty()) c.out.push_back(std::move(value));
}

// Parses and answers the complete requests of `c`, one at a time: it stops at a get that has to
// wait, at a reply the client has not read yet, and at a partial request. A request longer than
// any limit allows is refused after its 4-byte length and skipped unread.
void TcpStoreServerImpl::process(Connection& c) {
  while (!c.closed && !c.waiting && c.out.empty() && c.discard == 0 && c.in.size() >= 4) {
    const uint32_t body = get_u32(c.in.data());
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

}  // namespace tessera::coll::detail
