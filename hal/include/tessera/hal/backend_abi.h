/*
 * Tessera backend ABI, major version 1.
 *
 * The only project header a backend includes. Plain C11, standalone: a chip vendor builds a backend
 * against this file alone. A backend is a shared library `libtessera-backend-<name>.so` exporting
 *
 *     const tsr_backend_api_v1* tessera_backend_get_api_v1(const tsr_host_info* host);
 *
 * which returns a table of function pointers that lives as long as the library is loaded.
 *
 * Versioning rules (in the manner of PJRT's C API):
 *   - The major version is in the entry-point symbol's name; a change that breaks old backends
 *     bumps it and renames the symbol, so an old loader never calls a new table.
 *   - Every extensible struct starts with `size_t struct_size`. Fields are only appended, never
 *     reordered or removed; each append bumps TSR_BACKEND_ABI_MINOR.
 *   - A reader sees only the fields that fit in the writer's `struct_size`; fields beyond it read
 * as zero/NULL. A table built against an older minor therefore has its newer entries "absent".
 *   - A NULL function pointer means "unsupported". The loader refuses a table in which any entry
 *     marked [required] below is NULL or beyond struct_size, naming the entry.
 *
 * Conventions (in the manner of Level Zero's headers):
 *   - Every call returns tsr_status unless it cannot fail. On failure the backend stores a message
 *     for the calling thread, read with `last_error`; the message names what failed.
 *   - [in], [out], [optional] on parameters. Output parameters are named out_*; they are written
 *     only on TSR_OK.
 *   - Devices are addressed by index in [0, device_count). Device memory is addressed by plain
 *     pointers; a backend must recognise its own pointers (pointer_attributes).
 *   - Thread-safety: every entry may be called from any thread concurrently unless it says
 *     otherwise. Operations enqueued on one stream run in enqueue order; streams are independent
 *     except for event waits.
 *   - Handles (streams, events) are opaque. Using a destroyed handle is undefined in general; a
 *     backend that can detect it returns TSR_INVALID_ARGUMENT (the host backend does).
 *   - There is no default stream: a NULL stream is TSR_INVALID_ARGUMENT. count/bytes == 0 is a
 *     no-op that accepts NULL pointers.
 *   - last_error keeps the last failure's message; a successful call does not clear it.
 *   - A failure of enqueued work is sticky: the stream's synchronize and query return it from
 *     then on (query returns it even when the stream is idle).
 *   - Enum parameters (tsr_dtype, tsr_reduce_op) arrive as the caller's raw int: validate the
 *     value before switching on it.
 *   - Output structs with struct_size: the backend writes only the fields it knows and that fit;
 *     callers zero-initialise, so fields a backend does not know read as zero.
 *   - Pageable host memory given to an asynchronous copy must stay valid until the copy runs.
 */
#ifndef TESSERA_HAL_BACKEND_ABI_H_
#define TESSERA_HAL_BACKEND_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_BACKEND_ABI_MAJOR 1
/* Minor 1: stream_busy_wait. Minor 2: callbacks with a message, host signals. Minor 3: kernel
 * modules (module_load, module_get_function, launch, module_unload) and
 * tsr_device_properties.module_formats. */
#define TSR_BACKEND_ABI_MINOR 3

/* Name of the entry point for this major version, for dlsym. */
#define TSR_BACKEND_ENTRY_POINT "tessera_backend_get_api_v1"

#if defined(_WIN32)
#define TSR_BACKEND_EXPORT __declspec(dllexport)
#else
#define TSR_BACKEND_EXPORT __attribute__((visibility("default")))
#endif

/* ============================================================================================== */
/* Status codes                                                                                   */
/* ============================================================================================== */

/* The absl/gRPC canonical codes, plus four for accelerators. Values are stable across versions. */
typedef enum tsr_status {
  TSR_OK = 0,
  TSR_CANCELLED = 1,
  TSR_UNKNOWN = 2,
  TSR_INVALID_ARGUMENT = 3,
  TSR_DEADLINE_EXCEEDED = 4,
  TSR_NOT_FOUND = 5,
  TSR_ALREADY_EXISTS = 6,
  TSR_PERMISSION_DENIED = 7,
  TSR_RESOURCE_EXHAUSTED = 8, /* out of device or host memory, out of handles */
  TSR_FAILED_PRECONDITION = 9,
  TSR_ABORTED = 10,
  TSR_OUT_OF_RANGE = 11,
  TSR_UNIMPLEMENTED = 12,
  TSR_INTERNAL = 13,
  TSR_UNAVAILABLE = 14,
  TSR_DATA_LOSS = 15,
  TSR_UNAUTHENTICATED = 16,
  TSR_NO_DRIVER = 100,        /* the vendor driver or runtime library is not installed */
  TSR_NO_DEVICE = 101,        /* driver present, no usable device */
  TSR_VERSION_MISMATCH = 102, /* ABI, driver or runtime version not supported */
  TSR_NOT_READY = 103         /* query: the work is still pending (not an error) */
} tsr_status;

