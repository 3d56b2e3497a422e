// UcxTransport: P2P operations as tagged UCX messages (see transport.h for the contract).
//
// Every operation is cut into chunks of ucx::kChunkBytes (a zero-byte operation is one empty
// chunk) and every chunk travels as one tagged message {WireHeader, payload}. Tags are
// comm_id | sender | counter, and start() reserves one counter per chunk, so messages match in the
// order operations were started whatever order the chunks complete in.
//
// Sends go straight from the caller's buffer (an iov of header and payload, at most kSendWindow
// chunks in flight). Receives land in registered staging buffers (at most kRecvWindow per
// operation), where the header is checked before a byte reaches the caller: a mismatched message
// is never copied or reduced into dst. kRecvReduce reduces each chunk into dst as it lands, while
// the next chunks are still on the wire.
//
// Memory types: buffers are host memory. Device memory that UCX cannot reach would take the same
// staging buffers in both directions: a send copies chunk i to a staging buffer through the HAL and
// sends it contiguous (registered, so the wire can use zero copy), a receive copies or reduces the
// staged chunk into device memory; the chunk loop stays as it is (README.md, "UCX transport").
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "reduce.h"
#include "transport/transport.h"
#include "transport/ucx_transport.h"
#include "transport/ucx_worker.h"

namespace tessera::coll {
namespace {

using ucx::kChunkBytes;
using ucx::StagingBuffer;

constexpr size_t kSendWindow = 8;  // chunks of one send in flight
constexpr size_t kRecvWindow = 4;  // chunks of one receive posted (staging buffers held)
// How long cancel() waits for UCX to complete cancelled requests before force-closing the endpoint.
constexpr std::chrono::milliseconds kCancelWait{1000};

size_t chunk_count(size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kChunkBytes - 1) / kChunkBytes;
}
size_t chunk_length(size_t bytes, size_t chunk) {
  return std::min(kChunkBytes, bytes - chunk * kChunkBytes);
}

std::string_view kind_name(P2P::Kind kind) {
  switch (kind) {
    case P2P::Kind::kSend: return "send";
    case P2P::Kind::kRecv: return "recv";
    case P2P::Kind::kRecvReduce: return "recv-reduce";
  }
  return "p2p";
}

struct Slot {
  void* request = nullptr;  // the UCX request while in flight
  size_t chunk = 0;
  size_t length = 0;                  // payload bytes
  StagingBuffer* staging = nullptr;   // receives
  std::array<ucp_dt_iov_t, 2> iov{};  // sends: header, payload (UCX reads it until completion)
};

struct OpState {
  int peer = -1;
  bool is_send = false;
  uint32_t first_counter = 0;
  size_t chunks = 1;
  size_t next_chunk = 0;  // next to post
  size_t completed = 0;
  WireHeader header;  // sends: prefixed to every chunk, outlives the requests
  std::array<Slot, kSendWindow> slots;
  size_t window() const { return is_send ? kSendWindow : kRecvWindow; }
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(std::unique_ptr<ucx::Worker> worker) : worker_(std::move(worker)) {}
  ~UcxTransport() override {
    for (auto& [key, state] : live_) drain(*state);
    live_.clear();
  }

  std::string_view name() const override { return "ucx"; }
  Status start(P2P& op) override;
  Status progress(P2P& op) override;
  void poll() override { worker_->progress(); }
  void cancel(P2P& op) override;
  std::optional<std::pair<int, std::string>> failed_peer() const override {
    return worker_->first_failed_peer();
  }

 private:
  Status validate(const P2P& op) const;
  OpState* state_of(const P2P& op) const;
  Status post(const P2P& op, OpState& state, Slot& slot);
  Status finish(P2P& op, OpState& state, Slot& slot, ucs_status_t status, size_t length);
  Status peer_lost(const P2P& op, const std::string& why) const;
  void release(P2P& op, OpState* state);
  // Cancels what `state` has in flight and waits (bounded) until UCX no longer uses its buffers.
  void drain(OpState& state);

