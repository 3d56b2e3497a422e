/*
 * tessera.h: the C API of the Tessera runtime, for trainers written in C or in any language with a
 * C foreign-function interface (Python ctypes/cffi, Rust, Go, Julia, ...).
 *
 *   tessera_context* ctx = NULL;
 *   if (tessera_init_from_env(NULL, &ctx) != TESSERA_OK) { puts(tessera_last_error()); ... }
 *   tessera_allreduce(ctx, grads, grads, n, TESSERA_F32, TESSERA_SUM);
 *   tessera_context_destroy(ctx);
 *
 * Conventions (docs/API.md has the full reference and a complete example):
 *  - Every function returns a tessera_status; TESSERA_OK is 0. On failure tessera_last_error()
 *    returns a message naming the function and what failed (argument, file, field, rank,
 *    operation). Bad arguments (NULL handles or pointers, enums out of range, zero sizes where a
 *    size is required) return TESSERA_INVALID_ARGUMENT; no entry point crashes on them.
 *  - Handles are opaque pointers created by *_create / tessera_init_from_env and released by
 *    the matching *_destroy, which accepts NULL. Parameters named out_* are written only on
 *    success. Strings returned through `char**` are owned by the caller: tessera_free() them.
 *  - Options structs start with `struct_size` (set it to sizeof the struct; fields are only ever
 *    appended) and may be passed as NULL for the defaults.
 *  - Thread-safety: a context and everything made from it is used by one thread at a time (the
 *    trainer's), as with MPI and NCCL communicators. tessera_last_error() is per thread.
 *  - Memory: buffers passed to communication functions and checkpoint tensors may be host memory
 *    or device memory of the context's device (tessera_device_name), any alignment; the caller
 *    does not say which. The library asks the device's backend (its pointer attributes: the
 *    backend knows every allocation it made) and never dereferences device memory on the CPU:
 *    collectives move it through the backend's collective library or through pinned staging
 *    buffers, checkpoints copy it into pinned buffers on a stream. Device memory comes from the
 *    vendor runtime (cudaMalloc on that device, ...) or from tessera_device_alloc. Memory of
 *    another device or backend is refused with TESSERA_INVALID_ARGUMENT naming the argument and
 *    the device. Every rank must make the same collective calls in the same order.
 *
 * The names use the `tessera_` prefix rather than the backend ABI's `tsr_`, so a program may
 * include this header and hal/backend_abi.h together.
 */
#ifndef TESSERA_H_
#define TESSERA_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TESSERA_API
#else
#define TESSERA_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this API: the major changes only when a call or struct changes incompatibly. */
#define TESSERA_C_API_VERSION_MAJOR 0
#define TESSERA_C_API_VERSION_MINOR 2

/* ============================================================================================== */
/* Status, errors, enums                                                                          */
/* ============================================================================================== */

/* Codes, value for value the same as tessera::StatusCode and the backend ABI's tsr_status. */
typedef enum tessera_status {
  TESSERA_OK = 0,
  TESSERA_CANCELLED = 1,
  TESSERA_UNKNOWN = 2,
  TESSERA_INVALID_ARGUMENT = 3,
  TESSERA_DEADLINE_EXCEEDED = 4,
  TESSERA_NOT_FOUND = 5,
  TESSERA_ALREADY_EXISTS = 6,
  TESSERA_PERMISSION_DENIED = 7,
  TESSERA_RESOURCE_EXHAUSTED = 8,
  TESSERA_FAILED_PRECONDITION = 9,
  TESSERA_ABORTED = 10,
  TESSERA_OUT_OF_RANGE = 11,
  TESSERA_UNIMPLEMENTED = 12,
  TESSERA_INTERNAL = 13,
  TESSERA_UNAVAILABLE = 14,
  TESSERA_DATA_LOSS = 15,
  TESSERA_UNAUTHENTICATED = 16,
  TESSERA_NO_DRIVER = 100,
  TESSERA_NO_DEVICE = 101,
  TESSERA_VERSION_MISMATCH = 102,
  TESSERA_NOT_READY = 103
} tessera_status;

/* Element types (values match the backend ABI's tsr_dtype). */
typedef enum tessera_dtype {
  TESSERA_F32 = 0,
  TESSERA_F16 = 1,  /* IEEE binary16 */
  TESSERA_BF16 = 2, /* bfloat16 */
  TESSERA_F64 = 3,
  TESSERA_I32 = 4,
  TESSERA_I64 = 5,
  TESSERA_U8 = 6
} tessera_dtype;

