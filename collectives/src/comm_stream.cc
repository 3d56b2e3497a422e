// Operations on streams: the host-signal form (the stream waits on a signal the proxy raises; no
// backend thread is held), the callback fallback for backends without host signals, and the proxy
// thread that runs queued operations in order (docs/COLLECTIVES.md, "Operations on a stream").
#include <algorithm>
#include <thread>

#include "comm_impl.h"
#include "tessera/common/log.h"

namespace tessera::coll {

// ---- operations on streams
// ---------------------------------------------------------------------------

namespace {

// An event (without timing) on the device of `stream`, for one of a collective's markers (`what`).
Result<hal::Event> stream_event(const hal::Stream& stream, const char* what) {
  auto event = stream.create_event(/*timing=*/false);
  if (!event.ok()) return event.status().with_context(what);
  return event;
}

}  // namespace

Result<Work> CommImpl::enqueue(OpDesc d, const hal::Stream& stream) {
  if (aborted()) return abort_status();
  // The native route enqueues on the caller's stream itself: no proxy, no host signal.
  if (route_for(d) == DeviceRoute::kNative) return native_->enqueue(d, stream);
  if (!stream_callbacks_ && hal::HostSignal::supported(*stream.backend())) {
    return enqueue_signalled(std::move(d), stream);
  }
  return enqueue_with_callback(std::move(d), stream);
}

// The stream records `ready`, waits on the signal, then records the Work's event; the proxy runs
// the operation once `ready` completes and raises the signal. No backend thread is held.
Result<Work> CommImpl::enqueue_signalled(OpDesc d, const hal::Stream& stream) {
  const auto& backend = stream.backend();
  auto state = std::make_shared<WorkState>();
  // Events and the signal first: creating them touches no stream, so failing leaves nothing.
  TSR_ASSIGN_OR_RETURN(state->event,
                       stream_event(stream, "the event for a collective's completion"));
  TSR_ASSIGN_OR_RETURN(hal::Event ready,
                       stream_event(stream, "the event for a collective's start"));
  Task task;
  {
    std::lock_guard lock(queue_mutex_);
    for (auto& s : signals_) {
      if (s->backend == backend.get() && s->device == stream.device()) task.signal = s.get();
    }
    if (task.signal == nullptr) {
      TSR_ASSIGN_OR_RETURN(hal::HostSignal signal,
                           hal::HostSignal::create(backend, stream.device()));
      auto entry = std::make_unique<StreamSignal>();
      entry->backend = backend.get();
      entry->device = stream.device();
      entry->signal = std::move(signal);
      task.signal = entry.get();
      signals_.push_back(std::move(entry));
    }
  }
  TSR_RETURN_IF_ERROR(ready.record(stream));
  // From here on the stream may wait on the value: the task must reach the proxy whatever
  // happens, so that the value is raised in its turn.
  {
    std::lock_guard lock(queue_mutex_);
    task.value = ++task.signal->issued;
  }
  Status queued = stream.wait(task.signal->signal, task.value);
  if (queued.ok()) queued = state->event.record(stream);
  task.desc = std::move(d);
  task.state = state;
  task.ready.emplace(std::move(ready));
  const std::string op(op_name(task.desc.kind));
  if (!queued.ok()) {
    task.refused = queued.with_context(op + " on a stream: queuing on the stream failed");
  }
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(std::move(task));
    if (!proxy_.joinable()) proxy_ = std::thread([this] { proxy_main(); });
  }
  queue_cv_.notify_all();
  if (!queued.ok()) {
    // The peers run the operation; they must not wait for this rank until the timeout.
    if (size_ > 1 && !aborted()) {
      abort("rank " + std::to_string(rank_) + " could not queue " + op +
            " on its stream: " + queued.message());
    }
    return queued;
  }
  return Work(state);
}

