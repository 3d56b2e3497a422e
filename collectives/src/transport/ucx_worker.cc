#include "transport/ucx_worker.h"

#include <sys/mman.h>

#include <algorithm>
#include <string_view>
#include <thread>

#include "transport/transport.h"

namespace tessera::coll::ucx {
namespace {

// Bound on the endpoint flush at destruction: a live peer drains in milliseconds, a dead one
// fails at once (peer error mode); the bound only protects against a stuck network.
constexpr std::chrono::milliseconds kMaxCloseWait{10000};

std::string ucx_error(std::string_view what, ucs_status_t status) {
  return "ucx: " + std::string(what) + ": " + ucs_status_string(status);
}

// Waits for a UCX request (close, flush) until `deadline`, progressing the worker; frees it.
void wait_and_free(ucp_worker_h worker, void* request,
                   std::chrono::steady_clock::time_point deadline) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  while (ucp_request_check_status(request) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    if (ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }
  ucp_request_free(request);  // still running past the deadline: UCX frees it when it completes
}

}  // namespace

Result<std::unique_ptr<Worker>> Worker::create(const UcxTransportConfig& config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return invalid_argument("ucx: rank " + std::to_string(config.rank) + " outside a size " +
                            std::to_string(config.size) + " communicator");
  }
  if (config.size > 0x10000) {
    return invalid_argument("ucx: " + std::to_string(config.size) +
                            " ranks exceed the 16 tag bits of the sender rank");
  }
  if (!config.allgather) return invalid_argument("ucx: config.allgather is not set");

  std::unique_ptr<Worker> self(new Worker());
  self->rank_ = config.rank;
  self->size_ = config.size;
  self->comm_id_ = config.comm_id;
  self->timeout_ = config.timeout;
  self->send_counters_.assign(static_cast<size_t>(config.size), 0);
  self->recv_counters_.assign(static_cast<size_t>(config.size), 0);

  ucp_config_t* ucp_config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &ucp_config);
  if (status != UCS_OK) return unavailable(ucx_error("reading the UCX_* configuration", status));
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG;
  params.estimated_num_eps = static_cast<size_t>(config.size);
  params.mt_workers_shared = 0;
  params.name = "tessera";
  status = ucp_init(&params, ucp_config, &self->context_);
  ucp_config_release(ucp_config);
  if (status != UCS_OK) return unavailable(ucx_error("ucp_init", status));

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // SERIALIZED, not SINGLE: blocking operations drive the worker from the caller's thread and
  // stream operations from the communicator's proxy thread, one at a time (CommImpl's exec_mutex_).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(self->context_, &worker_params, &self->worker_);
  if (status != UCS_OK) return unavailable(ucx_error("ucp_worker_create", status));

  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  status = ucp_worker_get_address(self->worker_, &address, &address_bytes);
  if (status != UCS_OK) return unavailable(ucx_error("ucp_worker_get_address", status));
  std::string mine(reinterpret_cast<const char*>(address), address_bytes);
  ucp_worker_release_address(self->worker_, address);

  auto all = config.allgather(mine);
  if (!all.ok()) return all.status().with_context("ucx: exchanging worker addresses");
  if (all->size() != static_cast<size_t>(config.size)) {
    return internal_error("ucx: the address exchange returned " + std::to_string(all->size()) +
                          " addresses for " + std::to_string(config.size) + " ranks");
  }
  TSR_RETURN_IF_ERROR(self->connect(*all));
  return self;
}

Status Worker::connect(const std::vector<std::string>& addresses) {
  eps_.assign(static_cast<size_t>(size_), nullptr);
  error_args_.resize(static_cast<size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const std::string& address = addresses[static_cast<size_t>(peer)];
    if (address.empty()) {
      return invalid_argument("ucx: rank " + std::to_string(peer) + " sent an empty address");
    }
    auto arg = std::make_unique<ErrorArg>();
    arg->self = this;
    arg->peer = peer;
    ucp_ep_params_t ep_params = {};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = &Worker::on_endpoint_error;
    ep_params.err_handler.arg = arg.get();
    ucs_status_t status = ucp_ep_create(worker_, &ep_params, &eps_[static_cast<size_t>(peer)]);
    if (status != UCS_OK) {
      eps_[static_cast<size_t>(peer)] = nullptr;
      return unavailable(ucx_error(
          "connecting rank " + std::to_string(rank_) + " to rank " + std::to_string(peer), status));
    }
    error_args_[static_cast<size_t>(peer)] = std::move(arg);
  }
  return Status();
}