/* Reductions (values match tsr_reduce_op). AVG is SUM divided by the number of ranks. */
typedef enum tessera_reduce_op {
  TESSERA_SUM = 0,
  TESSERA_PROD = 1,
  TESSERA_MIN = 2,
  TESSERA_MAX = 3,
  TESSERA_AVG = 4
} tessera_reduce_op;

/* The message of the last call on this thread that returned an error, naming the function and
 * the cause; "" when the last call returning a tessera_status succeeded (helpers that return no
 * status leave it alone). Valid until the next call on this thread. Never NULL. */
TESSERA_API const char* tessera_last_error(void);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for a value that is not a tessera_status. Static. */
TESSERA_API const char* tessera_status_name(tessera_status status);

/* The library version, "0.1.0". Static. */
TESSERA_API const char* tessera_version(void);

/* Bytes per element of `dtype`; 0 for a value that is not a tessera_dtype. */
TESSERA_API size_t tessera_dtype_size(tessera_dtype dtype);

/* Frees a string (or any memory) this library returned through a `char**`. NULL is ignored. */
TESSERA_API void tessera_free(void* memory);

/* ============================================================================================== */
/* Context: this process's rank in the job and the world communicator                             */
/* ============================================================================================== */

typedef struct tessera_context tessera_context;

typedef struct tessera_init_options {
  size_t struct_size; /* sizeof(tessera_init_options) */
  /* [in][optional] The device this rank uses: "host:0", "cuda:1", or a backend name alone
   * ("host", "cuda") for device local_rank modulo that backend's device count. NULL or "":
   * "host". Backends are found as `tessera devices` shows (TESSERA_BACKEND_PATH adds folders). */
  const char* device;
  /* [in] Bound on connecting to the job's store and on every collective wait, in milliseconds;
   * 0: the defaults (60 s for the bootstrap; TESSERA_COLL_TIMEOUT_MS, else 300 s). */
  int64_t timeout_ms;
} tessera_init_options;

/* Reads the launcher's environment (tessera launch, torchrun-style RANK/WORLD_SIZE/MASTER_ADDR,
 * mpirun, srun; none: a single rank), meets the other ranks, opens the device and creates the
 * world communicator. Collective: every rank of the job calls it.
 *   options  [in][optional] NULL: defaults.
 *   out_ctx  [out] the new context; tessera_context_destroy() it.
 * Returns INVALID_ARGUMENT (bad options, malformed launcher variables: the variable is named),
 * NOT_FOUND (no such device or backend), DEADLINE_EXCEEDED (a rank did not arrive), ... */
TESSERA_API tessera_status tessera_init_from_env(const tessera_init_options* options,
                                                 tessera_context** out_ctx);

/* Collective: waits (up to the timeout) until every rank reaches it, so no rank tears down while
 * a peer still drains its last operation, then releases the context. Handles made from it
 * (grad syncs, checkpoints) should be destroyed first. NULL is a no-op returning OK. Returns the
 * barrier's error (a dead peer) after releasing everything anyway. */
TESSERA_API tessera_status tessera_context_destroy(tessera_context* ctx);

/* This rank and the number of ranks of the world communicator. */
TESSERA_API tessera_status tessera_rank(const tessera_context* ctx, int* out_rank);
TESSERA_API tessera_status tessera_size(const tessera_context* ctx, int* out_size);
/* This rank among the ranks on its host, and their number. */
TESSERA_API tessera_status tessera_local_rank(const tessera_context* ctx, int* out_local_rank);
TESSERA_API tessera_status tessera_local_size(const tessera_context* ctx, int* out_local_size);
/* The device this rank uses, "host:0". The string lives as long as the context. */
TESSERA_API tessera_status tessera_device_name(const tessera_context* ctx, const char** out_name);

/* ============================================================================================== */
/* Device memory of the context's device (0.2)                                                    */
/* ============================================================================================== */

/* For programs without a vendor runtime of their own (and tests): memory of the context's device,
 * which the CPU may be unable to read (a GPU's, or the host backend's discrete mode), filled and
 * read with tessera_memcpy.
 *   bytes   [in] > 0.
 *   out_ptr [out] the device pointer; tessera_device_free() it before destroying the context.
 * Returns INVALID_ARGUMENT (bytes 0), RESOURCE_EXHAUSTED (beyond the device's free memory). */
