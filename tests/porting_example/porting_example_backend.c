/*
 * The porting example: backends/skeleton turned into a working backend by following
 * docs/PORTING.md, with plain host memory standing in for the accelerator. It is what a vendor
 * port looks like once the CTS passes, minus the vendor runtime: where a real port calls
 * aclrtMalloc or cnrtMemcpyAsync, this calls aligned_alloc or memcpy.
 *
 * Devices: N virtual devices ("devices=N" in the init options, default 1; "memory=BYTES" the
 * capacity of each, default 2 GiB, charged in requested bytes, allocated lazily by malloc).
 *
 * Streams: the simplest legal implementation. Every operation runs to completion on the calling
 * thread before the enqueue call returns. Enqueue order is then execution order, a stream is
 * always idle (query OK), an event is complete as soon as it is recorded, and stream_wait_event
 * has nothing to wait for. What this cannot do is stream_add_callback: a callback must run on a
 * backend thread and may block the stream (the CTS holds a stream with one), so it stays NULL.
 *
 * Handles are never-reused ids, so a destroyed stream or event is reported as
 * TSR_INVALID_ARGUMENT. One mutex guards all state; it is never held while copying data.
 *
 * Files: this one holds errors, lifecycle, devices and the table; memory.c memory, copies and
 * peer access; streams.c streams and events; compute.c and numerics.c reductions and casts;
 * state.h what they share. Plain C11, includes only tessera/hal/backend_abi.h of the project.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "tessera/hal/backend_abi.h"

/* ---- errors: one message per thread, read through last_error ----------------------------- */

static _Thread_local char g_last_error[512];

tsr_status pe_fail(tsr_status code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  int n = snprintf(g_last_error, sizeof g_last_error, PE_NAME ": ");
  vsnprintf(g_last_error + n, sizeof g_last_error - (size_t)n, format, args);
  va_end(args);
  return code;
}

static const char* pe_last_error(void) {
  return g_last_error;
}

/* ---- process-wide state, between the first init and the last finalize -------------------- */

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_init_count;
int32_t g_device_count;
size_t g_capacity = (size_t)2 << 30;
size_t g_used[PE_MAX_DEVICES];
allocation* g_allocs;
size_t g_alloc_count, g_alloc_capacity;
handle* g_handles;
size_t g_handle_count, g_handle_capacity;
uint64_t g_next_id = 1;
static tsr_host_info g_host; /* what the loader gave us (log callback) */

/* Logs through the loader's callback; g_host may be replaced by another get_api call. */
static void log_message(tsr_log_level level, const char* message) {
  pthread_mutex_lock(&g_mutex);
  tsr_host_info host = g_host;
  pthread_mutex_unlock(&g_mutex);
  if (host.log != NULL && (int32_t)level <= host.log_level) {
    host.log(host.log_user_data, level, message);
  }
}

int pe_grow(void** array, size_t* capacity, size_t count, size_t element) {
  if (count < *capacity) return 1;
  size_t wanted = *capacity ? *capacity * 2 : 64;
  void* bigger = realloc(*array, wanted * element);
  if (bigger == NULL) return 0;
  *array = bigger;
  *capacity = wanted;
  return 1;
}

/* Parses "devices=N;memory=BYTES". Called with g_mutex held, by the first init only. */
static tsr_status parse_options(const char* text) {
  g_device_count = 1;
  g_capacity = (size_t)2 << 30;
  if (text == NULL) return TSR_OK;
  const char* p = text;
  while (*p != '\0') {
    const char* end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[128];
    if (len >= sizeof item) return pe_fail(TSR_INVALID_ARGUMENT, "option too long: %.40s...", p);
    memcpy(item, p, len);
    item[len] = '\0';
    char* value = strchr(item, '=');
    if (len > 0) {
      if (value == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "option '%s' is not key=value", item);
      *value++ = '\0';
      char* rest = NULL;
      unsigned long long number = strtoull(value, &rest, 10);
      if (*value == '\0' || *rest != '\0') {
        return pe_fail(TSR_INVALID_ARGUMENT, "option %s: '%s' is not a number", item, value);
      }
      if (strcmp(item, "devices") == 0 && number <= PE_MAX_DEVICES) {
        g_device_count = (int32_t)number;
      } else if (strcmp(item, "memory") == 0 && number > 0) {
        g_capacity = (size_t)number;
      } else {
        return pe_fail(TSR_INVALID_ARGUMENT, "unknown option or value out of range: %s=%s", item,
                       value);
      }
    }
    if (end == NULL) break;
    p = end + 1;
  }
  return TSR_OK;
}