void Worker::on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* error = static_cast<ErrorArg*>(arg);
  error->self->failed_.emplace(error->peer, ucs_status_string(status));
}

void Worker::progress() {
  // Bounded so that a flood of arrivals cannot starve the caller's deadline checks.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
}

std::optional<std::string> Worker::peer_error(int peer) const {
  auto it = failed_.find(peer);
  if (it == failed_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::pair<int, std::string>> Worker::first_failed_peer() const {
  if (failed_.empty()) return std::nullopt;
  return *failed_.begin();
}

void Worker::force_close(int peer) {
  ucp_ep_h& ep = eps_[static_cast<size_t>(peer)];
  if (ep == nullptr) return;
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(ep, &param);
  ep = nullptr;
  wait_and_free(worker_, request, std::chrono::steady_clock::now() + kMaxCloseWait);
}

void Worker::close_endpoints() {
  // Start every close first so that the flushes to live peers overlap, then wait for them all.
  std::vector<void*> requests;
  for (int peer = 0; peer < static_cast<int>(eps_.size()); ++peer) {
    ucp_ep_h& ep = eps_[static_cast<size_t>(peer)];
    if (ep == nullptr) continue;
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = failed_.count(peer) != 0 ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    requests.push_back(ucp_ep_close_nbx(ep, &param));
    ep = nullptr;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::min(timeout_, kMaxCloseWait);
  for (void* request : requests) wait_and_free(worker_, request, deadline);
}

Worker::~Worker() {
  if (worker_ != nullptr) {
    close_endpoints();
    for (auto& buffer : staging_) {
      if (buffer->memh != nullptr) ucp_mem_unmap(context_, buffer->memh);
    }
    ucp_worker_destroy(worker_);
  }
  for (auto& buffer : staging_) munmap(buffer->data, buffer->bytes);
  if (context_ != nullptr) ucp_cleanup(context_);
}

Result<StagingBuffer*> Worker::acquire_staging(size_t payload) {
  const bool small = payload <= kSmallChunkBytes;
  std::vector<StagingBuffer*>& pool = small ? free_small_ : free_large_;
  if (!pool.empty()) {
    StagingBuffer* buffer = pool.back();
    pool.pop_back();
    return buffer;
  }
  const size_t bytes = sizeof(WireHeader) + (small ? kSmallChunkBytes : kChunkBytes);
  // mmap: page aligned, and the kernel may back the large ones with transparent huge pages.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return resource_exhausted("ucx: mapping a " + std::to_string(bytes) +
                              "-byte staging buffer failed");
  }
  auto buffer = std::make_unique<StagingBuffer>();
  buffer->data = data;
  buffer->bytes = bytes;
  ucp_mem_map_params_t map_params = {};
  map_params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map_params.address = data;
  map_params.length = bytes;
  ucs_status_t status = ucp_mem_map(context_, &map_params, &buffer->memh);
  if (status != UCS_OK) {
    munmap(data, bytes);
    return resource_exhausted(ucx_error("registering a staging buffer", status));
  }
  staging_.push_back(std::move(buffer));
  return staging_.back().get();
}

void Worker::release_staging(StagingBuffer* buffer) {
  if (buffer == nullptr) return;
  (buffer->bytes <= sizeof(WireHeader) + kSmallChunkBytes ? free_small_ : free_large_)
      .push_back(buffer);
}

uint32_t Worker::reserve_send_counters(int peer, uint32_t n) {
  uint32_t& counter = send_counters_[static_cast<size_t>(peer)];
  const uint32_t first = counter;
  counter += n;  // wraps after 2^32 messages; tags only need to differ among those in flight
  return first;
}

uint32_t Worker::reserve_recv_counters(int peer, uint32_t n) {
  uint32_t& counter = recv_counters_[static_cast<size_t>(peer)];
  const uint32_t first = counter;
  counter += n;
  return first;
}

}  // namespace tessera::coll::ucx