TESSERA_API tessera_status tessera_device_alloc(tessera_context* ctx, size_t bytes, void** out_ptr);
/* Frees memory of tessera_device_alloc on this context (waits for copies using it). NULL is a
 * no-op; any other pointer is INVALID_ARGUMENT. */
TESSERA_API tessera_status tessera_device_free(tessera_context* ctx, void* ptr);
/* Copies `bytes` from `src` to `dst`, each host memory or device memory of the context's device
 * (the direction is told by the backend), and returns when the copy is complete. Returns
 * INVALID_ARGUMENT for NULL pointers when bytes > 0 and for a range past the end of a device
 * allocation. */
TESSERA_API tessera_status tessera_memcpy(tessera_context* ctx, void* dst, const void* src,
                                          size_t bytes);

/* ============================================================================================== */
/* Collectives over the world communicator (blocking; host or device memory, see Memory above)    */
/* ============================================================================================== */

/* Counts are elements of `dtype`. In place: send == recv (allgather: send == recv + rank * count
 * elements; reduce_scatter: recv == send + rank * recv_count elements). After a failure (a dead
 * peer, a timeout) the communicator only returns errors: destroy the context. */

/* recv[i] = op over every rank's send[i], on every rank. */
TESSERA_API tessera_status tessera_allreduce(tessera_context* ctx, const void* send, void* recv,
                                             size_t count, tessera_dtype dtype,
                                             tessera_reduce_op op);
/* recv (size * count elements) = every rank's `count` elements of send, in rank order. */
TESSERA_API tessera_status tessera_allgather(tessera_context* ctx, const void* send, void* recv,
                                             size_t count, tessera_dtype dtype);
/* send holds size * recv_count elements; rank r receives block r of the reduction. */
TESSERA_API tessera_status tessera_reduce_scatter(tessera_context* ctx, const void* send,
                                                  void* recv, size_t recv_count,
                                                  tessera_dtype dtype, tessera_reduce_op op);
/* recv = root's send on every rank (send is read on the root only; it may equal recv). */
TESSERA_API tessera_status tessera_broadcast(tessera_context* ctx, const void* send, void* recv,
                                             size_t count, tessera_dtype dtype, int root);
/* Returns once every rank has entered it. */
TESSERA_API tessera_status tessera_barrier(tessera_context* ctx);

/* ============================================================================================== */
/* Planning                                                                                       */
/* ============================================================================================== */

typedef struct tessera_plan_request {
  size_t struct_size; /* sizeof(tessera_plan_request) */
  /* [in] The model: a preset name ("llama2-7b"), a path to a Hugging Face config.json or a layer
   * list (runtime/ir/README.md), or that JSON itself (text starting with '{'). */
  const char* model;
  /* [in] The cluster: a preset ("dgx-a100-80gb"), or a path to a cluster JSON (the compact form
   * of docs/PLANNER.md, or what `tessera probe --cluster ... --json` writes). */
  const char* cluster;
  int64_t devices;      /* [in] 0: the cluster's; else resize it (tessera plan --devices) */
  int64_t global_batch; /* [in] sequences per step, > 0 */
  int64_t seq_len;      /* [in] tokens per sequence, > 0 */
  const char* dtype;    /* [in][optional] "bf16" (NULL) or "fp16" */
  const char* fix;      /* [in][optional] fixed values, "tp=2,zero=1" (tessera plan --fix) */
} tessera_plan_request;

/* Searches the parallel plans for the request and returns the fastest that fits as JSON, the same
 * document `tessera plan --json --top 1` prints (so `tessera ckpt reshard --to` and
 * `tessera-train --plan-json` take it as it is):
 *   {"model": {...}, "cluster": {...}, "workload": {...},
 *    "plans": [{"tp", "pp", "dp", "cp", "ep", "vp", "mbs", "num_microbatches", "zero",
 *               "recompute", "sp", "stage_layers", "summary": "tp=.. pp=.. ...", "step_time_s",
 *               "tokens_per_s", "mfu", "memory_gib_per_device", "breakdown", ...}],
 *    "search": {"candidates", "evaluated", "feasible", "elapsed_ms"}}
 * Pure: needs no context, reads only the files named. Thread-safe.
 *   out_json [out] NUL-terminated; tessera_free() it.
 * Returns INVALID_ARGUMENT (bad request, or fixed values that admit no plan), NOT_FOUND (a file),
 * RESOURCE_EXHAUSTED (no plan fits in memory: the message gives the smallest requirement). */
