// The TCP store server's authentication: a store started with a job token serves a connection
// only after a hello that carries it (StoreOp::kHello, socket.h). A wrong or missing token, any
// other first frame, or no hello within kAuthTimeout gets one kUnauthenticated frame and the
// connection is closed; nothing a stranger sent reaches the data. The refusals are logged
// sparingly so that a flood of strangers cannot flood the log.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tcp_store_server.h"
#include "tessera/common/log.h"

namespace tessera::coll::detail {

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

// Closes a connection that did not authenticate, after one kUnauthenticated frame saying why.
// Logged one by one up to kLoggedRefusals, then every 1000th, so that a flood cannot flood the
// log.
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

}  // namespace tessera::coll::detail