// The fallback for backends without host signals: a stream callback opens the gate for the proxy
// once the stream reached this point, then holds the stream (and the backend's callback thread)
// until the operation finished, so later work on the stream sees its result.
Result<Work> CommImpl::enqueue_with_callback(OpDesc d, const hal::Stream& stream) {
  auto state = std::make_shared<WorkState>();
  // The event first: its creation touches no stream, so failing there leaves nothing behind.
  TSR_ASSIGN_OR_RETURN(state->event,
                       stream_event(stream, "the event for a collective's completion"));
  TSR_RETURN_IF_ERROR(stream.add_callback([state](Status upstream) {
    state->mark_ready(std::move(upstream));
    while (state->wait(std::chrono::milliseconds(50)).code() == StatusCode::kDeadlineExceeded) {
    }
  }));
  if (Status recorded = state->event.record(stream); !recorded.ok()) {
    // The callback is queued and would hold the stream forever: release it.
    state->finish(recorded);
    return recorded;
  }
  Task task;
  task.desc = std::move(d);
  task.state = state;
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(std::move(task));
    if (!proxy_.joinable()) proxy_ = std::thread([this] { proxy_main(); });
  }
  queue_cv_.notify_all();
  return Work(state);
}

Status CommImpl::stop_status() {
  if (aborted()) return abort_status();
  Status by_peer = shm_ ? shm_->posted_abort_status(rank_) : Status();
  if (by_peer.ok()) {
    if (auto why = notice_.check()) by_peer = job_failed(*why, Status());
  }
  if (!by_peer.ok()) abort(by_peer.message());
  return by_peer;
}

Status CommImpl::wait_ready_event(const hal::Event& ready, Status* upstream) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    Result<bool> done = ready.done();
    if (!done.ok()) {
      *upstream = done.status();
      return Status();
    }
    if (*done) return Status();
    TSR_RETURN_IF_ERROR(stop_status());
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("the stream did not reach the operation within " +
                               std::to_string(options_.timeout.count()) +
                               " ms (work queued before it on the stream is stuck)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void CommImpl::release_signals() {
  std::lock_guard lock(queue_mutex_);
  for (auto& s : signals_) {
    if (Status raised = s->signal.raise(s->issued); !raised.ok()) {
      TSR_LOG(kError, "coll") << "communicator " << uid_
                              << ": releasing streams: " << raised.to_string();
    }
  }
}

void CommImpl::proxy_main() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      proxy_busy_ = true;
      // In the same critical section as the pop: were the task neither queued nor at the gate
      // for a moment, a destructor looking then would see nothing pending, skip its abort, and
      // the operation would run (and wait for peers) after the communicator's destruction.
      proxy_at_gate_ = true;
    }
    // Until the stream reaches the operation: bounded by the communicator's timeout, and released
    // by an abort posted here or by a peer (which would otherwise only be seen once it runs).
    Status status = task.refused;
    if (status.ok() && task.ready) {
      Status upstream;
      status = wait_ready_event(*task.ready, &upstream);
      task.state->mark_ready(std::move(upstream));
    } else if (status.ok()) {
      status = task.state->wait_ready(options_.timeout, [this] { return stop_status(); });
    }
    {
      std::lock_guard lock(queue_mutex_);
      proxy_at_gate_ = false;
    }
    if (status.ok()) {
      status = execute_now(task.desc);
    } else if (!aborted()) {
      abort(std::string(op_name(task.desc.kind)) + " on a stream: " + status.message());
    }
    task.state->finish(std::move(status));
    if (task.signal != nullptr) {
      // On failure too: the stream runs on (its later work sees the Work's status, not a hang).
      if (Status raised = task.signal->signal.raise(task.value); !raised.ok()) {
        TSR_LOG(kError, "coll") << "communicator " << uid_ << ": releasing the stream of "
                                << op_name(task.desc.kind) << ": " << raised.to_string();
      }
    }
    {
      std::lock_guard lock(queue_mutex_);
      proxy_busy_ = false;
    }
    queue_cv_.notify_all();
  }
}

void CommImpl::drain() {
  std::unique_lock lock(queue_mutex_);
  queue_cv_.wait(lock, [&] { return queue_.empty() && !proxy_busy_; });
}

}  // namespace tessera::coll