TESSERA_API tessera_status tessera_plan(const tessera_plan_request* request, char** out_json);

/* ============================================================================================== */
/* Overlap engine: bucketed gradient averaging that overlaps with the backward pass              */
/* ============================================================================================== */

typedef struct tessera_grad_sync tessera_grad_sync;

typedef struct tessera_grad_sync_options {
  size_t struct_size;       /* sizeof(tessera_grad_sync_options) */
  tessera_reduce_op reduce; /* [in] TESSERA_AVG (data parallel, the default) or TESSERA_SUM */
  size_t bucket_bytes;      /* [in] 0: TESSERA_BUCKET_MB, else the engine's rule */
  int zero_fill_unmarked;   /* [in] 1: finish() treats unmarked gradients as unused (zeros) */
} tessera_grad_sync_options;

/* Counters of one step, from tessera_grad_sync_finish(). */
typedef struct tessera_step_stats {
  size_t struct_size; /* [in] sizeof(tessera_step_stats), set by the caller */
  uint64_t step;
  size_t buckets;
  size_t payload_bytes;   /* gradient bytes reduced */
  size_t wire_bytes;      /* bytes this rank handed to the collectives */
  double step_seconds;    /* first mark to the return of finish */
  double comm_seconds;    /* communication stream busy time */
  double exposed_seconds; /* finish waiting after the caller's compute was done */
  double overlap_ratio;   /* 1 - exposed / comm, in [0, 1] */
} tessera_step_stats;

/* An engine over the context's world communicator, on its device. Not collective.
 *   options [in][optional] NULL: average, default buckets.
 *   out     [out] tessera_grad_sync_destroy() it before the context. */
TESSERA_API tessera_status tessera_grad_sync_create(tessera_context* ctx,
                                                    const tessera_grad_sync_options* options,
                                                    tessera_grad_sync** out);
/* Waits for queued work and releases the engine. NULL is a no-op. */
TESSERA_API tessera_status tessera_grad_sync_destroy(tessera_grad_sync* sync);

/* Registers a parameter and its gradient, `count` elements of `dtype` each (before the first
 * mark). `data` may be NULL; `grad` receives the reduced gradient after finish().
 *   out_index [out][optional] the index to mark. Indices count up from 0 in registration order.
 * `data` and `grad` are device memory of the engine's device (tessera_device_alloc); host memory
 * is accepted only where the device is host-addressable.
 * Returns INVALID_ARGUMENT for a NULL grad, count 0, a misaligned or overlapping buffer, host
 * memory on a device the CPU cannot address, memory of another device, a duplicate name, or
 * registration after the first mark (the message names the parameter). */
TESSERA_API tessera_status tessera_grad_sync_add_parameter(tessera_grad_sync* sync,
                                                           const char* name, void* data, void* grad,
                                                           size_t count, tessera_dtype dtype,
                                                           int* out_index);
/* The gradient `index` holds its final value for this step (backward computed it on the host,
 * or on the context's device before this call returns): its bucket may start. Buckets launch in
 * the same order on every rank, whatever order the marks come in. The first mark is collective
 * (the ranks check their layouts match). */
TESSERA_API tessera_status tessera_grad_sync_mark_ready(tessera_grad_sync* sync, int index);
/* `index` took no part in this step: it contributes zeros. */
TESSERA_API tessera_status tessera_grad_sync_mark_unused(tessera_grad_sync* sync, int index);
/* Waits until every bucket of the step is reduced into the grad buffers.
 *   out_stats [out][optional] set its struct_size first. */
TESSERA_API tessera_status tessera_grad_sync_finish(tessera_grad_sync* sync,
                                                    tessera_step_stats* out_stats);

/* ============================================================================================== */
/* Checkpoints: asynchronous, sharded, incremental, resharding, with peer-memory replicas         */
/* ============================================================================================== */

typedef struct tessera_checkpoint tessera_checkpoint;

typedef struct tessera_checkpoint_options {
  size_t struct_size; /* sizeof(tessera_checkpoint_options) */
  const char* dir;    /* [in] root folder, shared by every rank; created when missing */
  int keep_last;      /* [in] committed checkpoints kept; 0: 3 */
  int full_every;     /* [in] 1 (or 0): every save full; K: one full then K-1 deltas */
  int peer_replica;   /* [in] 1: keep each snapshot in a buddy rank's memory (for restore) */
  int no_fsync;       /* [in] 1: skip fsync (tests on throwaway folders only) */
} tessera_checkpoint_options;

