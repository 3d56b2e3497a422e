/*
 * What the files of the porting example share: the process-wide state (one mutex guards all of
 * it), the error helper and the entries each file implements. Internal to this backend; the
 * library exports only tessera_backend_get_api_v1 (everything else has hidden visibility).
 */
#ifndef TESSERA_PORTING_EXAMPLE_STATE_H_
#define TESSERA_PORTING_EXAMPLE_STATE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/hal/backend_abi.h"

#define PE_NAME "porting_example"
#define PE_MAX_DEVICES 64
#define PE_ALIGNMENT 256

/* A device allocation, pinned host allocation or registered host range. */
typedef struct allocation {
  char* base;
  size_t size;
  int32_t device; /* -1 for host memory */
  int32_t type;   /* tsr_memory_type */
  int registered; /* host_register (not owned) rather than host_malloc_pinned */
} allocation;

enum { KIND_STREAM = 1, KIND_EVENT = 2 };

/* A stream or an event. With synchronous streams a stream needs no state beyond its device. */
typedef struct handle {
  uint64_t id; /* the value handed out as tsr_stream / tsr_event; never reused */
  int kind;
  int32_t device;
  uint32_t flags;      /* events: TSR_EVENT_* */
  int recorded;        /* events */
  int64_t recorded_ns; /* events: CLOCK_MONOTONIC when recorded */
} handle;

/* ---- state (porting_example_backend.c), all guarded by g_mutex ---------------------------- */

extern pthread_mutex_t g_mutex;
extern int32_t g_device_count;
extern size_t g_capacity;             /* bytes per device */
extern size_t g_used[PE_MAX_DEVICES]; /* bytes allocated per device */
extern allocation* g_allocs;          /* the allocation registry */
extern size_t g_alloc_count, g_alloc_capacity;
extern handle* g_handles; /* live streams and events */
extern size_t g_handle_count, g_handle_capacity;
extern uint64_t g_next_id;

/* Stores "porting_example: <message>" as the calling thread's last error; returns code. */
tsr_status pe_fail(tsr_status code, const char* format, ...) __attribute__((format(printf, 2, 3)));
/* Grows *array to hold count + 1 elements; 0 when out of memory. */
int pe_grow(void** array, size_t* capacity, size_t count, size_t element);
/* TSR_OK if `device` is a valid index; call without g_mutex held. */
tsr_status pe_check_device(int32_t device);

/* ---- memory.c: memory, transfers, peer access --------------------------------------------- */

tsr_status pe_device_malloc(int32_t device, size_t bytes, void** out_ptr);
tsr_status pe_device_free(int32_t device, void* ptr);
tsr_status pe_host_malloc_pinned(size_t bytes, void** out_ptr);
tsr_status pe_host_free_pinned(void* ptr);
tsr_status pe_host_register(void* ptr, size_t bytes);
tsr_status pe_host_unregister(void* ptr);
tsr_status pe_memory_info(int32_t device, size_t* out_free, size_t* out_total);
tsr_status pe_pointer_attributes(const void* ptr, tsr_pointer_attributes* out);
tsr_status pe_memcpy_async(void* dst, const void* src, size_t bytes, tsr_stream stream);
tsr_status pe_memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream);
tsr_status pe_memcpy_peer_async(void* dst, int32_t dst_device, const void* src, int32_t src_device,
                                size_t bytes, tsr_stream stream);
tsr_status pe_device_can_access_peer(int32_t device, int32_t peer, int32_t* out_can);
tsr_status pe_device_enable_peer_access(int32_t device, int32_t peer);

/* ---- streams.c: synchronous streams and events -------------------------------------------- */

/* TSR_OK if `stream` is live; every enqueue starts with it. */
tsr_status pe_check_stream(tsr_stream stream, const char* entry);
tsr_status pe_stream_create(int32_t device, int32_t priority, tsr_stream* out_stream);
tsr_status pe_stream_destroy(tsr_stream stream);
tsr_status pe_stream_synchronize(tsr_stream stream);
tsr_status pe_stream_query(tsr_stream stream);
tsr_status pe_stream_wait_event(tsr_stream stream, tsr_event event);
tsr_status pe_event_create(int32_t device, uint32_t flags, tsr_event* out_event);
tsr_status pe_event_destroy(tsr_event event);
tsr_status pe_event_record(tsr_event event, tsr_stream stream);
tsr_status pe_event_synchronize(tsr_event event);
tsr_status pe_event_query(tsr_event event);
tsr_status pe_event_elapsed_time(tsr_event start, tsr_event end, float* out_ms);

/* ---- compute.c: reductions and casts (kernels in numerics.c) ------------------------------ */

tsr_status pe_reduce_async(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                           tsr_dtype dtype, tsr_reduce_op op, tsr_stream stream);
tsr_status pe_cast_async(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                         size_t count, tsr_stream stream);

#endif /* TESSERA_PORTING_EXAMPLE_STATE_H_ */