/* ============================================================================================== */
/* Data types and reduction operators                                                             */
/* ============================================================================================== */

typedef enum tsr_dtype {
  TSR_DTYPE_F32 = 0,
  TSR_DTYPE_F16 = 1,  /* IEEE binary16 */
  TSR_DTYPE_BF16 = 2, /* bfloat16: the top 16 bits of an f32 */
  TSR_DTYPE_F64 = 3,
  TSR_DTYPE_I32 = 4,
  TSR_DTYPE_I64 = 5,
  TSR_DTYPE_U8 = 6,
  TSR_DTYPE_COUNT = 7 /* number of dtypes in this minor version; grows when dtypes are appended */
} tsr_dtype;

/*
 * Reduction semantics every backend must match bit for bit (the CTS checks against float64):
 *   - f16/bf16 accumulate in f32 and round once to the destination, round-to-nearest-even;
 *     f32 accumulates in f32, f64 in f64, in source order 0..N-1.
 *   - integers wrap on overflow (two's complement); AVG on integers accumulates in 64 bits and
 *     divides truncating toward zero.
 *   - AVG on floats is the SUM in the accumulation type divided once by N, then rounded to the
 *     destination (the CTS allows 2 ulp for AVG, 0 ulp for the others on exact inputs).
 *   - MIN/MAX on floats: if any source is NaN the result is NaN.
 */
typedef enum tsr_reduce_op {
  TSR_REDUCE_SUM = 0,
  TSR_REDUCE_PROD = 1,
  TSR_REDUCE_MIN = 2,
  TSR_REDUCE_MAX = 3,
  TSR_REDUCE_AVG = 4,
  TSR_REDUCE_OP_COUNT = 5
} tsr_reduce_op;

/* ============================================================================================== */
/* Opaque handles                                                                                 */
/* ============================================================================================== */

typedef struct tsr_stream_s* tsr_stream; /* an in-order queue of work on one device */
typedef struct tsr_event_s* tsr_event;   /* a marker recorded on a stream */

/* An exported device allocation, small enough to send over any bootstrap channel. The contents are
 * backend-defined; the importer must use the same backend on the same host. */
#define TSR_IPC_HANDLE_BYTES 64
typedef struct tsr_ipc_handle {
  uint8_t bytes[TSR_IPC_HANDLE_BYTES];
} tsr_ipc_handle;

/* ============================================================================================== */
/* Host services given to the backend                                                             */
/* ============================================================================================== */

typedef enum tsr_log_level {
  TSR_LOG_ERROR = 0,
  TSR_LOG_WARN = 1,
  TSR_LOG_INFO = 2,
  TSR_LOG_DEBUG = 3,
  TSR_LOG_TRACE = 4
} tsr_log_level;

/* Called by the backend to log through Tessera's logger. Thread-safe. `message` is valid only for
 * the duration of the call. */
typedef void (*tsr_log_fn)(void* user_data, tsr_log_level level, const char* message);

/* Passed to tessera_backend_get_api_v1. A backend built against an older minor reads only the
 * fields that fit in its own sizeof; one built against a newer minor must check struct_size before
 * reading a field this version lacks. */
typedef struct tsr_host_info {
  size_t struct_size;  /* [in] sizeof(tsr_host_info) as the loader compiled it */
  uint32_t abi_major;  /* [in] the loader's TSR_BACKEND_ABI_MAJOR */
  uint32_t abi_minor;  /* [in] the loader's TSR_BACKEND_ABI_MINOR */
  tsr_log_fn log;      /* [in][optional] NULL: the backend stays silent */
  void* log_user_data; /* [in][optional] passed back to log */
  int32_t log_level;   /* [in] highest tsr_log_level the loader will print; skip work above it */
} tsr_host_info;

/* ============================================================================================== */
/* Device properties                                                                              */
/* ============================================================================================== */

