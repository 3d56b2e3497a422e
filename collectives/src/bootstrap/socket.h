// TCP plumbing of the store: an owning file descriptor, connect/listen, and whole-buffer send and
// receive bounded by a deadline. Errors name the peer ("127.0.0.1:29500") and the operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/common/status.h"

namespace tessera::coll::detail {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// "host:port", with brackets around IPv6 literals.
std::string endpoint_name(const std::string& host, int port);

// Binds and listens on host:port (empty host or "0.0.0.0" = every interface; port 0 = any free
// port). `out_port` receives the bound port.
Result<Fd> listen_tcp(const std::string& host, int port, int* out_port);

// Connects to host:port, retrying refused or unreachable attempts until `deadline` (the server
// may not be up yet). `retry` false makes one attempt. UNAVAILABLE / DEADLINE_EXCEEDED name the
// endpoint.
Result<Fd> connect_tcp(const std::string& host, int port, Clock::time_point deadline, bool retry);

// Sends/receives exactly `size` bytes before `deadline`. The peer closing the connection is
// UNAVAILABLE; running out of time is DEADLINE_EXCEEDED. `what` names the peer and operation.
Status send_all(int fd, const void* data, size_t size, Clock::time_point deadline,
                std::string_view what);
Status recv_all(int fd, void* data, size_t size, Clock::time_point deadline, std::string_view what);

// Little-endian integer encoding for the wire protocol.
void put_u32(std::string& out, uint32_t value);
void put_u64(std::string& out, uint64_t value);
uint32_t get_u32(const char* p);
uint64_t get_u64(const char* p);

// Frames larger than this are refused (a peer speaking another protocol, or corrupt data).
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;

// Store protocol. Request: u32 body length, then u8 op, u32 key length, key, op-specific tail
// (set: the value; get: u64 timeout in ms; add: i64 delta). Response: u32 body length, then u8
// reply code and a tail (ok: value / i64 / empty; error, refused: message). kRefused is a request
// over one of the server's limits (TcpStoreLimits), or a connection over its connection limit.
// kHello (key: the job token, no tail) opens a connection to a store that asks for a token; the
// server answers kOk, or kUnauthenticated (also to any other first frame) and closes. A store
// without a token accepts any hello; a client without a token sends none.
enum class StoreOp : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kHello = 4 };
enum class StoreReply : uint8_t {
  kOk = 0,
  kTimeout = 1,
  kError = 2,
  kRefused = 3,
  kUnauthenticated = 4
};

}  // namespace tessera::coll::detail
