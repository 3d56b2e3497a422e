// Streams (immediate in-order command lists), events (one-event pools with kernel timestamps),
// and the copies and fills appended to them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "ze.h"

namespace tessera::ze {
namespace {

ze_result_t make_event(const Device& d, bool timing, ze_event_pool_handle_t* pool,
                       ze_event_handle_t* event) {
  ze_event_pool_desc_t pool_desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                                 ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  if (timing) pool_desc.flags |= ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP;
  ze_device_handle_t device = d.handle;
  ze_result_t r = ze().zeEventPoolCreate(d.context, &pool_desc, 1, &device, pool);
  if (r != ZE_RESULT_SUCCESS) return r;
  ze_event_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST,
                       ZE_EVENT_SCOPE_FLAG_HOST};
  r = ze().zeEventCreate(*pool, &desc, event);
  if (r != ZE_RESULT_SUCCESS) (void)ze().zeEventPoolDestroy(*pool);
  return r;
}

// Waits for (or, with timeout 0, polls) everything appended to `s`: `sync` is signalled behind
// the last command and waited on. Caller holds s.mutex.
ze_result_t drain(Stream& s, uint64_t timeout) {
  if (s.done == s.submitted) return ZE_RESULT_SUCCESS;
  if (s.armed != 0 && s.armed != s.submitted) {  // armed behind older work: let it fire first
    ze_result_t r = ze().zeEventHostSynchronize(s.sync, timeout);
    if (r != ZE_RESULT_SUCCESS) return r;
    s.done = s.armed;
    s.armed = 0;
    run_deferred(s, false);
  }
  if (s.armed == 0) {
    (void)ze().zeEventHostReset(s.sync);
    ze_result_t r = ze().zeCommandListAppendSignalEvent(s.list, s.sync);
    if (r != ZE_RESULT_SUCCESS) return r;
    s.armed = s.submitted;
  }
  ze_result_t r = ze().zeEventHostSynchronize(s.sync, timeout);
  if (r != ZE_RESULT_SUCCESS) return r;
  s.done = s.armed;
  s.armed = 0;
  run_deferred(s, false);
  return ZE_RESULT_SUCCESS;
}

constexpr uint64_t kStreamTag = 0x5, kEventTag = 0xE;

template <typename T>
tsr_status lookup(Backend& b, std::unordered_map<uint64_t, T*>& table, uint64_t tag,
                  const char* operation, const char* what, void* handle, T** out) {
  if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", operation, what);
  const uint64_t id = uint64_t(reinterpret_cast<uintptr_t>(handle));
  std::lock_guard lock(b.mutex);
  auto it = (id & 0xf) == tag ? table.find(id) : table.end();
  if (it == table.end()) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is not a live level_zero %s (destroyed, or "
                "never created)",
                operation, what, handle, what);
  }
  *out = it->second;
  return TSR_OK;
}

template <typename T>
T* take(Backend& b, std::unordered_map<uint64_t, T*>& table, void* handle) {
  std::lock_guard lock(b.mutex);
  auto it = table.find(uint64_t(reinterpret_cast<uintptr_t>(handle)));
  if (it == table.end()) return nullptr;
  T* object = it->second;
  table.erase(it);
  return object;
}

template <typename T>
void* insert(Backend& b, std::unordered_map<uint64_t, T*>& table, uint64_t tag, T* object) {
  std::lock_guard lock(b.mutex);
  const uint64_t id = (b.next_handle++ << 4) | tag;
  table.emplace(id, object);
  return reinterpret_cast<void*>(uintptr_t(id));
}

// An event is pending when it was recorded and its capture has not completed.
bool pending(const Event& e) {
  return e.recorded.load() && ze().zeEventQueryStatus(e.handle) == ZE_RESULT_NOT_READY;
}

void retire(Backend& b, Event* e) {
  std::lock_guard lock(b.mutex);
  b.retired.push_back(e);
}

}  // namespace

void run_deferred(Stream& s, bool all) {
  auto& d = s.deferred;
  auto passed = [&](const auto& entry) { return all || entry.first <= s.done; };
  auto keep = std::stable_partition(d.begin(), d.end(), [&](const auto& e) { return !passed(e); });
  std::vector<std::function<void()>> ready;
  for (auto it = keep; it != d.end(); ++it) ready.push_back(std::move(it->second));
  d.erase(keep, d.end());
  for (auto& cleanup : ready) cleanup();
}