  std::unique_ptr<ucx::Worker> worker_;
  std::unordered_map<OpState*, std::unique_ptr<OpState>> live_;
};

Status UcxTransport::validate(const P2P& op) const {
  // Built only on failure: start() is on the latency path of every small message.
  auto what = [&](std::string_view why) {
    return "ucx: " + std::string(kind_name(op.kind)) + " on rank " +
           std::to_string(worker_->rank()) + " with rank " + std::to_string(op.peer) + ": " +
           std::string(why);
  };
  if (op.peer < 0 || op.peer >= worker_->size() || op.peer == worker_->rank()) {
    return invalid_argument(what("peer outside the communicator of size " +
                                 std::to_string(worker_->size()) + " or this rank itself"));
  }
  if (state_of(op) != nullptr) return failed_precondition(what("operation already started"));
  if (op.bytes > 0) {
    if (op.kind == P2P::Kind::kSend && op.src == nullptr) {
      return invalid_argument(what("null source buffer"));
    }
    if (op.kind != P2P::Kind::kSend && op.dst == nullptr) {
      return invalid_argument(what("null destination buffer"));
    }
  }
  if (op.kind == P2P::Kind::kRecvReduce) {
    if (op.bytes > 0 && op.src == nullptr) return invalid_argument(what("null local operand"));
    const size_t element = dtype_bytes(op.dtype);
    if (element == 0 || op.bytes % element != 0) {
      return invalid_argument(
          what(std::to_string(op.bytes) + " bytes is not a whole number of elements"));
    }
  }
  if (worker_->endpoint(op.peer) == nullptr) {
    return failed_precondition(what("the endpoint was closed by an earlier cancel"));
  }
  return Status();
}

Status UcxTransport::start(P2P& op) {
  TSR_RETURN_IF_ERROR(validate(op));
  if (auto why = worker_->peer_error(op.peer)) return peer_lost(op, *why);
  auto state = std::make_unique<OpState>();
  state->peer = op.peer;
  state->is_send = op.kind == P2P::Kind::kSend;
  state->chunks = chunk_count(op.bytes);
  state->header = op.header;
  const auto n = static_cast<uint32_t>(state->chunks);
  state->first_counter = state->is_send ? worker_->reserve_send_counters(op.peer, n)
                                        : worker_->reserve_recv_counters(op.peer, n);
  OpState* raw = state.get();
  live_.emplace(raw, std::move(state));
  op.done = false;
  op.moved = 0;
  op.private_[0] = reinterpret_cast<uintptr_t>(raw);
  return progress(op);  // posts the first window
}

OpState* UcxTransport::state_of(const P2P& op) const {
  auto* state = reinterpret_cast<OpState*>(static_cast<uintptr_t>(op.private_[0]));
  return live_.count(state) != 0 ? state : nullptr;
}

Status UcxTransport::post(const P2P& op, OpState& state, Slot& slot) {
  slot.chunk = state.next_chunk++;
  slot.length = op.bytes == 0 ? 0 : chunk_length(op.bytes, slot.chunk);
  const size_t offset = slot.chunk * kChunkBytes;
  const auto counter = static_cast<uint32_t>(state.first_counter + slot.chunk);
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  void* request = nullptr;
  if (state.is_send) {
    slot.iov[0] = {&state.header, sizeof(WireHeader)};
    slot.iov[1] = {const_cast<char*>(static_cast<const char*>(op.src)) + offset, slot.length};
    param.datatype = ucp_dt_make_iov();
    const uint64_t tag = ucx::make_tag(worker_->comm_id(), worker_->rank(), counter);
    request = ucp_tag_send_nbx(worker_->endpoint(op.peer), slot.iov.data(),
                               slot.length == 0 ? 1 : 2, tag, &param);
  } else {
    TSR_ASSIGN_OR_RETURN(slot.staging, worker_->acquire_staging(slot.length));
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.datatype = ucp_dt_make_contig(1);
    param.memh = slot.staging->memh;
    const uint64_t tag = ucx::make_tag(worker_->comm_id(), op.peer, counter);
    request = ucp_tag_recv_nbx(worker_->handle(), slot.staging->data, slot.staging->bytes, tag,
                               ~uint64_t{0}, &param);
  }
  if (UCS_PTR_IS_ERR(request)) {
    worker_->release_staging(slot.staging);
    slot.staging = nullptr;
    return unavailable("ucx: " + std::string(kind_name(op.kind)) + " of chunk " +
                       std::to_string(slot.chunk + 1) + "/" + std::to_string(state.chunks) +
                       " between rank " + std::to_string(worker_->rank()) + " and rank " +
                       std::to_string(op.peer) +
                       " failed: " + ucs_status_string(UCS_PTR_STATUS(request)));
  }
  slot.request = request;
  return Status();
}

Status UcxTransport::finish(P2P& op, OpState& state, Slot& slot, ucs_status_t status,
                            size_t length) {
  StagingBuffer* staging = slot.staging;
  slot.staging = nullptr;
  struct Release {  // the staging buffer goes back to the pool on every path out
    ucx::Worker* worker;
    StagingBuffer* buffer;
    ~Release() { worker->release_staging(buffer); }
  } release{worker_.get(), staging};

  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    // Only a sender that disagrees about the count sends a chunk larger than expected.
    return invalid_argument(
        "collective mismatch: rank " + std::to_string(op.peer) + " sent chunk " +
        std::to_string(slot.chunk + 1) + " larger than the " + std::to_string(slot.length) +
        " bytes rank " + std::to_string(worker_->rank()) + " expected (count " +
        std::to_string(op.header.count) + ", operation #" + std::to_string(op.header.seq) + ")");
  }
  if (status != UCS_OK) {
    if (auto why = worker_->peer_error(op.peer)) return peer_lost(op, *why);
    return unavailable("ucx: " + std::string(kind_name(op.kind)) + " of chunk " +
                       std::to_string(slot.chunk + 1) + "/" + std::to_string(state.chunks) +
                       " between rank " + std::to_string(worker_->rank()) + " and rank " +
                       std::to_string(op.peer) + " failed: " + ucs_status_string(status));
  }
  if (!state.is_send) {
    const int rank = worker_->rank();
    if (length < sizeof(WireHeader)) {
      return data_loss("ucx: rank " + std::to_string(op.peer) + " sent rank " +
                       std::to_string(rank) + " a " + std::to_string(length) +
                       "-byte message, shorter than a header");
    }
    WireHeader got;
    std::memcpy(&got, staging->data, sizeof(WireHeader));
    if (!header_matches(got, op.header)) return header_mismatch(got, op.header, rank);
    if (length - sizeof(WireHeader) != slot.length) {
      return data_loss("ucx: rank " + std::to_string(op.peer) + " sent " +
                       std::to_string(length - sizeof(WireHeader)) + " bytes in chunk " +
                       std::to_string(slot.chunk + 1) + " but rank " + std::to_string(rank) +
                       " expected " + std::to_string(slot.length));
    }
    const size_t offset = slot.chunk * kChunkBytes;
    const char* payload = static_cast<const char*>(staging->data) + sizeof(WireHeader);
    if (slot.length > 0) {
      char* dst = static_cast<char*>(op.dst) + offset;
      if (op.kind == P2P::Kind::kRecv) {
        std::memcpy(dst, payload, slot.length);
      } else {
        reduce_pair(dst, static_cast<const char*>(op.src) + offset, payload,
                    slot.length / dtype_bytes(op.dtype), op.dtype, op.op);
      }
    }
  }
  op.moved += slot.length;
  ++state.completed;
  return Status();
}

