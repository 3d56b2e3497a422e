// Streams (in-order queues of device work) and events (markers on them). Move-only handles that
// destroy the backend object on destruction. Every enqueue validates its arguments at once and
// returns their error; failures of the work itself surface at synchronize().
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "tessera/common/status.h"
#include "tessera/hal/backend.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/module.h"

namespace tessera::hal {

class Stream;

class Event {
 public:
  Event() = default;
  Event(std::shared_ptr<Backend> backend, tsr_event event)
      : backend_(std::move(backend)), event_(event) {}
  // A new event of `device` of `backend` (Device::create_event and Stream::create_event); with
  // `timing`, elapsed_ms can measure it.
  static Result<Event> create(std::shared_ptr<Backend> backend, int32_t device, bool timing);
  ~Event() { reset(); }
  Event(Event&& other) noexcept { *this = std::move(other); }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the work enqueued on `stream` so far.
  Status record(const Stream& stream);
  Status synchronize() const;
  // true when the captured work is done.
  Result<bool> done() const;
  // Milliseconds from `start` to `end`; both must be complete and created with timing.
  static Result<float> elapsed_ms(const Event& start, const Event& end);

  tsr_event handle() const { return event_; }

 private:
  void reset();
  std::shared_ptr<Backend> backend_;
  tsr_event event_ = nullptr;
};

// A host signal (backend_abi.h, minor 2): a counter the host raises and streams wait on, so
// host-driven work can sit on a stream without holding a backend thread. Move-only.
class HostSignal {
 public:
  HostSignal() = default;
  // UNIMPLEMENTED when the backend lacks host signals (supported() says so without trying).
  static Result<HostSignal> create(std::shared_ptr<Backend> backend, int32_t device);
  static bool supported(const Backend& backend) { return backend.api().host_signal_create; }
  ~HostSignal() { reset(); }
  HostSignal(HostSignal&& other) noexcept { *this = std::move(other); }
  HostSignal& operator=(HostSignal&& other) noexcept;
  HostSignal(const HostSignal&) = delete;
  HostSignal& operator=(const HostSignal&) = delete;

  // Counter = max(counter, value); wakes the streams waiting for it. Never blocks; any thread.
  // FAILED_PRECONDITION on an empty (default-constructed or moved-from) signal.
  Status raise(uint64_t value) const;
  Result<uint64_t> value() const;

  tsr_host_signal handle() const { return signal_; }
  int32_t device() const { return device_; }
  const std::shared_ptr<Backend>& backend() const { return backend_; }
  explicit operator bool() const { return signal_ != nullptr; }

 private:
  HostSignal(std::shared_ptr<Backend> backend, int32_t device, tsr_host_signal signal)
      : backend_(std::move(backend)), device_(device), signal_(signal) {}
  void reset();
  Status check_not_empty(const char* operation) const;
  std::shared_ptr<Backend> backend_;
  int32_t device_ = -1;
  tsr_host_signal signal_ = nullptr;
};

class Stream {
 public:
  Stream() = default;
  Stream(std::shared_ptr<Backend> backend, int32_t device, tsr_stream stream)
      : backend_(std::move(backend)), device_(device), stream_(stream) {}
  ~Stream() { reset(); }
  Stream(Stream&& other) noexcept { *this = std::move(other); }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // A new event of this stream's device, for record(*this) and waits on it: code handed a stream
  // (not a Device) makes its events here. FAILED_PRECONDITION on an empty stream.
  Result<Event> create_event(bool timing = true) const;

  // Copies between any host/pinned/device memory of this backend (direction inferred).
  Status copy(void* dst, const void* src, size_t bytes) const;
  Status memset(void* dst, uint8_t value, size_t bytes) const;
  Status copy_peer(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                   size_t bytes) const;
  // dst[i] = op over srcs[k][i]; see tsr_reduce_op for exact semantics.
  Status reduce(void* dst, std::span<const void* const> srcs, size_t count, DType dtype,
                ReduceOp op) const;
  Status cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, size_t count) const;
  Status gemm(const tsr_gemm_desc& desc) const;
  // Enqueues `function` (a kernel of a module on this stream's device) with `args`, one per
  // kernel parameter (module.h, kernel_args): the backend copies them before returning.
  // UNIMPLEMENTED without kernel modules; INVALID_ARGUMENT naming the kernel and the argument for
  // a wrong count or size, or a bad configuration (nothing is enqueued then). A kernel's failure
  // surfaces at synchronize().
  Status launch(const Function& function, const LaunchConfig& config,
                std::span<const tsr_kernel_arg> args) const;
  // The same with the arguments given as values: scalars, and device pointers as pointers.
  template <typename... Args>
  Status launch(const Function& function, const LaunchConfig& config, const Args&... args) const {
    const auto abi_args = kernel_args(args...);
    return launch(function, config, std::span<const tsr_kernel_arg>(abi_args));
  }
  // Later work waits for `event`.
  Status wait(const Event& event) const;
  // Runs `fn(status)` on a backend thread once earlier work is done. The status carries the
  // stream's failure message when the backend provides it (stream_add_callback_with_message).
  // Callbacks may share one thread with every other stream's (some runtimes have only one): a
  // callback must not block on other streams' work or on other processes.
  Status add_callback(std::function<void(Status)> fn) const;
  // Later work waits until `signal` reaches `value` (UNIMPLEMENTED without host signals;
  // INVALID_ARGUMENT for an empty signal or one of another backend). The wait holds this stream
  // only; whoever enqueues it must raise the signal, on failure too.
  Status wait(const HostSignal& signal, uint64_t value) const;
  // Occupies the stream for `microseconds` us in order with its other work (a spin kernel, or a
  // sleep on the host backend): models device compute in tests and benchmarks. UNIMPLEMENTED when
  // the backend lacks stream_busy_wait (tables before ABI minor 1).
  Status busy_wait(uint64_t microseconds) const;

  // Blocks until all work is done; the first failure of that work.
  Status synchronize() const;
  // true when idle.
  Result<bool> idle() const;

  tsr_stream handle() const { return stream_; }
  int32_t device() const { return device_; }
  const std::shared_ptr<Backend>& backend() const { return backend_; }

 private:
  void reset();
  Status unsupported(const char* entry) const;
  std::shared_ptr<Backend> backend_;
  int32_t device_ = -1;
  tsr_stream stream_ = nullptr;
};

}  // namespace tessera::hal