/* Capability flags in tsr_device_properties.capabilities. */
#define TSR_CAP_UNIFIED_ADDRESSING (1ull << 0) /* device pointers are unique across devices */
#define TSR_CAP_HOST_REGISTER (1ull << 1)      /* host_register supported */
#define TSR_CAP_PEER_ACCESS (1ull << 2)        /* some peer can access this device's memory */
#define TSR_CAP_IPC (1ull << 3)                /* ipc_get_handle works on device memory */
#define TSR_CAP_EVENT_TIMING (1ull << 4)       /* event_elapsed_time supported */
#define TSR_CAP_HOST_ACCESSIBLE (1ull << 5)    /* device memory is directly readable by the CPU */
#define TSR_CAP_GEMM (1ull << 6)               /* gemm_async supported */
#define TSR_CAP_NATIVE_COLLECTIVES (1ull << 7) /* the collectives sub-table is usable */

typedef struct tsr_device_properties {
  size_t struct_size;    /* [in] set by the caller to sizeof(tsr_device_properties) */
  char name[128];        /* e.g. "NVIDIA H200", "host device 0"; NUL-terminated */
  char vendor[64];       /* e.g. "NVIDIA", "AMD", "Huawei", "Tessera" */
  uint8_t uuid[16];      /* stable device identity; all zero when unknown */
  char pci_bus_id[32];   /* "dddd:bb:dd.f", lower-case hex; empty when not a PCI device */
  uint64_t total_memory; /* bytes */
  int32_t compute_units; /* SMs, CUs, AI cores, CPU cores...; 0 when unknown */
  int32_t numa_node;     /* -1 when unknown */
  double peak_flops_f64; /* dense FLOP/s; 0 when unknown */
  double peak_flops_f32;
  double peak_flops_f16;
  double peak_flops_bf16;
  double memory_bandwidth; /* bytes/s, datasheet or measured; 0 when unknown */
  uint64_t capabilities;   /* TSR_CAP_* */
  /* ---- appended in minor 3 ---- */
  uint32_t module_formats; /* bit (1u << f) set for each tsr_module_format f module_load takes */
} tsr_device_properties;

/* ============================================================================================== */
/* Pointer attributes                                                                             */
/* ============================================================================================== */

typedef enum tsr_memory_type {
  TSR_MEMORY_UNKNOWN = 0,     /* not allocated or registered through this backend */
  TSR_MEMORY_HOST_PINNED = 1, /* host_malloc_pinned or host_register */
  TSR_MEMORY_DEVICE = 2,      /* device_malloc */
  TSR_MEMORY_DEVICE_IPC = 3   /* opened with ipc_open_handle */
} tsr_memory_type;

typedef struct tsr_pointer_attributes {
  size_t struct_size; /* [in] set by the caller */
  int32_t type;       /* tsr_memory_type */
  int32_t device;     /* owning device; -1 for host memory */
  void* base;         /* start of the allocation containing the pointer */
  size_t size;        /* bytes of that allocation */
} tsr_pointer_attributes;

/* ============================================================================================== */
/* Init options                                                                                   */
/* ============================================================================================== */

typedef struct tsr_init_options {
  size_t struct_size; /* [in] */
  /* [in][optional] "key=value;key=value" backend-specific options (the host backend reads
   * devices=N and memory=BYTES, which override its environment variables). NULL: none. */
  const char* options;
} tsr_init_options;

/* ============================================================================================== */
/* GEMM                                                                                           */
/* ============================================================================================== */

/* C = alpha * op(A) * op(B) + beta * C, column-major as in BLAS. op(A) is m x k, op(B) k x n. */
typedef struct tsr_gemm_desc {
  size_t struct_size;
  int32_t trans_a; /* 0: A as stored (m x k, lda >= m); 1: transposed (stored k x m, lda >= k) */
  int32_t trans_b;
  int64_t m, n, k;
  double alpha, beta;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  int32_t dtype_ab; /* tsr_dtype of A and B */
  int32_t dtype_c;  /* tsr_dtype of C; accumulation is at least f32 */
} tsr_gemm_desc;

/* ============================================================================================== */
/* Native collectives sub-table (optional)                                                        */
/* ============================================================================================== */

/* A backend whose vendor ships a collective library (NCCL, RCCL, HCCL, CNCL...) exposes it here.
 * Semantics follow NCCL: all calls are enqueued on the given stream; communicators are created
 * collectively from a unique id that rank 0 makes and the bootstrap distributes. */
typedef struct tsr_comm_s* tsr_comm;