static void release_everything(void) { /* g_mutex held */
  for (size_t i = 0; i < g_alloc_count; ++i) {
    if (!g_allocs[i].registered) free(g_allocs[i].base);
  }
  free(g_allocs);
  free(g_handles);
  g_allocs = NULL, g_alloc_count = g_alloc_capacity = 0;
  g_handles = NULL, g_handle_count = g_handle_capacity = 0;
  memset(g_used, 0, sizeof g_used);
  g_device_count = 0;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static tsr_status pe_init(const tsr_init_options* options) {
  pthread_mutex_lock(&g_mutex);
  tsr_status status = TSR_OK;
  if (g_init_count == 0) {
    /* Read `options` only if the caller's struct is large enough to hold the field. */
    const char* text = NULL;
    if (options != NULL &&
        options->struct_size >= offsetof(tsr_init_options, options) + sizeof(const char*)) {
      text = options->options;
    }
    status = parse_options(text);
    if (status != TSR_OK) g_device_count = 0;
  }
  if (status == TSR_OK) ++g_init_count;
  pthread_mutex_unlock(&g_mutex);
  if (status == TSR_OK) log_message(TSR_LOG_DEBUG, PE_NAME ": init");
  return status;
}

static void pe_finalize(void) {
  pthread_mutex_lock(&g_mutex);
  if (g_init_count > 0 && --g_init_count == 0) release_everything();
  pthread_mutex_unlock(&g_mutex);
}

/* ---- devices ------------------------------------------------------------------------------ */

/* With g_mutex not held: TSR_OK if `device` is a valid index now. */
tsr_status pe_check_device(int32_t device) {
  pthread_mutex_lock(&g_mutex);
  int32_t count = g_device_count;
  pthread_mutex_unlock(&g_mutex);
  if (device < 0 || device >= count) {
    return pe_fail(TSR_INVALID_ARGUMENT, "no device %d (there are %d)", (int)device, (int)count);
  }
  return TSR_OK;
}

static int32_t pe_device_count(const char** out_reason) {
  pthread_mutex_lock(&g_mutex);
  int32_t count = g_device_count;
  int initialised = g_init_count > 0;
  pthread_mutex_unlock(&g_mutex);
  if (count == 0 && out_reason != NULL) {
    *out_reason =
        initialised ? PE_NAME ": configured with devices=0" : PE_NAME ": init has not been called";
  }
  return count;
}

static tsr_status pe_device_properties(int32_t device, tsr_device_properties* out) {
  if (out == NULL) return pe_fail(TSR_INVALID_ARGUMENT, "device_properties: out is NULL");
  tsr_status status = pe_check_device(device);
  if (status != TSR_OK) return status;
  if (out->struct_size < sizeof(size_t)) {
    return pe_fail(TSR_INVALID_ARGUMENT, "device_properties: struct_size %zu", out->struct_size);
  }
  tsr_device_properties p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "porting example device %d", (int)device);
  snprintf(p.vendor, sizeof p.vendor, "Tessera (porting example)");
  p.uuid[0] = 0x7e, p.uuid[1] = 0x55, p.uuid[15] = (uint8_t)(device + 1);
  p.total_memory = g_capacity;
  p.compute_units = 1;
  p.numa_node = -1;
  p.capabilities = TSR_CAP_UNIFIED_ADDRESSING | TSR_CAP_HOST_REGISTER | TSR_CAP_PEER_ACCESS |
                   TSR_CAP_EVENT_TIMING | TSR_CAP_HOST_ACCESSIBLE;
  /* Write only what fits in the caller's struct; a newer caller's extra fields stay zero. */
  size_t size = out->struct_size < sizeof p ? out->struct_size : sizeof p;
  p.struct_size = out->struct_size;
  memcpy(out, &p, size);
  return TSR_OK;
}

/* ---- the table ---------------------------------------------------------------------------- */

static const tsr_backend_api_v1 kApi = {
    .struct_size = sizeof(tsr_backend_api_v1),
    .abi_major = TSR_BACKEND_ABI_MAJOR,
    .abi_minor = TSR_BACKEND_ABI_MINOR,
    .name = PE_NAME,
    .version = "porting_example 1.0 (host memory, synchronous streams)",
    .init = pe_init,
    .finalize = pe_finalize,
    .last_error = pe_last_error,
    .device_count = pe_device_count,
    .device_properties = pe_device_properties,
    .device_malloc = pe_device_malloc,
    .device_free = pe_device_free,
    .host_malloc_pinned = pe_host_malloc_pinned,
    .host_free_pinned = pe_host_free_pinned,
    .host_register = pe_host_register,
    .host_unregister = pe_host_unregister,
    .memory_info = pe_memory_info,
    .pointer_attributes = pe_pointer_attributes,
    .memcpy_async = pe_memcpy_async,
    .memset_async = pe_memset_async,
    .memcpy_peer_async = pe_memcpy_peer_async,
    .stream_create = pe_stream_create,
    .stream_destroy = pe_stream_destroy,
    .stream_synchronize = pe_stream_synchronize,
    .stream_query = pe_stream_query,
    .stream_wait_event = pe_stream_wait_event,
    .stream_add_callback = NULL, /* needs a backend thread; see the top of this file */
    .event_create = pe_event_create,
    .event_destroy = pe_event_destroy,
    .event_record = pe_event_record,
    .event_synchronize = pe_event_synchronize,
    .event_query = pe_event_query,
    .event_elapsed_time = pe_event_elapsed_time,
    .device_can_access_peer = pe_device_can_access_peer,
    .device_enable_peer_access = pe_device_enable_peer_access,
    .ipc_get_handle = NULL, /* one process only: no exportable memory */
    .ipc_open_handle = NULL,
    .ipc_close_handle = NULL,
    .reduce_async = pe_reduce_async,
    .cast_async = pe_cast_async,
    .gemm_async = NULL,  /* no BLAS */
    .collectives = NULL, /* no vendor collective library: Tessera's own collectives take over */
};

TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(const tsr_host_info* host) {
  pthread_mutex_lock(&g_mutex);
  memset(&g_host, 0, sizeof g_host);
  if (host != NULL) { /* an older loader passes a smaller struct: copy only what it has */
    size_t size = host->struct_size < sizeof g_host ? host->struct_size : sizeof g_host;
    memcpy(&g_host, host, size);
  }
  pthread_mutex_unlock(&g_mutex);
  return &kApi;
}
