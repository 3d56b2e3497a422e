// The TCP store server's commands on its data: set, get (parked until the key is written or the
// request's timeout passes) and add (an atomic decimal counter). The data is one map of shared
// values whose keys and bytes are counted against TcpStoreLimits::max_store_bytes; a request
// over a limit is refused to its client only, and a write wakes every get parked on its key.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "tcp_store_server.h"

namespace tessera::coll::detail {

// One complete request (op, key length, key, tail).
void TcpStoreServerImpl::handle(Connection& c, std::string_view frame) {
  const auto op = static_cast<StoreOp>(frame[0]);
  const uint32_t key_len = get_u32(frame.data() + 1);
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
    case StoreOp::kGet: handle_get(c, std::move(key), tail); break;
    case StoreOp::kAdd: handle_add(c, key, tail); break;
    default:
      reply(c, StoreReply::kError,
            "unknown store operation " + std::to_string(static_cast<unsigned char>(frame[0])));
      break;
  }
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

// get: the value when the key is there; else the connection waits (its later requests with it)
// until wake_waiters answers it or expire() times it out.
void TcpStoreServerImpl::handle_get(Connection& c, std::string key, std::string_view tail) {
  if (tail.size() != 8) {
    reply(c, StoreReply::kError, "malformed get '" + key + "': the timeout is not 8 bytes");
    c.close_after_send = true;
    return;
  }
  auto it = data_.find(key);
  if (it != data_.end()) {
    reply_value(c, it->second);
    return;
  }
  // At most a day, so the deadline cannot overflow.
  const auto timeout_ms =
      static_cast<int64_t>(std::min<uint64_t>(get_u64(tail.data()), uint64_t{86400000}));
  c.waiting = true;
  c.wait_key = std::move(key);
  c.wait_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
}

// add: the stored decimal integer (0 when absent) plus the delta; refused when the value is not
// an integer or the sum leaves int64.
void TcpStoreServerImpl::handle_add(Connection& c, const std::string& key, std::string_view tail) {
  if (tail.size() != 8) {
    reply(c, StoreReply::kError, "malformed add '" + key + "': the delta is not 8 bytes");
    c.close_after_send = true;
    return;
  }
  const auto delta = static_cast<int64_t>(get_u64(tail.data()));
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
  put_u64(out, static_cast<uint64_t>(updated));
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

}  // namespace tessera::coll::detail