#define TSR_COMM_UNIQUE_ID_BYTES 128
typedef struct tsr_comm_unique_id {
  uint8_t bytes[TSR_COMM_UNIQUE_ID_BYTES];
} tsr_comm_unique_id;

typedef struct tsr_collectives_api_v1 {
  size_t struct_size;
  const char* library; /* e.g. "NCCL 2.21.5" */
  tsr_status (*get_unique_id)(tsr_comm_unique_id* out_id);
  tsr_status (*comm_init_rank)(int32_t device, int32_t nranks, const tsr_comm_unique_id* id,
                               int32_t rank, tsr_comm* out_comm);
  tsr_status (*comm_destroy)(tsr_comm comm);
  tsr_status (*comm_abort)(tsr_comm comm); /* unblocks every pending operation; thread-safe */
  tsr_status (*comm_get_async_error)(tsr_comm comm); /* TSR_OK or the asynchronous failure */
  tsr_status (*allreduce)(const void* send, void* recv, size_t count, tsr_dtype dtype,
                          tsr_reduce_op op, tsr_comm comm, tsr_stream stream);
  tsr_status (*allgather)(const void* send, void* recv, size_t send_count, tsr_dtype dtype,
                          tsr_comm comm, tsr_stream stream);
  tsr_status (*reduce_scatter)(const void* send, void* recv, size_t recv_count, tsr_dtype dtype,
                               tsr_reduce_op op, tsr_comm comm, tsr_stream stream);
  tsr_status (*broadcast)(const void* send, void* recv, size_t count, tsr_dtype dtype, int32_t root,
                          tsr_comm comm, tsr_stream stream);
  tsr_status (*send)(const void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                     tsr_stream stream);
  tsr_status (*recv)(void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                     tsr_stream stream);
  tsr_status (*alltoall)(const void* send, void* recv, size_t count_per_peer, tsr_dtype dtype,
                         tsr_comm comm, tsr_stream stream);
  tsr_status (*group_start)(void);
  tsr_status (*group_end)(void);
} tsr_collectives_api_v1;

/* ============================================================================================== */
/* The backend table                                                                              */
/* ============================================================================================== */

/* Host callback run after all earlier work on the stream; `status` is TSR_OK or the stream's
 * failure. It must not call back into the stream it was enqueued on. */
typedef void (*tsr_host_fn)(void* user_data, tsr_status status);

/* The same, with the stream's failure message ("" when status is TSR_OK; valid only during the
 * call), so a callback can say what failed upstream, not only that something did. Minor 2. */
typedef void (*tsr_host_msg_fn)(void* user_data, tsr_status status, const char* message);

/* A host signal: a 64-bit counter, starting at 0, that the host raises and streams wait on (a
 * timeline semaphore, as IREE's). It lets an operation the host drives (a collective, a transfer
 * over the network) sit on a stream without holding any backend thread: the stream waits until
 * the host raises the counter to a value, then runs on. How vendor stacks provide it: CUDA and
 * HIP wait on a value in host-mapped memory (cuStreamWaitValue64 / hipStreamWaitValue64 with
 * GEQ, the host stores the value), Level Zero appends a wait on an event the host signals
 * (zeEventHostSignal, one event per value), Ascend waits on a notify/event the host records
 * (aclrtStreamWaitEvent on an event recorded by aclrtRecordEvent from a host-side stream).
 * Minor 2. */
typedef struct tsr_host_signal_s* tsr_host_signal;

/* ============================================================================================== */
/* Kernel modules (minor 3)                                                                       */
/* ============================================================================================== */

/* What module_load's image is. The shape every vendor runtime has: CUDA cuModuleLoadData +
 * cuModuleGetFunction + cuLaunchKernel, HIP hipModuleLoadData + hipModuleLaunchKernel, Level Zero
 * zeModuleCreate + zeKernelCreate + zeCommandListAppendLaunchKernel, Ascend aclrtBinaryLoad +
 * aclrtLaunchKernel, Cambricon cnrtInvokeKernel. Values are stable across versions. */
