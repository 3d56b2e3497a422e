/*
 * The skeleton backend: the starting point for porting Tessera to a new accelerator.
 *
 * It compiles, loads, and reports zero devices with the reason "skeleton backend: not
 * implemented". Copy it into your own tree, out of Tessera's (docs/PORTING.md section 2: this file,
 * backend_abi.h and the starter expectations file skeleton.txt; an installed Tessera has them under
 * <prefix>/share/tessera/skeleton), rename "skeleton" to your backend's name everywhere (sed
 * 's/skeleton/<chip>/g': the library must be libtessera-backend-<chip>.so) and replace every
 * TODO(porter) with calls into your vendor runtime. Fill the groups in this order, running
 * `tessera-cts --backend <path of your library> --expectations <chip>.txt` after each: devices,
 * memory, copies, streams/events, reductions and casts, IPC, GEMM, native collectives. The
 * contract of each entry is in backend_abi.h; list what you leave NULL, with the reason, in
 * <chip>.txt (delete its line when you fill an entry in).
 *
 * Messages: Tessera prefixes what last_error returns with the backend and the entry
 * ("skeleton device_malloc: <your message>"), so a message names the argument and the runtime's
 * error, not the backend or the entry again.
 *
 * Plain C11 on purpose: a backend includes backend_abi.h and its vendor's headers, nothing else
 * of Tessera.
 */
/* ISO C (-std=c11) hides POSIX: a port needs dlopen, pthread_* and clock_gettime. */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera/hal/backend_abi.h"

/* ---- errors: one message per thread, read through last_error ----------------------------- */

static _Thread_local char g_last_error[512];

static tsr_status fail(tsr_status code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(g_last_error, sizeof g_last_error, format, args);
  va_end(args);
  return code;
}

/* The loader adds "skeleton <entry>: " in front of last_error, so the entry is not repeated. */
static tsr_status not_implemented(void) {
  return fail(TSR_UNIMPLEMENTED, "not implemented yet (TODO(porter))");
}