Status UcxTransport::progress(P2P& op) {
  if (op.done) return Status();
  OpState* state = state_of(op);
  if (state == nullptr) {
    return failed_precondition("ucx: progress on a " + std::string(kind_name(op.kind)) +
                               " that was not started (or was cancelled)");
  }
  for (Slot& slot : state->slots) {
    if (slot.request == nullptr) continue;
    ucs_status_t status;
    ucp_tag_recv_info_t info = {};
    if (state->is_send) {
      status = ucp_request_check_status(slot.request);
    } else {
      status = ucp_tag_recv_request_test(slot.request, &info);
    }
    if (status == UCS_INPROGRESS) continue;
    ucp_request_free(slot.request);
    slot.request = nullptr;
    TSR_RETURN_IF_ERROR(finish(op, *state, slot, status, info.length));
  }
  // Refill the window; a send that completes at once (NULL request) frees its slot immediately.
  for (size_t i = 0; i < state->window(); ++i) {
    Slot& slot = state->slots[i];
    while (slot.request == nullptr && state->next_chunk < state->chunks) {
      TSR_RETURN_IF_ERROR(post(op, *state, slot));
      if (slot.request == nullptr) TSR_RETURN_IF_ERROR(finish(op, *state, slot, UCS_OK, 0));
    }
  }
  if (state->completed == state->chunks) {
    release(op, state);
    op.done = true;
    return Status();
  }
  // A receive is not bound to an endpoint: only the error callback says its sender is gone.
  if (auto why = worker_->peer_error(op.peer)) return peer_lost(op, *why);
  return Status();
}

