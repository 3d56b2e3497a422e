// The UCP resources under UcxTransport: one context, one worker, one endpoint per peer, the peers
// UCX reported dead, and a pool of registered staging buffers. The transport (ucx_transport.cc)
// builds messages on top; this file knows nothing of WireHeaders or reductions.
//
// Thread-compatible: the worker is created with UCS_THREAD_MODE_SINGLE and CommImpl::run drives one
// transport from one thread at a time.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/common/status.h"
#include "transport/ucx_transport.h"

namespace tessera::coll::ucx {

// Payload bytes per UCX message: large messages are cut into chunks of this size so that a
// receive-and-reduce reduces chunk i while chunk i+1 is still on the wire. A multiple of every
// element size.
inline constexpr size_t kChunkBytes = size_t{1} << 20;
// Chunks up to this many payload bytes are received into small staging buffers, so that many
// small receives in flight (an all-to-all over many peers) do not each hold a 1 MiB buffer.
inline constexpr size_t kSmallChunkBytes = size_t{64} << 10;

// A host buffer registered with UCP once (ucp_mem_map) and reused by every operation: receives
// land here (header + payload) before they are checked and copied or reduced into place. Device
// memory would be staged through the same buffers (see README.md, "UCX transport").
struct StagingBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ucp_mem_h memh = nullptr;
};

// 64-bit tags: comm_id (16) | sender rank (16) | per-(peer, direction) message counter (32).
inline uint64_t make_tag(uint32_t comm_id, int sender, uint32_t counter) {
  return (uint64_t{comm_id & 0xffffu} << 48) |
         (uint64_t{static_cast<uint32_t>(sender) & 0xffffu} << 32) | counter;
}

class Worker {
 public:
  // Collective over the communicator: creates the context and worker, exchanges worker addresses
  // through config.allgather and connects an endpoint to every other rank. UNAVAILABLE with UCX's
  // message when UCX cannot start; errors of the exchange are passed through.
  static Result<std::unique_ptr<Worker>> create(const UcxTransportConfig& config);

  // Closes the endpoints (flushing what is still queued to live peers, force-closing those known
  // dead), waiting at most min(timeout, 10 s); never hangs on a dead peer.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint32_t comm_id() const { return comm_id_; }
  ucp_worker_h handle() const { return worker_; }
  // The endpoint to `peer` (!= rank()); nullptr after it was force-closed.
  ucp_ep_h endpoint(int peer) const { return eps_[static_cast<size_t>(peer)]; }

  // Drives UCX: ucp_worker_progress until it reports no more events (bounded). Never blocks.
  void progress();

  // Why UCX declared `peer` dead (its status string), or nullopt while it is healthy.
  std::optional<std::string> peer_error(int peer) const;
  // The first peer UCX declared dead (lowest rank), with why.
  std::optional<std::pair<int, std::string>> first_failed_peer() const;

  // Force-closes the endpoint to `peer` so that UCX completes every request still queued on it
  // (with an error). Used by cancel() when a send cannot be cancelled otherwise.
  void force_close(int peer);

  // A registered buffer for a header and `payload` bytes (<= kChunkBytes): sizeof(WireHeader) +
  // kSmallChunkBytes or + kChunkBytes; RESOURCE_EXHAUSTED when mapping or registration fails.
  // Return it with release_staging() once UCX no longer writes to it.
  Result<StagingBuffer*> acquire_staging(size_t payload);
  void release_staging(StagingBuffer* buffer);

  // Next message counter to `peer` (sends) or from `peer` (receives); reserves `n` counters.
  uint32_t reserve_send_counters(int peer, uint32_t n);
  uint32_t reserve_recv_counters(int peer, uint32_t n);

 private:
  struct ErrorArg {
    Worker* self = nullptr;
    int peer = -1;
  };
  Worker() = default;
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  Status connect(const std::vector<std::string>& addresses);
  void close_endpoints();

  int rank_ = 0;
  int size_ = 1;
  uint32_t comm_id_ = 0;
  std::chrono::milliseconds timeout_{60000};
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<std::unique_ptr<ErrorArg>> error_args_;
  std::map<int, std::string> failed_;
  std::vector<uint32_t> send_counters_;
  std::vector<uint32_t> recv_counters_;
  std::vector<std::unique_ptr<StagingBuffer>> staging_;  // every buffer, owned
  std::vector<StagingBuffer*> free_small_;
  std::vector<StagingBuffer*> free_large_;
};

}  // namespace tessera::coll::ucx