static const char* skeleton_last_error(void) {
  return g_last_error;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static tsr_host_info g_host; /* copy of what the loader gave us (log callback) */

static tsr_status skeleton_init(const tsr_init_options* options) {
  (void)options;
  /* TODO(porter): load the vendor runtime (dlopen it, so that a machine without the driver still
   * loads this library) and initialise it. Return TSR_NO_DRIVER with the dlerror() text when the
   * runtime is missing, TSR_VERSION_MISMATCH when it is too old. Count init calls: init and
   * finalize are reference counted (see backend_abi.h). */
  if (g_host.log) g_host.log(g_host.log_user_data, TSR_LOG_DEBUG, "skeleton backend: init");
  return TSR_OK;
}

static void skeleton_finalize(void) {
  /* TODO(porter): drop one init reference; on the last, release streams, events, memory. */
}

/* ---- devices ------------------------------------------------------------------------------ */

static int32_t skeleton_device_count(const char** out_reason) {
  /* TODO(porter): return the vendor runtime's device count; when it is 0, say why. */
  if (out_reason) *out_reason = "skeleton backend: not implemented";
  return 0;
}

static tsr_status skeleton_device_properties(int32_t device, tsr_device_properties* out) {
  /* TODO(porter): fill only the fields that fit in out->struct_size: name, vendor, uuid,
   * pci_bus_id ("dddd:bb:dd.f"), total_memory, compute_units, numa_node, peak FLOP/s, memory
   * bandwidth, TSR_CAP_* flags. */
  (void)out;
  return fail(TSR_INVALID_ARGUMENT, "no device %d (the backend has none)", (int)device);
}

/* ---- memory ------------------------------------------------------------------------------- */

static tsr_status skeleton_device_malloc(int32_t device, size_t bytes, void** out_ptr) {
  (void)device, (void)bytes, (void)out_ptr;
  return not_implemented(); /* TODO(porter): vendor malloc, 256-byte aligned */
}

static tsr_status skeleton_device_free(int32_t device, void* ptr) {
  (void)device;
  if (ptr == NULL) return TSR_OK;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_host_malloc_pinned(size_t bytes, void** out_ptr) {
  (void)bytes, (void)out_ptr;
  return not_implemented(); /* TODO(porter): page-locked host memory */
}

static tsr_status skeleton_host_free_pinned(void* ptr) {
  if (ptr == NULL) return TSR_OK;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_memory_info(int32_t device, size_t* out_free, size_t* out_total) {
  (void)device, (void)out_free, (void)out_total;
  return not_implemented(); /* TODO(porter) */
}

/* ---- transfers ---------------------------------------------------------------------------- */

static tsr_status skeleton_memcpy_async(void* dst, const void* src, size_t bytes,
                                        tsr_stream stream) {
  (void)dst, (void)src, (void)stream;
  if (bytes == 0) return TSR_OK;
  return not_implemented(); /* TODO(porter): direction inferred from pointers */
}

static tsr_status skeleton_memset_async(void* dst, int32_t value, size_t bytes, tsr_stream stream) {
  (void)dst, (void)value, (void)stream;
  if (bytes == 0) return TSR_OK;
  return not_implemented(); /* TODO(porter) */
}

/* ---- streams and events ------------------------------------------------------------------- */

static tsr_status skeleton_stream_create(int32_t device, int32_t priority, tsr_stream* out) {
  (void)device, (void)priority, (void)out;
  return not_implemented(); /* TODO(porter): vendor stream / queue */
}

static tsr_status skeleton_stream_destroy(tsr_stream stream) {
  (void)stream;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_stream_synchronize(tsr_stream stream) {
  (void)stream;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_stream_query(tsr_stream stream) {
  (void)stream;
  return not_implemented(); /* TODO(porter): TSR_OK idle, TSR_NOT_READY busy */
}

static tsr_status skeleton_stream_wait_event(tsr_stream stream, tsr_event event) {
  (void)stream, (void)event;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_event_create(int32_t device, uint32_t flags, tsr_event* out) {
  (void)device, (void)flags, (void)out;
  return not_implemented(); /* TODO(porter): vendor event / notifier */
}

static tsr_status skeleton_event_destroy(tsr_event event) {
  (void)event;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_event_record(tsr_event event, tsr_stream stream) {
  (void)event, (void)stream;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_event_synchronize(tsr_event event) {
  (void)event;
  return not_implemented(); /* TODO(porter) */
}

static tsr_status skeleton_event_query(tsr_event event) {
  (void)event;
  return not_implemented(); /* TODO(porter) */
}

/* ---- the table ---------------------------------------------------------------------------- */

static const tsr_backend_api_v1 kApi = {
    .struct_size = sizeof(tsr_backend_api_v1),
    .abi_major = TSR_BACKEND_ABI_MAJOR,
    .abi_minor = TSR_BACKEND_ABI_MINOR,
    .name = "skeleton",
    .version = "skeleton 0.1 (no vendor runtime)", /* TODO(porter): include the runtime version */
    .init = skeleton_init,
    .finalize = skeleton_finalize,
    .last_error = skeleton_last_error,
    .device_count = skeleton_device_count,
    .device_properties = skeleton_device_properties,
    .device_malloc = skeleton_device_malloc,
    .device_free = skeleton_device_free,
    .host_malloc_pinned = skeleton_host_malloc_pinned,
    .host_free_pinned = skeleton_host_free_pinned,
    .host_register = NULL,   /* TODO(porter): optional, pin existing host memory */
    .host_unregister = NULL, /* TODO(porter): optional */
    .memory_info = skeleton_memory_info,
    .pointer_attributes = NULL, /* TODO(porter): optional, but the collectives use it */
    .memcpy_async = skeleton_memcpy_async,
    .memset_async = skeleton_memset_async,
    .memcpy_peer_async = NULL, /* TODO(porter): optional, device-to-device across devices */
    .stream_create = skeleton_stream_create,
    .stream_destroy = skeleton_stream_destroy,
    .stream_synchronize = skeleton_stream_synchronize,
    .stream_query = skeleton_stream_query,
    .stream_wait_event = skeleton_stream_wait_event,
    .stream_add_callback = NULL, /* TODO(porter): optional, host function on the stream */
    .event_create = skeleton_event_create,
    .event_destroy = skeleton_event_destroy,
    .event_record = skeleton_event_record,
    .event_synchronize = skeleton_event_synchronize,
    .event_query = skeleton_event_query,
    .event_elapsed_time = NULL,        /* TODO(porter): optional, needed by the profiler */
    .device_can_access_peer = NULL,    /* TODO(porter): optional */
    .device_enable_peer_access = NULL, /* TODO(porter): optional */
    .ipc_get_handle = NULL,            /* TODO(porter): optional, intra-node zero-copy */
    .ipc_open_handle = NULL,           /* TODO(porter): optional */
    .ipc_close_handle = NULL,          /* TODO(porter): optional */
    .reduce_async = NULL, /* TODO(porter): the collectives need it; see tsr_reduce_op rules */
    .cast_async = NULL,   /* TODO(porter): needed for mixed precision and compression */
    .gemm_async = NULL,   /* TODO(porter): optional, the planner calibrates with it */
    .collectives = NULL,  /* TODO(porter): optional, the vendor's collective library */
    /* Minor 1. */
    /* TODO(porter): optional test aid, a spin kernel of N microseconds on the stream (used to model
     * compute); left NULL, list `unsupported Stream.IsOccupiedByABusyWaitInOrderWithItsOtherWork`.
     */
    .stream_busy_wait = NULL,
    /* Minor 2 (docs/PORTING.md section 4.9). */
    /* TODO(porter): optional; like stream_add_callback, passing the stream's failure message
     * ("" while OK) -- the runtime's error text when its stream callbacks receive a status. */
    .stream_add_callback_with_message = NULL,
    /* TODO(porter): host signals, all five or none (the loader treats a partial set as none).
     * A 64-bit counter the host raises and streams wait on, so collectives sit on a stream
     * without blocking a callback thread. Fill them with the runtime's host-signalled wait:
     *   CUDA-like   word in mapped pinned memory; *StreamWaitValue64(GEQ) on its device address;
     *               raise = atomic max store to the word (see backends/cuda/host_signal.cc)
     *   Level Zero  an event per awaited value; zeCommandListAppendWaitOnEvents;
     *               raise = zeEventHostSignal (backends/level_zero/host_signal.cc)
     *   Ascend      an aclrtEvent per value; aclrtStreamWaitEvent; raise = aclrtRecordEvent on
     *               an idle host-side stream (or aclrtNotify)
     *   Cambricon   a cnrtNotifier_t per value; cnrtQueueWaitNotifier; raise = cnrtPlaceNotifier
     *               on an idle host-side queue
     * raise never blocks; destroy must not leave a waiting stream hung (fail or release it).
     * Left NULL, list `unsupported HostSignal.*` and `unsupported
     * Callback.ReceivesTheMessageOfTheStreamsFailure` in the expectations file; the collectives
     * then block a callback thread per operation. */
    .host_signal_create = NULL,
    .host_signal_destroy = NULL,
    .host_signal_raise = NULL,
    .host_signal_query = NULL,
    .stream_wait_host_signal = NULL,
    /* Minor 3 (docs/PORTING.md section 4.10). */
    /* TODO(porter): kernel modules, all four or none (the loader treats a partial set as none),
     * and set tsr_device_properties.module_formats to the formats module_load takes. The shape
     * every runtime has:
     *   CUDA-like   cuModuleLoadData / cuModuleGetFunction / cuLaunchKernel / cuModuleUnload
     *   Level Zero  zeModuleCreate / zeKernelCreate + zeKernelSetArgumentValue /
     *               zeCommandListAppendLaunchKernel / zeModuleDestroy
     *   Ascend      aclrtBinaryLoadFromData / aclrtBinaryGetFunction / aclrtLaunchKernel
     *   Cambricon   cnModuleLoadFatBinary / cnModuleGetKernel / cnInvokeKernel
     * launch checks the argument count and sizes where the runtime can tell, and refuses zero
     * dimensions and blocks beyond the device's limits, naming the kernel, before enqueuing.
     * Left NULL, list `unsupported Module.*` in the expectations file. */
    .module_load = NULL,
    .module_unload = NULL,
    .module_get_function = NULL,
    .launch = NULL,
};

TSR_BACKEND_EXPORT const tsr_backend_api_v1* tessera_backend_get_api_v1(const tsr_host_info* host) {
  memset(&g_host, 0, sizeof g_host);
  if (host != NULL) {
    /* An older loader passes a smaller struct: copy only what it has. */
    size_t size = host->struct_size < sizeof g_host ? host->struct_size : sizeof g_host;
    memcpy(&g_host, host, size);
  }
  return &kApi;
}