Status UcxTransport::peer_lost(const P2P& op, const std::string& why) const {
  return unavailable("ucx: rank " + std::to_string(op.peer) + " is unreachable from rank " +
                     std::to_string(worker_->rank()) + " during a " +
                     std::string(kind_name(op.kind)) + " of " + std::to_string(op.bytes) +
                     " bytes: " + why);
}

void UcxTransport::release(P2P& op, OpState* state) {
  op.private_[0] = 0;
  live_.erase(state);
}

void UcxTransport::drain(OpState& state) {
  auto in_flight = [&] {
    return std::any_of(state.slots.begin(), state.slots.end(),
                       [](const Slot& s) { return s.request != nullptr; });
  };
  auto reap = [&](std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (in_flight()) {
      worker_->progress();
      for (Slot& slot : state.slots) {
        if (slot.request == nullptr || ucp_request_check_status(slot.request) == UCS_INPROGRESS) {
          continue;
        }
        ucp_request_free(slot.request);
        slot.request = nullptr;
        worker_->release_staging(slot.staging);
        slot.staging = nullptr;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::yield();
    }
  };
  for (Slot& slot : state.slots) {
    if (slot.request != nullptr) ucp_request_cancel(worker_->handle(), slot.request);
  }
  reap(kCancelWait);
  if (!in_flight()) return;
  // A send already on the wire (or a receive in the middle of a rendezvous) cannot be cancelled;
  // closing the endpoint completes them with an error so the caller's buffers are free again.
  worker_->force_close(state.peer);
  reap(kCancelWait);
  for (Slot& slot : state.slots) {
    if (slot.request == nullptr) continue;
    // Still running: UCX frees the request when it completes; the staging buffer it may still
    // write to is never reused (the worker unmaps it at destruction).
    ucp_request_free(slot.request);
    slot.request = nullptr;
    slot.staging = nullptr;
  }
}

void UcxTransport::cancel(P2P& op) {
  OpState* state = state_of(op);
  if (state == nullptr) return;
  drain(*state);
  release(op, state);
}

}  // namespace

bool ucx_available() {
  return true;
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const UcxTransportConfig& config) {
  TSR_ASSIGN_OR_RETURN(auto worker, ucx::Worker::create(config));
  return std::unique_ptr<Transport>(std::make_unique<UcxTransport>(std::move(worker)));
}

}  // namespace tessera::coll