typedef enum tsr_module_format {
  TSR_MODULE_HOST_ELF = 1,     /* an ELF shared object for the host CPU exporting
                                * tessera_host_module_v1 (see tsr_host_module below) */
  TSR_MODULE_CUDA_CUBIN = 2,   /* a cubin or a fatbin (cuModuleLoadData takes either) */
  TSR_MODULE_CUDA_PTX = 3,     /* NUL-terminated PTX text, JIT-compiled by the driver */
  TSR_MODULE_HIP_CODE_OBJ = 4, /* an AMD code object or a HIP fat binary (hipModuleLoadData) */
  TSR_MODULE_SPIRV = 5,        /* a SPIR-V binary (zeModuleCreate with ZE_MODULE_FORMAT_IL_SPIRV) */
  TSR_MODULE_FORMAT_COUNT = 6  /* one past the last value; grows when formats are appended */
} tsr_module_format;

typedef struct tsr_module_s* tsr_module;     /* a loaded image, bound to one device */
typedef struct tsr_function_s* tsr_function; /* a kernel in a module; lives as long as it */

typedef struct tsr_dim3 {
  uint32_t x, y, z; /* each >= 1 */
} tsr_dim3;

typedef struct tsr_launch_config {
  size_t struct_size;    /* [in] sizeof(tsr_launch_config) */
  tsr_dim3 grid;         /* blocks per grid */
  tsr_dim3 block;        /* threads per block */
  uint32_t shared_bytes; /* dynamic shared (local) memory per block */
} tsr_launch_config;

/* One kernel argument: `size` bytes at `value`, copied before launch returns (as cuLaunchKernel's
 * kernelParams are). A device pointer argument is passed by the address of the pointer, with
 * size sizeof(void*). */
typedef struct tsr_kernel_arg {
  const void* value;
  size_t size;
} tsr_kernel_arg;

/* ---- the host format (TSR_MODULE_HOST_ELF) ----------------------------------------------------
 */

/* What a host kernel is called with: once per block, on a thread the backend chooses; blocks of
 * one launch may run concurrently and in any order (as on a GPU), and the launch completes, in
 * stream order, when every block has returned. `shared` is `shared_bytes` of scratch private to
 * the block. args[i] points at the i-th argument's bytes (a device pointer argument: at the
 * pointer). */
typedef struct tsr_host_kernel_call {
  size_t struct_size;
  tsr_dim3 grid;
  tsr_dim3 block;
  tsr_dim3 block_index;
  void* shared;
  uint32_t shared_bytes;
  const void* const* args;
  size_t arg_count;
} tsr_host_kernel_call;

/* Returns 0, or a non-zero code that fails the stream (sticky, as any failed enqueued work; the
 * host backend reports TSR_ABORTED naming the kernel, the module, the block and the code); the
 * kernel may set `message` (a static string) to say why.
 *
 * Device memory as the kernel sees it: where device pointers are not CPU-accessible (the host
 * backend's discrete mode, TESSERA_HOST_DEVICES=N:discrete), the backend rewrites each argument of
 * pointer size whose value lies inside one of its device allocations (or IPC mappings) to the
 * address of the same byte in the view it reaches device memory through. Pointers inside larger
 * arguments (structs) are not rewritten, as on a GPU, where a kernel sees the device addresses it
 * was given: pass device pointers as arguments of their own. */
typedef int (*tsr_host_kernel_fn)(const tsr_host_kernel_call* call, const char** message);

/* One kernel of a host module: its name, entry and the byte size of each argument, which launch
 * checks (count and sizes) before it enqueues anything. */
typedef struct tsr_host_kernel_desc {
  const char* name;
  tsr_host_kernel_fn fn;
  size_t arg_count;
  const size_t* arg_sizes; /* arg_count entries */
} tsr_host_kernel_desc;

typedef struct tsr_host_module {
  size_t struct_size;
  uint32_t abi_major; /* TSR_BACKEND_ABI_MAJOR */
  size_t kernel_count;
  const tsr_host_kernel_desc* kernels;
} tsr_host_module;

/* A host-format image exports this symbol (C linkage); the backend loads the image from memory
 * (memfd + dlopen), calls it once and keeps the table for the module's lifetime. */
#define TSR_HOST_MODULE_ENTRY_POINT "tessera_host_module_v1"
typedef const tsr_host_module* (*tsr_host_module_entry_fn)(void);