void reap_events(Backend& b, bool wait) {
  std::vector<Event*> done;
  {
    std::lock_guard lock(b.mutex);
    auto keep = std::stable_partition(b.retired.begin(), b.retired.end(), [&](Event* e) {
      return !wait && ze().zeEventQueryStatus(e->handle) == ZE_RESULT_NOT_READY;
    });
    done.assign(keep, b.retired.end());
    b.retired.erase(keep, b.retired.end());
  }
  for (Event* e : done) destroy_event(e);  // waits (when `wait`) for what is still pending
}

void reap_streams(Backend& b, bool all) {
  std::vector<Stream*> idle;
  {
    std::lock_guard lock(b.mutex);
    auto keep =
        std::stable_partition(b.retired_streams.begin(), b.retired_streams.end(), [&](Stream* s) {
          if (all) return false;
          std::lock_guard stream_lock(s->mutex);
          return drain(*s, 0) == ZE_RESULT_NOT_READY;
        });
    idle.assign(keep, b.retired_streams.end());
    b.retired_streams.erase(keep, b.retired_streams.end());
  }
  for (Stream* s : idle) destroy_stream(s);  // waits (when `all`) for what is still pending
}

tsr_status lookup_stream(Backend& b, const char* operation, tsr_stream handle, Stream** out) {
  return lookup(b, b.streams, kStreamTag, operation, "stream", handle, out);
}

tsr_status lookup_event(Backend& b, const char* operation, tsr_event handle, Event** out) {
  return lookup(b, b.events, kEventTag, operation, "event", handle, out);
}

Stream* take_stream(Backend& b, tsr_stream handle) {
  return take(b, b.streams, handle);
}

Event* take_event(Backend& b, tsr_event handle) {
  return take(b, b.events, handle);
}

void destroy_stream(Stream* s) {
  {
    std::lock_guard lock(s->mutex);
    (void)drain(*s, UINT64_MAX);
    run_deferred(*s, true);  // the device is past everything (or lost)
  }
  stop_callbacks(*s);
  if (s->list) (void)ze().zeCommandListDestroy(s->list);
  if (s->sync) (void)ze().zeEventDestroy(s->sync);
  if (s->pool) (void)ze().zeEventPoolDestroy(s->pool);
  delete s;
}

void destroy_event(Event* e) {
  if (e->recorded.load()) (void)ze().zeEventHostSynchronize(e->handle, UINT64_MAX);
  if (e->handle) (void)ze().zeEventDestroy(e->handle);
  if (e->pool) (void)ze().zeEventPoolDestroy(e->pool);
  delete e;
}