/* Snapshot-time read of a blob: set *out_data / *out_size to bytes that stay valid until the
 * callback returns to the library (it copies them). Called on the thread of save_async. */
typedef void (*tessera_blob_get_fn)(void* user_data, const void** out_data, size_t* out_size);
/* Load-time write of a blob; return TESSERA_OK, or an error that fails the load. */
typedef tessera_status (*tessera_blob_set_fn)(void* user_data, const void* data, size_t size);

/* A checkpointer whose ranks coordinate through the context's world communicator, snapshotting
 * device tensors through pinned buffers of the context's device.
 *   ctx     [in][optional] NULL: a single-rank checkpointer of host tensors only (offline tools,
 *           tests).
 *   out     [out] tessera_checkpoint_destroy() it before the context. */
TESSERA_API tessera_status tessera_checkpoint_create(tessera_context* ctx,
                                                     const tessera_checkpoint_options* options,
                                                     tessera_checkpoint** out);
/* Waits for the save in flight and releases the checkpointer. NULL is a no-op. */
TESSERA_API tessera_status tessera_checkpoint_destroy(tessera_checkpoint* ckpt);

/* Registers memory holding this rank's slice of a global tensor of `ndim` dimensions: `shape` is
 * the global shape; slice_offset/slice_len (both NULL: the whole tensor) say which part is at
 * `data`, row-major and contiguous. `data` is host memory or device memory of the context's device
 * (told by the backend, see Memory above): device tensors are snapshotted by device-to-host copies
 * into pinned buffers (save_async blocks until they are done: finish the device work writing them
 * first) and loaded by host-to-device copies. `replicated`: several ranks hold the same slice
 * (data parallelism); only the lowest writes it. The memory must outlive the checkpointer. Loading
 * reshards from whatever layout the checkpoint was saved under. Returns INVALID_ARGUMENT for
 * memory of another device, or device memory past the end of its allocation (naming the tensor
 * and the device). */
TESSERA_API tessera_status tessera_checkpoint_add_tensor(tessera_checkpoint* ckpt, const char* name,
                                                         tessera_dtype dtype, const int64_t* shape,
                                                         int ndim, const int64_t* slice_offset,
                                                         const int64_t* slice_len, void* data,
                                                         int replicated);
/* Registers a blob of bytes (RNG state, data-loader cursor, ...) read by `get` at snapshot and
 * written back by `set` on load. */
TESSERA_API tessera_status tessera_checkpoint_add_blob(tessera_checkpoint* ckpt, const char* name,
                                                       tessera_blob_get_fn get,
                                                       tessera_blob_set_fn set, void* user_data,
                                                       int replicated);

/* Collective. Snapshots the registered state and persists it in the background; blocks for the
 * snapshot only (and for a previous save still in flight).
 *   out_blocking_s [out][optional] seconds this call blocked. */
TESSERA_API tessera_status tessera_checkpoint_save_async(tessera_checkpoint* ckpt, int64_t step,
                                                         double* out_blocking_s);
/* Waits for the save in flight; OK once it is committed on every rank, else why it was not.
 *   out_step [out][optional] the step of that save. */
TESSERA_API tessera_status tessera_checkpoint_wait(tessera_checkpoint* ckpt, int64_t* out_step);
/* Collective. Loads a committed checkpoint into the registered memory: `step` < 0 for the newest
 * (`latest`); `fallback` = 1 tries older ones when it is damaged. Verifies every checksum.
 *   out_step [out][optional] the step loaded. */
TESSERA_API tessera_status tessera_checkpoint_load(tessera_checkpoint* ckpt, int64_t step,
                                                   int fallback, int64_t* out_step);
/* Collective, after a failure: every rank returns to the newest snapshot that survives in memory
 * (its own, or its buddy's copy when this rank restarted), else to storage. Needs peer_replica.
 *   out_step      [out][optional] the step restored.
 *   out_from_peer [out][optional] 1 when this rank's state came from memory. */
TESSERA_API tessera_status tessera_checkpoint_restore(tessera_checkpoint* ckpt, int64_t* out_step,
                                                      int* out_from_peer);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_H_ */