typedef struct tsr_backend_api_v1 {
  size_t struct_size;  /* sizeof(tsr_backend_api_v1) as the backend compiled it */
  uint32_t abi_major;  /* must equal TSR_BACKEND_ABI_MAJOR (1) */
  uint32_t abi_minor;  /* the minor the backend was built against */
  const char* name;    /* short name, e.g. "host", "cuda"; matches the library file name */
  const char* version; /* backend's own version and the vendor runtime's, free text */

  /* ---- lifecycle ------------------------------------------------------------------------- */

  /* [required] Brings the backend up. Reference counted: every successful init is paired with one
   * finalize, and only the first init reads `options` (may be NULL); later ones return TSR_OK.
   * Returns TSR_NO_DRIVER when the vendor runtime cannot be loaded, with the dynamic loader's
   * message in last_error. Thread-safe with respect to other init/finalize calls. */
  tsr_status (*init)(const tsr_init_options* options);
  /* [required] Drops one init reference; the last one releases everything the backend holds.
   * No other entry may run concurrently with the last finalize. */
  void (*finalize)(void);
  /* [required] The calling thread's last error message; "" when none. Valid until the next call
   * into the backend on that thread. Never NULL. */
  const char* (*last_error)(void);

  /* ---- devices --------------------------------------------------------------------------- */

  /* [required] Never fails: writes the number of usable devices (possibly 0). When it is 0 and
   * out_reason is not NULL, *out_reason says why (a static or backend-owned string). */
  int32_t (*device_count)(const char** out_reason);
  /* [required] Fills the fields of *out that fit in out->struct_size (the caller sets it). */
  tsr_status (*device_properties)(int32_t device, tsr_device_properties* out);

  /* ---- memory ---------------------------------------------------------------------------- */

  /* [required] Device allocation, aligned to at least 256 bytes. bytes == 0 yields NULL and OK.
   * TSR_RESOURCE_EXHAUSTED when the device's capacity would be exceeded. */
  tsr_status (*device_malloc)(int32_t device, size_t bytes, void** out_ptr);
  /* [required] ptr == NULL is a no-op. A pointer not from device_malloc: TSR_INVALID_ARGUMENT. */
  tsr_status (*device_free)(int32_t device, void* ptr);
  /* [required] Page-locked host memory usable for asynchronous copies. */
  tsr_status (*host_malloc_pinned)(size_t bytes, void** out_ptr);
  /* [required] */
  tsr_status (*host_free_pinned)(void* ptr);
  /* [optional] Pins existing host memory for asynchronous copies; unregister before freeing. */
  tsr_status (*host_register)(void* ptr, size_t bytes);
  /* [optional] */
  tsr_status (*host_unregister)(void* ptr);
  /* [required] Free and total bytes of device memory. Free memory counts what this process and
   * others may still allocate; a caching allocator reports memory it holds but does not use as
   * free only if it can hand it out (list the CTS memory-accounting test as xfail otherwise). */
  tsr_status (*memory_info)(int32_t device, size_t* out_free, size_t* out_total);
  /* [optional] What kind of memory `ptr` points into. Unknown pointers are not an error. */
  tsr_status (*pointer_attributes)(const void* ptr, tsr_pointer_attributes* out);

  /* ---- transfers (asynchronous, ordered on `stream`) ------------------------------------ */

  /* [required] Copies `bytes` between any two of host, pinned host and device memory of this
   * backend; the direction is inferred from the pointers. bytes == 0 is a no-op (pointers may be
   * NULL then). Pageable host memory may make the call synchronous. */
  tsr_status (*memcpy_async)(void* dst, const void* src, size_t bytes, tsr_stream stream);
  /* [required] Sets `bytes` bytes of device memory to (uint8_t)value. */
  tsr_status (*memset_async)(void* dst, int32_t value, size_t bytes, tsr_stream stream);
  /* [optional] Copy between two devices' memory, through the host when no peer path exists. */
  tsr_status (*memcpy_peer_async)(void* dst, int32_t dst_device, const void* src,
                                  int32_t src_device, size_t bytes, tsr_stream stream);

  /* ---- streams --------------------------------------------------------------------------- */

  /* [required] priority: 0 normal, negative higher (as CUDA). Unsupported priorities are clamped.
   */
  tsr_status (*stream_create)(int32_t device, int32_t priority, tsr_stream* out_stream);
  /* [required] Waits for pending work, then releases the stream. */
  tsr_status (*stream_destroy)(tsr_stream stream);
  /* [required] Blocks until all enqueued work is done; returns the first failure of that work. */
  tsr_status (*stream_synchronize)(tsr_stream stream);
  /* [required] TSR_OK when idle, TSR_NOT_READY when work is pending. */
  tsr_status (*stream_query)(tsr_stream stream);
  /* [required] Later work on `stream` waits until `event`'s recorded work completes. An event
   * never recorded is already complete. The event may belong to another stream or device. */
  tsr_status (*stream_wait_event)(tsr_stream stream, tsr_event event);
  /* [optional] Runs fn(user_data, status) on a backend thread after earlier work on the stream. */
  tsr_status (*stream_add_callback)(tsr_stream stream, tsr_host_fn fn, void* user_data);

  /* ---- events ---------------------------------------------------------------------------- */

#define TSR_EVENT_DISABLE_TIMING (1u << 0)
  /* [required] flags: TSR_EVENT_DISABLE_TIMING or 0. */
  tsr_status (*event_create)(int32_t device, uint32_t flags, tsr_event* out_event);
  /* [required] The event may still be pending; the backend releases it once it completes. */
  tsr_status (*event_destroy)(tsr_event event);
  /* [required] Captures the work enqueued on `stream` so far. Re-recording replaces the capture. */
  tsr_status (*event_record)(tsr_event event, tsr_stream stream);
  /* [required] Blocks until the captured work completes. */
  tsr_status (*event_synchronize)(tsr_event event);
  /* [required] TSR_OK when complete (or never recorded), TSR_NOT_READY otherwise. */
  tsr_status (*event_query)(tsr_event event);
  /* [optional] Milliseconds between two completed events. TSR_NOT_READY if either is pending;
   * TSR_FAILED_PRECONDITION if either was created with TSR_EVENT_DISABLE_TIMING or never
   * recorded. */
  tsr_status (*event_elapsed_time)(tsr_event start, tsr_event end, float* out_ms);

  /* ---- peer access and IPC --------------------------------------------------------------- */

  /* [optional] *out_can_access = 1 if `device` can read/write `peer`'s memory directly. */
  tsr_status (*device_can_access_peer)(int32_t device, int32_t peer, int32_t* out_can_access);
  /* [optional] Enables direct access from `device` to `peer`. Already enabled is OK. */
  tsr_status (*device_enable_peer_access)(int32_t device, int32_t peer);
  /* [optional] Exports a device allocation (ptr must be its base) to other processes on the host.
   * The exporter must keep the allocation alive while importers use it. */
  tsr_status (*ipc_get_handle)(void* device_ptr, tsr_ipc_handle* out_handle);
  /* [optional] Maps an exported allocation into this process on `device`. */
  tsr_status (*ipc_open_handle)(int32_t device, const tsr_ipc_handle* handle, void** out_ptr);
  /* [optional] Unmaps a pointer returned by ipc_open_handle. */
  tsr_status (*ipc_close_handle)(void* ptr);

  /* ---- compute the runtime needs -------------------------------------------------------- */

  /* [optional] dst[i] = op(srcs[0][i], ..., srcs[num_srcs-1][i]) for i < count, with the
   * semantics of tsr_reduce_op. 1 <= num_srcs <= 64. dst may alias any source exactly (in place).
   * The `srcs` array itself is copied before the call returns. num_srcs outside [1, 64], a dtype
   * or op outside the enums, or a NULL pointer with count > 0: TSR_INVALID_ARGUMENT. */
  tsr_status (*reduce_async)(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                             tsr_dtype dtype, tsr_reduce_op op, tsr_stream stream);
  /* [optional] Converts count elements; floats round to nearest even, float->int truncates
   * toward zero and saturates, NaN->int gives 0, int->int is modular (a C cast: two's complement
   * wrap). A dtype outside tsr_dtype is TSR_INVALID_ARGUMENT. */
  tsr_status (*cast_async)(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype,
                           size_t count, tsr_stream stream);
  /* [optional] The descriptor is copied before the call returns. A backend with GEMM supports at
   * least f64 x f64 -> f64 and f32/f16/bf16 inputs with an f32/f16/bf16 output; other pairs are
   * TSR_UNIMPLEMENTED, malformed descriptors (ld too small, trans not 0/1) TSR_INVALID_ARGUMENT. */
  tsr_status (*gemm_async)(const tsr_gemm_desc* desc, tsr_stream stream);

  /* ---- native collectives ---------------------------------------------------------------- */

  /* [optional] NULL when the backend has no collective library or it failed to load. */
  const tsr_collectives_api_v1* collectives;

  /* ---- appended in minor 1 --------------------------------------------------------------- */

  /* [optional] Occupies `stream` for `microseconds` microseconds, in order with its other work:
   * later work waits for it, as for a kernel that runs that long (a spin kernel on GPUs, a sleep
   * of the stream's worker on the host backend). Lets tests and benchmarks model accelerator
   * compute on machines without one. 0 is a no-op; more than 60 000 000 (one minute) is
   * TSR_INVALID_ARGUMENT. Absent (NULL or beyond struct_size) in tables before minor 1. */
  tsr_status (*stream_busy_wait)(tsr_stream stream, uint64_t microseconds);

  /* ---- appended in minor 2 --------------------------------------------------------------- */

  /* [optional] stream_add_callback whose function also receives the failure message of the
   * stream ("" when status is TSR_OK). Same ordering and thread rules as stream_add_callback. */
  tsr_status (*stream_add_callback_with_message)(tsr_stream stream, tsr_host_msg_fn fn,
                                                 void* user_data);

  /* [optional] Host signals: a backend provides all five entries or none (the loader treats a
   * partial set as none). The counter only grows. */
  /* Creates a signal whose counter is 0, usable by streams of `device`. */
  tsr_status (*host_signal_create)(int32_t device, tsr_host_signal* out_signal);
  /* Releases the signal. A stream still waiting on it never hangs: the wait either fails (sticky;
   * the host backend: TSR_CANCELLED) or is released, as the runtime allows (CUDA, HIP and Level
   * Zero cannot fail a stream from the host, so they release it). Callers raise the signal before
   * destroying it. */
  tsr_status (*host_signal_destroy)(tsr_host_signal signal);
  /* Raises the counter to max(counter, value) and wakes the streams whose wait it satisfies.
   * Never blocks; callable from any thread, including a host callback. */
  tsr_status (*host_signal_raise)(tsr_host_signal signal, uint64_t value);
  /* *out_value = the counter now. */
  tsr_status (*host_signal_query)(tsr_host_signal signal, uint64_t* out_value);
  /* Later work on `stream` waits until the counter is >= value (at once when it already is). The
   * wait holds the stream, never a host thread; it has no timeout: whoever enqueues it must raise
   * the signal, on failure too. A backend whose device compares signed 64-bit differences (CUDA,
   * HIP) refuses value > 2^63-1 with TSR_INVALID_ARGUMENT. */
  tsr_status (*stream_wait_host_signal)(tsr_stream stream, tsr_host_signal signal, uint64_t value);

  /* ---- appended in minor 3: kernel modules -------------------------------------------------- */

  /* [optional] A backend provides all four entries or none (the loader treats a partial set as
   * none). */
  /* Loads `image` (`image_bytes` bytes, copied before the call returns) of `format` onto `device`.
   * `name` [optional] names the image in messages (a file name). A format the device does not
   * take (see tsr_device_properties.module_formats) is TSR_UNIMPLEMENTED; an image the runtime
   * rejects is TSR_INVALID_ARGUMENT with the runtime's reason (JIT log, dlerror) and the name. */
  tsr_status (*module_load)(int32_t device, int32_t format, const void* image, size_t image_bytes,
                            const char* name, tsr_module* out_module);
  /* Unloads the module; its functions become invalid. Work already enqueued that uses it must
   * have completed (the caller synchronizes first), as with cuModuleUnload. (The host backend
   * keeps the image until its queued launches have run, but callers must not rely on that.) */
  tsr_status (*module_unload)(tsr_module module);
  /* The kernel called `name`; TSR_NOT_FOUND naming it and the module when there is none. */
  tsr_status (*module_get_function)(tsr_module module, const char* name,
                                    tsr_function* out_function);
  /* Enqueues the kernel on `stream` (a stream of the module's device, else
   * TSR_INVALID_ARGUMENT). Arguments are checked where the runtime can tell (the host format
   * always; CUDA from the function's parameter info): a wrong count or size is
   * TSR_INVALID_ARGUMENT naming the kernel and the argument, and nothing is enqueued. A zero grid
   * or block dimension, or a block or shared size beyond the device's limit, is
   * TSR_INVALID_ARGUMENT. */
  tsr_status (*launch)(tsr_stream stream, tsr_function function, const tsr_launch_config* config,
                       const tsr_kernel_arg* args, size_t arg_count);
} tsr_backend_api_v1;

/* The entry point each backend exports. Returns NULL only if the backend cannot serve this host
 * at all (it should still return a table and report problems through init). May be called more
 * than once (the conformance suite does); it returns the same table each time and the latest
 * host_info's log callback replaces the earlier one. */
typedef const tsr_backend_api_v1* (*tsr_get_api_v1_fn)(const tsr_host_info* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_HAL_BACKEND_ABI_H_ */
