#include "tessera/hal/stream.h"

#include <utility>

#include "tessera/common/log.h"

namespace tessera::hal {

// ---- Event --------------------------------------------------------------------------------

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::move(other.backend_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::reset() {
  if (event_ == nullptr) return;
  Status status = backend_->check(backend_->api().event_destroy(event_), "event_destroy");
  if (!status.ok()) TSR_LOG(kError, "hal") << status.to_string();
  event_ = nullptr;
}

Result<Event> Event::create(std::shared_ptr<Backend> backend, int32_t device, bool timing) {
  tsr_event event = nullptr;
  const uint32_t flags = timing ? 0u : TSR_EVENT_DISABLE_TIMING;
  TSR_RETURN_IF_ERROR(backend->check(backend->api().event_create(device, flags, &event),
                                     "event_create on device " + std::to_string(device)));
  return Event(std::move(backend), event);
}

Status Event::record(const Stream& stream) {
  return backend_->check(backend_->api().event_record(event_, stream.handle()), "event_record");
}

Status Event::synchronize() const {
  return backend_->check(backend_->api().event_synchronize(event_), "event_synchronize");
}

Result<bool> Event::done() const {
  tsr_status code = backend_->api().event_query(event_);
  if (code == TSR_NOT_READY) return false;
  TSR_RETURN_IF_ERROR(backend_->check(code, "event_query"));
  return true;
}

Result<float> Event::elapsed_ms(const Event& start, const Event& end) {
  const auto& api = start.backend_->api();
  if (api.event_elapsed_time == nullptr) {
    return unimplemented(start.backend_->name() + " does not time events (event_elapsed_time)");
  }
  float ms = 0;
  TSR_RETURN_IF_ERROR(start.backend_->check(api.event_elapsed_time(start.event_, end.event_, &ms),
                                            "event_elapsed_time"));
  return ms;
}

// ---- Stream -------------------------------------------------------------------------------

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::move(other.backend_);
    device_ = std::exchange(other.device_, -1);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::reset() {
  if (stream_ == nullptr) return;
  Status status = backend_->check(backend_->api().stream_destroy(stream_), "stream_destroy");
  if (!status.ok()) TSR_LOG(kError, "hal") << status.to_string();
  stream_ = nullptr;
}

Result<Event> Stream::create_event(bool timing) const {
  if (stream_ == nullptr) {
    return failed_precondition(
        "create_event on an empty (default-constructed or moved-from) stream");
  }
  return Event::create(backend_, device_, timing);
}

Status Stream::unsupported(const char* entry) const {
  return unimplemented(backend_->name() + " does not support " + entry + " (NULL in its table)");
}

Status Stream::copy(void* dst, const void* src, size_t bytes) const {
  return backend_->check(backend_->api().memcpy_async(dst, src, bytes, stream_), "memcpy_async");
}

Status Stream::memset(void* dst, uint8_t value, size_t bytes) const {
  return backend_->check(backend_->api().memset_async(dst, value, bytes, stream_), "memset_async");
}

Status Stream::copy_peer(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                         size_t bytes) const {
  const auto& api = backend_->api();
  if (api.memcpy_peer_async == nullptr) return unsupported("memcpy_peer_async");
  return backend_->check(api.memcpy_peer_async(dst, dst_device, src, src_device, bytes, stream_),
                         "memcpy_peer_async");
}

Status Stream::reduce(void* dst, std::span<const void* const> srcs, size_t count, DType dtype,
                      ReduceOp op) const {
  const auto& api = backend_->api();
  if (api.reduce_async == nullptr) return unsupported("reduce_async");
  return backend_->check(api.reduce_async(dst, srcs.data(), static_cast<int32_t>(srcs.size()),
                                          count, to_abi(dtype), to_abi(op), stream_),
                         "reduce_async");
}

Status Stream::cast(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                    size_t count) const {
  const auto& api = backend_->api();
  if (api.cast_async == nullptr) return unsupported("cast_async");
  return backend_->check(
      api.cast_async(dst, to_abi(dst_dtype), src, to_abi(src_dtype), count, stream_), "cast_async");
}

Status Stream::gemm(const tsr_gemm_desc& desc) const {
  const auto& api = backend_->api();
  if (api.gemm_async == nullptr) return unsupported("gemm_async");
  return backend_->check(api.gemm_async(&desc, stream_), "gemm_async");
}

Status Stream::launch(const Function& function, const LaunchConfig& config,
                      std::span<const tsr_kernel_arg> args) const {
  const auto& api = backend_->api();
  if (api.launch == nullptr) return unsupported("launch");
  if (!function) return invalid_argument("launch: the function is empty");
  if (function.backend() != backend_) {
    return invalid_argument("launch of kernel '" + function.name() + "': its module '" +
                            function.module_name() + "' belongs to backend " +
                            function.backend()->name() + ", the stream to " + backend_->name());
  }
  const tsr_launch_config abi_config = config.to_abi();
  return backend_->check(
      api.launch(stream_, function.handle(), &abi_config, args.data(), args.size()),
      "launch of kernel '" + function.name() + "'");
}

Status Stream::wait(const Event& event) const {
  return backend_->check(backend_->api().stream_wait_event(stream_, event.handle()),
                         "stream_wait_event");
}

namespace {
void run_callback_with_message(void* user_data, tsr_status status, const char* message) {
  std::unique_ptr<std::function<void(Status)>> fn(
      static_cast<std::function<void(Status)>*>(user_data));
  (*fn)(status == TSR_OK ? Status()
                         : Status(static_cast<StatusCode>(status),
                                  message && message[0] ? message : "stream work failed"));
}
void run_callback(void* user_data, tsr_status status) {
  run_callback_with_message(user_data, status, nullptr);
}
}  // namespace

Status Stream::add_callback(std::function<void(Status)> fn) const {
  const auto& api = backend_->api();
  if (api.stream_add_callback == nullptr && api.stream_add_callback_with_message == nullptr) {
    return unsupported("stream_add_callback");
  }
  auto owned = std::make_unique<std::function<void(Status)>>(std::move(fn));
  if (api.stream_add_callback_with_message != nullptr) {
    TSR_RETURN_IF_ERROR(backend_->check(
        api.stream_add_callback_with_message(stream_, &run_callback_with_message, owned.get()),
        "stream_add_callback_with_message"));
  } else {
    TSR_RETURN_IF_ERROR(backend_->check(
        api.stream_add_callback(stream_, &run_callback, owned.get()), "stream_add_callback"));
  }
  owned.release();  // the callback owns it now
  return Status();
}

Status Stream::wait(const HostSignal& signal, uint64_t value) const {
  const auto& api = backend_->api();
  if (api.stream_wait_host_signal == nullptr) return unsupported("stream_wait_host_signal");
  if (!signal) return invalid_argument("stream_wait_host_signal: the host signal is empty");
  if (signal.backend() != backend_) {
    return invalid_argument("stream_wait_host_signal: the host signal belongs to backend " +
                            signal.backend()->name() + " (" + signal.backend()->path() +
                            "), the stream to " + backend_->name() + " (" + backend_->path() + ")");
  }
  return backend_->check(api.stream_wait_host_signal(stream_, signal.handle(), value),
                         "stream_wait_host_signal");
}

// ---- HostSignal ---------------------------------------------------------------------------

Result<HostSignal> HostSignal::create(std::shared_ptr<Backend> backend, int32_t device) {
  if (!supported(*backend)) {
    return unimplemented(backend->name() +
                         " does not support host signals (host_signal_create "
                         "is NULL in its table)");
  }
  tsr_host_signal signal = nullptr;
  TSR_RETURN_IF_ERROR(
      backend->check(backend->api().host_signal_create(device, &signal), "host_signal_create"));
  return HostSignal(std::move(backend), device, signal);
}

HostSignal& HostSignal::operator=(HostSignal&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::move(other.backend_);
    device_ = std::exchange(other.device_, -1);
    signal_ = std::exchange(other.signal_, nullptr);
  }
  return *this;
}

void HostSignal::reset() {
  if (signal_ == nullptr) return;
  Status status =
      backend_->check(backend_->api().host_signal_destroy(signal_), "host_signal_destroy");
  if (!status.ok()) TSR_LOG(kError, "hal") << status.to_string();
  signal_ = nullptr;
}

Status HostSignal::check_not_empty(const char* operation) const {
  if (signal_ != nullptr) return Status();
  return failed_precondition(std::string(operation) +
                             ": the host signal is empty (default-constructed or moved from)");
}

Status HostSignal::raise(uint64_t value) const {
  TSR_RETURN_IF_ERROR(check_not_empty("host_signal_raise"));
  return backend_->check(backend_->api().host_signal_raise(signal_, value), "host_signal_raise");
}

Result<uint64_t> HostSignal::value() const {
  TSR_RETURN_IF_ERROR(check_not_empty("host_signal_query"));
  uint64_t out = 0;
  TSR_RETURN_IF_ERROR(
      backend_->check(backend_->api().host_signal_query(signal_, &out), "host_signal_query"));
  return out;
}

Status Stream::busy_wait(uint64_t microseconds) const {
  const auto& api = backend_->api();
  if (api.stream_busy_wait == nullptr) return unsupported("stream_busy_wait");
  return backend_->check(api.stream_busy_wait(stream_, microseconds), "stream_busy_wait");
}

Status Stream::synchronize() const {
  return backend_->check(backend_->api().stream_synchronize(stream_), "stream_synchronize");
}

Result<bool> Stream::idle() const {
  tsr_status code = backend_->api().stream_query(stream_);
  if (code == TSR_NOT_READY) return false;
  TSR_RETURN_IF_ERROR(backend_->check(code, "stream_query"));
  return true;
}

}  // namespace tessera::hal
