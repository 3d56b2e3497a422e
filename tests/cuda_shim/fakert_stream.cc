// fakert's streams, events and copies (fakert_runtime.h): each stream is a worker thread running
// a FIFO of work; an event is a marker that the worker completes when it reaches it.
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "fakert_internal.h"
#include "fakert_runtime.h"

using namespace fakert_internal;

extern "C" {

fakertError_t fakertMemcpyAsync(void* dst, const void* src, size_t bytes,
                                enum fakertMemcpyKind kind, fakertStream_t stream) {
  if (kind != fakertMemcpyDefault) return set_error(fakertErrorInvalidValue);
  if (bytes == 0) return fakertSuccess;
  if (dst == nullptr || src == nullptr) return set_error(fakertErrorInvalidValue);
  return submit(stream, [=] { std::memmove(dst, src, bytes); });
}

fakertError_t fakertMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                    size_t bytes, fakertStream_t stream) {
  if (!valid_device(dst_device) || !valid_device(src_device)) {
    return set_error(fakertErrorInvalidDevice);
  }
  return fakertMemcpyAsync(dst, src, bytes, fakertMemcpyDefault, stream);
}

fakertError_t fakertMemsetAsync(void* dst, int value, size_t bytes, fakertStream_t stream) {
  if (bytes == 0) return fakertSuccess;
  if (dst == nullptr) return set_error(fakertErrorInvalidValue);
  return submit(stream, [=] { std::memset(dst, value & 0xff, bytes); });
}

fakertError_t fakertStreamCreateWithPriority(fakertStream_t* stream, unsigned int, int) {
  if (stream == nullptr) return set_error(fakertErrorInvalidValue);
  auto* created = new fakertStream_st;
  created->device = current_device();
  register_stream(created);
  *stream = created;
  return fakertSuccess;
}

fakertError_t fakertStreamDestroy(fakertStream_t stream) {
  if (stream == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  if (!unregister_stream(stream)) return set_error(fakertErrorInvalidResourceHandle);
  if (stream->idle()) {
    delete stream;  // joins the worker (which finishes anything queued meanwhile)
    return fakertSuccess;
  }
  // As cudaStreamDestroy: returns at once; the stream goes once its work is done (a stream
  // memory wait may hold it until the host raises a signal).
  add_zombie();
  stream->detach_when_done();
  return fakertSuccess;
}

fakertError_t fakertStreamSynchronize(fakertStream_t stream) {
  if (stream == nullptr) {
    synchronize_all();
    return fakertSuccess;
  }
  stream->synchronize();
  if (int failure = stream->failure.load()) return set_error(fakertError_t(failure));
  return fakertSuccess;
}

fakertError_t fakertStreamQuery(fakertStream_t stream) {
  if (stream == nullptr) return fakertSuccess;
  if (!stream->idle()) return fakertErrorNotReady;
  if (int failure = stream->failure.load()) return set_error(fakertError_t(failure));
  return fakertSuccess;
}

fakertError_t fakertStreamWaitEvent(fakertStream_t stream, fakertEvent_t event, unsigned int) {
  if (event == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  std::shared_ptr<Marker> marker = event->current();
  if (marker == nullptr || marker->is_done()) return fakertSuccess;  // nothing to wait for
  return submit(stream, [marker] { marker->wait(); });
}

fakertError_t fakertLaunchHostFunc(fakertStream_t stream, fakertHostFn_t fn, void* user_data) {
  if (fn == nullptr) return set_error(fakertErrorInvalidValue);
  return submit(stream, [fn, user_data] { fn(user_data); });
}

fakertError_t fakertStreamAddCallback(fakertStream_t stream, fakertStreamCallback_t callback,
                                      void* user_data, unsigned int flags) {
  if (callback == nullptr || flags != 0) return set_error(fakertErrorInvalidValue);
  return submit(stream, [stream, callback, user_data] {
    const int failure = stream ? stream->failure.load() : 0;
    callback(stream, fakertError_t(failure), user_data);
  });
}

fakertError_t fakertEventCreateWithFlags(fakertEvent_t* event, unsigned int flags) {
  if (event == nullptr) return set_error(fakertErrorInvalidValue);
  auto* created = new fakertEvent_st;
  created->flags = flags;
  *event = created;
  return fakertSuccess;
}

fakertError_t fakertEventDestroy(fakertEvent_t event) {
  if (event == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  delete event;  // a pending marker lives on in its stream's queue
  return fakertSuccess;
}

fakertError_t fakertEventRecord(fakertEvent_t event, fakertStream_t stream) {
  if (event == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  auto marker = std::make_shared<Marker>();
  {
    std::lock_guard lock(event->mutex);
    event->marker = marker;
  }
  return submit(stream, [marker] { marker->complete(); });
}

fakertError_t fakertEventSynchronize(fakertEvent_t event) {
  if (event == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  if (std::shared_ptr<Marker> marker = event->current()) marker->wait();
  return fakertSuccess;
}

fakertError_t fakertEventQuery(fakertEvent_t event) {
  if (event == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  std::shared_ptr<Marker> marker = event->current();
  return marker == nullptr || marker->is_done() ? fakertSuccess : fakertErrorNotReady;
}

fakertError_t fakertEventElapsedTime(float* ms, fakertEvent_t start, fakertEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) {
    return set_error(fakertErrorInvalidValue);
  }
  if ((start->flags | end->flags) & fakertEventDisableTiming) {
    return set_error(fakertErrorInvalidResourceHandle);
  }
  std::shared_ptr<Marker> a = start->current();
  std::shared_ptr<Marker> b = end->current();
  if (a == nullptr || b == nullptr) return set_error(fakertErrorInvalidResourceHandle);
  if (!a->is_done() || !b->is_done()) return fakertErrorNotReady;
  std::lock_guard la(a->mutex);
  std::unique_lock lb(b->mutex, std::defer_lock);
  if (b != a) lb.lock();
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return fakertSuccess;
}

}  // extern "C"
