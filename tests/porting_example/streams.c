/*
 * Streams and events of the porting example, the simplest legal implementation: every operation
 * completes on the calling thread before its enqueue call returns (see porting_example_backend.c
 * and docs/PORTING.md 4.4). Handles are never-reused ids looked up in g_handles.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state.h"

/* ---- streams and events ------------------------------------------------------------------- */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* With g_mutex held: the live handle `id` of `kind`, or NULL. */
static handle* find_handle(uint64_t id, int kind) {
  for (size_t i = 0; i < g_handle_count; ++i) {
    if (g_handles[i].id == id) return g_handles[i].kind == kind ? &g_handles[i] : NULL;
  }
  return NULL;
}

static tsr_status create_handle(int kind, int32_t device, uint32_t flags, uint64_t* out_id) {
  tsr_status status = pe_check_device(device);
  if (status != TSR_OK) return status;
  pthread_mutex_lock(&g_mutex);
  if (!pe_grow((void**)&g_handles, &g_handle_capacity, g_handle_count, sizeof(handle))) {
    pthread_mutex_unlock(&g_mutex);
    return pe_fail(TSR_RESOURCE_EXHAUSTED, "out of host memory for handles");
  }
  handle h = {g_next_id++, kind, device, flags, 0, 0};
  g_handles[g_handle_count++] = h;
  pthread_mutex_unlock(&g_mutex);
  *out_id = h.id;
  return TSR_OK;
}

static tsr_status destroy_handle(uint64_t id, int kind, const char* what) {
  pthread_mutex_lock(&g_mutex);
  handle* h = find_handle(id, kind);
  if (h != NULL) *h = g_handles[--g_handle_count];
  pthread_mutex_unlock(&g_mutex);
  return h ? TSR_OK : pe_fail(TSR_INVALID_ARGUMENT, "%s_destroy: not a live %s", what, what);
}

/* TSR_OK if `stream` is live; the check every enqueue starts with. */
tsr_status pe_check_stream(tsr_stream stream, const char* entry) {
  pthread_mutex_lock(&g_mutex);
  const handle* h = stream ? find_handle((uint64_t)(uintptr_t)stream, KIND_STREAM) : NULL;
  pthread_mutex_unlock(&g_mutex);
  if (h == NULL)
    return pe_fail(TSR_INVALID_ARGUMENT, "%s: stream %p is not a live stream", entry,
                   (void*)stream);
  return TSR_OK;
}

static tsr_status check_event(tsr_event event, const char* entry) {
  pthread_mutex_lock(&g_mutex);
  const handle* h = event ? find_handle((uint64_t)(uintptr_t)event, KIND_EVENT) : NULL;
  pthread_mutex_unlock(&g_mutex);
  if (h == NULL)
    return pe_fail(TSR_INVALID_ARGUMENT, "%s: event %p is not a live event", entry, (void*)event);
  return TSR_OK;
}

tsr_status pe_stream_create(int32_t device, int32_t priority, tsr_stream* out_stream) {
  (void)priority; /* one priority: every value is clamped to it */
  if (out_stream == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "stream_create: out_stream is NULL");
  uint64_t id = 0;
  tsr_status status = create_handle(KIND_STREAM, device, 0, &id);
  if (status == TSR_OK) *out_stream = (tsr_stream)(uintptr_t)id;
  return status;
}

tsr_status pe_stream_destroy(tsr_stream stream) {
  return destroy_handle((uint64_t)(uintptr_t)stream, KIND_STREAM, "stream");
}

/* Work never fails after it is accepted, so there is no sticky error to report. */
tsr_status pe_stream_synchronize(tsr_stream stream) {
  return pe_check_stream(stream, "stream_synchronize");
}

tsr_status pe_stream_query(tsr_stream stream) {
  return pe_check_stream(stream, "stream_query"); /* always idle: work ran at enqueue */
}

tsr_status pe_stream_wait_event(tsr_stream stream, tsr_event event) {
  tsr_status status = pe_check_stream(stream, "stream_wait_event");
  if (status != TSR_OK) return status;
  return check_event(event, "stream_wait_event"); /* recorded work is already complete */
}

tsr_status pe_event_create(int32_t device, uint32_t flags, tsr_event* out_event) {
  if (out_event == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "event_create: out_event is NULL");
  if (flags & ~TSR_EVENT_DISABLE_TIMING) {
    return pe_fail(TSR_INVALID_ARGUMENT, "event_create: unknown flags 0x%x", (unsigned)flags);
  }
  uint64_t id = 0;
  tsr_status status = create_handle(KIND_EVENT, device, flags, &id);
  if (status == TSR_OK) *out_event = (tsr_event)(uintptr_t)id;
  return status;
}

tsr_status pe_event_destroy(tsr_event event) {
  return destroy_handle((uint64_t)(uintptr_t)event, KIND_EVENT, "event");
}

tsr_status pe_event_record(tsr_event event, tsr_stream stream) {
  tsr_status status = pe_check_stream(stream, "event_record");
  if (status != TSR_OK) return status;
  const int64_t t = now_ns(); /* everything enqueued so far has run: this is its end */
  pthread_mutex_lock(&g_mutex);
  handle* h = event ? find_handle((uint64_t)(uintptr_t)event, KIND_EVENT) : NULL;
  if (h != NULL) h->recorded = 1, h->recorded_ns = t;
  pthread_mutex_unlock(&g_mutex);
  return h ? TSR_OK : pe_fail(TSR_INVALID_ARGUMENT, "event_record: not a live event");
}

tsr_status pe_event_synchronize(tsr_event event) {
  return check_event(event, "event_synchronize");
}

tsr_status pe_event_query(tsr_event event) {
  return check_event(event, "event_query");
}

tsr_status pe_event_elapsed_time(tsr_event start, tsr_event end, float* out_ms) {
  if (out_ms == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "event_elapsed_time: out_ms is NULL");
  pthread_mutex_lock(&g_mutex);
  const handle* a = start ? find_handle((uint64_t)(uintptr_t)start, KIND_EVENT) : NULL;
  const handle* b = end ? find_handle((uint64_t)(uintptr_t)end, KIND_EVENT) : NULL;
  handle first = a ? *a : (handle){0};
  handle second = b ? *b : (handle){0};
  pthread_mutex_unlock(&g_mutex);
  if (a == NULL || b == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "event_elapsed_time: bad event");
  if ((first.flags | second.flags) & TSR_EVENT_DISABLE_TIMING) {
    return pe_fail(TSR_FAILED_PRECONDITION, "event_elapsed_time: an event has DISABLE_TIMING");
  }
  if (!first.recorded || !second.recorded) {
    return pe_fail(TSR_FAILED_PRECONDITION, "event_elapsed_time: an event was never recorded");
  }
  *out_ms = (float)((double)(second.recorded_ns - first.recorded_ns) / 1e6);
  return TSR_OK;
}