namespace api {

tsr_status stream_create(int32_t device, int32_t priority, tsr_stream* out_stream) {
  static constexpr const char* kOp = "stream_create";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (out_stream == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_stream is NULL", kOp);
    const Device& d = b->devices[size_t(device)];
    auto* s = new Stream;
    s->device = device;
    ze_command_queue_desc_t desc{
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        nullptr,
        d.compute_ordinal,
        0,
        ZE_COMMAND_QUEUE_FLAG_EXPLICIT_ONLY,
        ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        priority < 0 ? ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH : ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_result_t r = ze().zeCommandListCreateImmediate(d.context, d.handle, &desc, &s->list);
    if (r == ZE_RESULT_SUCCESS) r = make_event(d, false, &s->pool, &s->sync);
    if (r != ZE_RESULT_SUCCESS) {
      destroy_stream(s);
      return fail_ze(r, kOp, "zeCommandListCreateImmediate");
    }
    *out_stream = static_cast<tsr_stream>(insert(*b, b->streams, kStreamTag, s));
    reap_streams(*b);
    return TSR_OK;
  });
}

tsr_status stream_destroy(tsr_stream handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("stream_destroy", &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  if (tsr_status st = lookup_stream(*b, "stream_destroy", handle, &s); st != TSR_OK) return st;
  if ((s = take_stream(*b, handle)) != nullptr) {
    if (waits_on_host_signal(*s)) {
      // Draining would block until someone raises the signal: the stream goes once it is idle.
      std::lock_guard lock(b->mutex);
      b->retired_streams.push_back(s);
    } else {
      destroy_stream(s);
    }
  }
  reap_streams(*b);
  return TSR_OK;
}

tsr_status stream_synchronize(tsr_stream handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("stream_synchronize", &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  if (tsr_status st = lookup_stream(*b, "stream_synchronize", handle, &s); st != TSR_OK) return st;
  std::lock_guard lock(s->mutex);
  if (ze_result_t r = drain(*s, UINT64_MAX); r != ZE_RESULT_SUCCESS) {
    return fail_ze(r, "stream_synchronize", "zeEventHostSynchronize");
  }
  return TSR_OK;
}

tsr_status stream_query(tsr_stream handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("stream_query", &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  if (tsr_status st = lookup_stream(*b, "stream_query", handle, &s); st != TSR_OK) return st;
  std::lock_guard lock(s->mutex);
  ze_result_t r = drain(*s, 0);
  if (r == ZE_RESULT_NOT_READY) return TSR_NOT_READY;
  if (r != ZE_RESULT_SUCCESS) return fail_ze(r, "stream_query", "zeEventHostSynchronize");
  return TSR_OK;
}

tsr_status stream_wait_event(tsr_stream stream_handle, tsr_event event_handle) {
  static constexpr const char* kOp = "stream_wait_event";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  Event* e = nullptr;
  if (tsr_status st = lookup_stream(*b, kOp, stream_handle, &s); st != TSR_OK) return st;
  if (tsr_status st = lookup_event(*b, kOp, event_handle, &e); st != TSR_OK) return st;
  if (!e->recorded.load()) return TSR_OK;  // never recorded: already complete
  ze_event_handle_t wait = e->handle;
  return submit(*s, kOp, "zeCommandListAppendBarrier",
                [&] { return ze().zeCommandListAppendBarrier(s->list, nullptr, 1, &wait); });
}

tsr_status event_create(int32_t device, uint32_t flags, tsr_event* out_event) {
  static constexpr const char* kOp = "event_create";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
    if (tsr_status s = check_device(*b, kOp, device); s != TSR_OK) return s;
    if (out_event == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_event is NULL", kOp);
    if (flags & ~uint32_t(TSR_EVENT_DISABLE_TIMING)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", kOp, flags);
    }
    auto* e = new Event;
    e->device = device;
    e->flags = flags;
    ze_result_t r = make_event(b->devices[size_t(device)], !(flags & TSR_EVENT_DISABLE_TIMING),
                               &e->pool, &e->handle);
    if (r != ZE_RESULT_SUCCESS) {
      delete e;
      return fail_ze(r, kOp, "zeEventCreate");
    }
    *out_event = static_cast<tsr_event>(insert(*b, b->events, kEventTag, e));
    return TSR_OK;
  });
}

tsr_status event_destroy(tsr_event handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("event_destroy", &b); s != TSR_OK) return s;
  Event* e = nullptr;
  if (tsr_status st = lookup_event(*b, "event_destroy", handle, &e); st != TSR_OK) return st;
  if ((e = take_event(*b, handle)) != nullptr) {
    if (pending(*e)) {
      retire(*b, e);  // released once its capture completes; destroying does not wait
    } else {
      destroy_event(e);
    }
  }
  reap_events(*b, false);
  return TSR_OK;
}

tsr_status event_record(tsr_event event_handle, tsr_stream stream_handle) {
  static constexpr const char* kOp = "event_record";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  Event* e = nullptr;
  if (tsr_status st = lookup_event(*b, kOp, event_handle, &e); st != TSR_OK) return st;
  if (tsr_status st = lookup_stream(*b, kOp, stream_handle, &s); st != TSR_OK) return st;
  if (pending(*e)) {
    // Re-recording replaces a pending capture without waiting for it: the old event (which
    // earlier stream_wait_event calls may wait on) is retired and a fresh one takes its place.
    // Re-recording concurrently with other calls on the same event is not supported.
    auto* old = new (std::nothrow) Event;
    if (old == nullptr) return fail(TSR_RESOURCE_EXHAUSTED, "%s: out of host memory", kOp);
    old->device = e->device;
    old->pool = e->pool;
    old->handle = e->handle;
    old->recorded.store(true);
    ze_result_t r = make_event(b->devices[size_t(e->device)],
                               !(e->flags & TSR_EVENT_DISABLE_TIMING), &e->pool, &e->handle);
    if (r != ZE_RESULT_SUCCESS) {
      e->pool = old->pool;
      e->handle = old->handle;
      delete old;
      return fail_ze(r, kOp, "zeEventCreate");
    }
    retire(*b, old);
  }
  reap_events(*b, false);
  (void)ze().zeEventHostReset(e->handle);
  tsr_status st = submit(*s, kOp, "zeCommandListAppendBarrier", [&] {
    return ze().zeCommandListAppendBarrier(s->list, e->handle, 0, nullptr);
  });
  if (st == TSR_OK) e->recorded.store(true);
  return st;
}

tsr_status event_synchronize(tsr_event handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("event_synchronize", &b); s != TSR_OK) return s;
  Event* e = nullptr;
  if (tsr_status st = lookup_event(*b, "event_synchronize", handle, &e); st != TSR_OK) return st;
  if (!e->recorded.load()) return TSR_OK;
  TSR_ZE_CHECK("event_synchronize", zeEventHostSynchronize, e->handle, UINT64_MAX);
  return TSR_OK;
}

tsr_status event_query(tsr_event handle) {
  Backend* b = nullptr;
  if (tsr_status s = require("event_query", &b); s != TSR_OK) return s;
  Event* e = nullptr;
  if (tsr_status st = lookup_event(*b, "event_query", handle, &e); st != TSR_OK) return st;
  if (!e->recorded.load()) return TSR_OK;
  ze_result_t r = ze().zeEventQueryStatus(e->handle);
  if (r == ZE_RESULT_NOT_READY) return TSR_NOT_READY;
  if (r != ZE_RESULT_SUCCESS) return fail_ze(r, "event_query", "zeEventQueryStatus");
  return TSR_OK;
}

tsr_status event_elapsed_time(tsr_event start, tsr_event end, float* out_ms) {
  static constexpr const char* kOp = "event_elapsed_time";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  Event* e0 = nullptr;
  Event* e1 = nullptr;
  if (tsr_status st = lookup_event(*b, kOp, start, &e0); st != TSR_OK) return st;
  if (tsr_status st = lookup_event(*b, kOp, end, &e1); st != TSR_OK) return st;
  if (out_ms == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ms is NULL", kOp);
  if ((e0->flags | e1->flags) & TSR_EVENT_DISABLE_TIMING) {
    return fail(TSR_FAILED_PRECONDITION, "%s: an event was created with DISABLE_TIMING", kOp);
  }
  if (!e0->recorded.load() || !e1->recorded.load()) {
    return fail(TSR_FAILED_PRECONDITION, "%s: an event was never recorded", kOp);
  }
  for (Event* e : {e0, e1}) {
    ze_result_t r = ze().zeEventQueryStatus(e->handle);
    if (r == ZE_RESULT_NOT_READY) return TSR_NOT_READY;
    if (r != ZE_RESULT_SUCCESS) return fail_ze(r, kOp, "zeEventQueryStatus");
  }
  ze_kernel_timestamp_result_t t0{};
  ze_kernel_timestamp_result_t t1{};
  TSR_ZE_CHECK(kOp, zeEventQueryKernelTimestamp, e0->handle, &t0);
  TSR_ZE_CHECK(kOp, zeEventQueryKernelTimestamp, e1->handle, &t1);
  const Device& d = b->devices[size_t(e0->device)];
  const uint64_t ticks = (t1.global.kernelEnd - t0.global.kernelEnd) & d.timestamp_mask;
  *out_ms = float(double(ticks) * d.timer_ns_per_tick * 1e-6);
  return TSR_OK;
}

tsr_status memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream handle) {
  static constexpr const char* kOp = "memcpy_async";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  if (tsr_status st = lookup_stream(*b, kOp, handle, &s); st != TSR_OK) return st;
  if (bytes == 0) return TSR_OK;
  if (dst == nullptr || src == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: NULL pointer", kOp);
  return submit(*s, kOp, "zeCommandListAppendMemoryCopy", [&] {
    return ze().zeCommandListAppendMemoryCopy(s->list, dst, src, bytes, nullptr, 0, nullptr);
  });
}

tsr_status memset_async(void* dst, int32_t value, size_t bytes, tsr_stream handle) {
  static constexpr const char* kOp = "memset_async";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  Stream* s = nullptr;
  if (tsr_status st = lookup_stream(*b, kOp, handle, &s); st != TSR_OK) return st;
  if (bytes == 0) return TSR_OK;
  if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
  const uint8_t pattern = uint8_t(value);
  return submit(*s, kOp, "zeCommandListAppendMemoryFill", [&] {
    return ze().zeCommandListAppendMemoryFill(s->list, dst, &pattern, 1, bytes, nullptr, 0,
                                              nullptr);
  });
}

tsr_status memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                             size_t bytes, tsr_stream handle) {
  static constexpr const char* kOp = "memcpy_peer_async";
  Backend* b = nullptr;
  if (tsr_status s = require(kOp, &b); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, dst_device); s != TSR_OK) return s;
  if (tsr_status s = check_device(*b, kOp, src_device); s != TSR_OK) return s;
  if (b->devices[size_t(dst_device)].context != b->devices[size_t(src_device)].context) {
    return fail(TSR_UNIMPLEMENTED, "%s: devices %d and %d belong to different drivers", kOp,
                dst_device, src_device);
  }
  // One context per driver: a plain copy reaches both devices' memory.
  return memcpy_async(dst, src, bytes, handle);
}

}  // namespace api
}  // namespace tessera::ze
