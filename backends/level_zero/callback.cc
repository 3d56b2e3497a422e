// stream_add_callback: each callback is an event pair on the stream. The device signals `reached`
// behind all earlier work and then waits for `released`; a worker thread per stream (started by
// the first callback) waits for `reached`, runs the callback, and signals `released` from the
// host. Later work on the stream therefore waits for the callback to return, as the ABI requires
// (a callback that blocks holds the stream), and callbacks run one at a time in enqueue order.
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <thread>

#include "ze.h"

namespace tessera::ze {

struct EventPair {
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t reached = nullptr;   // signalled by the device behind earlier work
  ze_event_handle_t released = nullptr;  // signalled by the worker after the callback
};

struct CallbackQueue {
  struct Item {
    EventPair pair;
    tsr_host_fn fn;          // one of fn and msg_fn is set
    tsr_host_msg_fn msg_fn;  // stream_add_callback_with_message
    void* user_data;
  };
  std::mutex mutex;  // guards items and stopping; never held while a callback runs
  std::condition_variable wake;
  std::deque<Item> items;
  bool stopping = false;
  std::vector<EventPair> free_pairs;  // reset pairs the device is done with; under Stream::mutex
  std::thread worker;
};

namespace {

void run_worker(CallbackQueue* q) {
  for (;;) {
    CallbackQueue::Item item;
    {
      std::unique_lock lock(q->mutex);
      q->wake.wait(lock, [&] { return q->stopping || !q->items.empty(); });
      if (q->items.empty()) return;  // stopping, and every callback has run
      item = q->items.front();
      q->items.pop_front();
    }
    const ze_result_t r = ze().zeEventHostSynchronize(item.pair.reached, UINT64_MAX);
    const tsr_status status = r == ZE_RESULT_SUCCESS ? TSR_OK : status_of(r);
    if (item.msg_fn != nullptr) {
      char message[256] = "";
      if (r != ZE_RESULT_SUCCESS) {
        std::snprintf(message, sizeof message,
                      "level_zero stream: waiting for the work before this callback failed: "
                      "zeEventHostSynchronize: %s (0x%x)",
                      result_name(r), unsigned(r));
      }
      item.msg_fn(item.user_data, status, message);
    } else {
      item.fn(item.user_data, status);
    }
    (void)ze().zeEventHostSignal(item.pair.released);
  }
}

ze_result_t make_pair(const Device& d, EventPair* out) {
  ze_event_pool_desc_t pool_desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                                 ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 2};
  ze_device_handle_t device = d.handle;
  ze_result_t r = ze().zeEventPoolCreate(d.context, &pool_desc, 1, &device, &out->pool);
  if (r != ZE_RESULT_SUCCESS) return r;
  ze_event_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST,
                       ZE_EVENT_SCOPE_FLAG_HOST};
  r = ze().zeEventCreate(out->pool, &desc, &out->reached);
  desc.index = 1;
  if (r == ZE_RESULT_SUCCESS) r = ze().zeEventCreate(out->pool, &desc, &out->released);
  if (r != ZE_RESULT_SUCCESS) {
    if (out->reached != nullptr) (void)ze().zeEventDestroy(out->reached);
    (void)ze().zeEventPoolDestroy(out->pool);
    *out = EventPair{};
  }
  return r;
}

void destroy_pair(const EventPair& p) {
  (void)ze().zeEventDestroy(p.reached);
  (void)ze().zeEventDestroy(p.released);
  (void)ze().zeEventPoolDestroy(p.pool);
}

}  // namespace

void stop_callbacks(Stream& s) {
  CallbackQueue* q = s.callbacks;
  if (q == nullptr) return;
  {
    std::lock_guard lock(q->mutex);
    q->stopping = true;
  }
  q->wake.notify_one();
  if (q->worker.joinable()) q->worker.join();
  for (const EventPair& p : q->free_pairs) destroy_pair(p);
  delete q;
  s.callbacks = nullptr;
}

namespace {

// Both callback entries: exactly one of fn and msg_fn is set.
tsr_status add_callback(const char* kOp, tsr_stream handle, tsr_host_fn fn, tsr_host_msg_fn msg_fn,
                        void* user_data) {
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status st = require(kOp, &b); st != TSR_OK) return st;
    Stream* s = nullptr;
    if (tsr_status st = lookup_stream(*b, kOp, handle, &s); st != TSR_OK) return st;
    if (fn == nullptr && msg_fn == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: fn is NULL", kOp);
    }
    std::lock_guard lock(s->mutex);
    if (s->callbacks == nullptr) {
      auto q = std::make_unique<CallbackQueue>();
      q->worker = std::thread(run_worker, q.get());
      s->callbacks = q.release();
    }
    CallbackQueue* q = s->callbacks;
    EventPair pair;
    if (!q->free_pairs.empty()) {
      pair = q->free_pairs.back();
      q->free_pairs.pop_back();
    } else if (ze_result_t r = make_pair(b->devices[size_t(s->device)], &pair);
               r != ZE_RESULT_SUCCESS) {
      return fail_ze(r, kOp, "zeEventCreate");
    }
    ze_result_t r = ze().zeCommandListAppendBarrier(s->list, pair.reached, 0, nullptr);
    if (r == ZE_RESULT_SUCCESS) {
      r = ze().zeCommandListAppendWaitOnEvents(s->list, 1, &pair.released);
      if (r != ZE_RESULT_SUCCESS) {
        // `reached` is already appended: let the worker see it and signal `released` with no
        // callback to run, so nothing waits on a pair that is never released.
        fn = [](void*, tsr_status) {};
        msg_fn = nullptr;
      }
    } else {
      q->free_pairs.push_back(pair);
      return fail_ze(r, kOp, "zeCommandListAppendBarrier");
    }
    ++s->submitted;
    {
      std::lock_guard queue_lock(q->mutex);
      q->items.push_back({pair, fn, msg_fn, user_data});
    }
    q->wake.notify_one();
    // Once the stream is past the wait, the pair can be reset and reused (drain runs this under
    // s->mutex, which guards free_pairs).
    s->deferred.emplace_back(s->submitted, [q, pair] {
      (void)ze().zeEventHostReset(pair.reached);
      (void)ze().zeEventHostReset(pair.released);
      q->free_pairs.push_back(pair);
    });
    if (r != ZE_RESULT_SUCCESS) return fail_ze(r, kOp, "zeCommandListAppendWaitOnEvents");
    return TSR_OK;
  });
}

}  // namespace

namespace api {

tsr_status stream_add_callback(tsr_stream handle, tsr_host_fn fn, void* user_data) {
  return add_callback("stream_add_callback", handle, fn, nullptr, user_data);
}

tsr_status stream_add_callback_with_message(tsr_stream handle, tsr_host_msg_fn fn,
                                            void* user_data) {
  return add_callback("stream_add_callback_with_message", handle, nullptr, fn, user_data);
}

}  // namespace api
}  // namespace tessera::ze
