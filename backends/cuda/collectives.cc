// The native-collectives sub-table over NCCL (or a stack's NCCL-compatible library: MCCL,
// SUCCL, ...), loaded with dlopen when the table is first built. When the library is absent the
// sub-table is NULL and Tessera's own collectives take over. Library names and symbol prefix come
// from CMake (TESSERA_CUDA_CCL_LIBRARY, TESSERA_CUDA_CCL_PREFIX); the handful of enum values
// used are NCCL's stable ABI, spelled out so no NCCL header is needed.
#include <dlfcn.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "api.h"
#include "errors.h"
#include "state.h"

#ifndef TESSERA_CUDA_CCL_LIBRARY
#define TESSERA_CUDA_CCL_LIBRARY ""
#endif
#ifndef TESSERA_CUDA_CCL_PREFIX
#define TESSERA_CUDA_CCL_PREFIX "nccl"
#endif

namespace tessera::cuda {
namespace {

struct UniqueId {
  char internal[TSR_COMM_UNIQUE_ID_BYTES];  // ncclUniqueId: 128 bytes, passed by value
};
using Raw = void*;  // ncclComm_t

struct Ccl {
  void* library = nullptr;
  char name[64] = "";
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*comm_init_rank)(Raw*, int, UniqueId, int) = nullptr;
  int (*comm_destroy)(Raw) = nullptr;
  int (*comm_abort)(Raw) = nullptr;
  int (*comm_get_async_error)(Raw, int*) = nullptr;
  int (*all_reduce)(const void*, void*, size_t, int, int, Raw, rtStream_t) = nullptr;
  int (*all_gather)(const void*, void*, size_t, int, Raw, rtStream_t) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, Raw, rtStream_t) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, Raw, rtStream_t) = nullptr;
  int (*send)(const void*, size_t, int, int, Raw, rtStream_t) = nullptr;
  int (*recv)(void*, size_t, int, int, Raw, rtStream_t) = nullptr;
  int (*all_to_all)(const void*, void*, size_t, int, Raw, rtStream_t) = nullptr;  // optional
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  const char* (*last_error)(Raw) = nullptr;  // optional
};

Ccl g_ccl;

struct Comm {
  Raw raw = nullptr;
  std::atomic<bool> aborted{false};  // the library freed `raw` in comm_abort
  int32_t device = 0;
  int32_t nranks = 0;
  int32_t rank = 0;
};

template <typename F>
bool bind(F* out, const char* suffix, bool required = true) {
  std::string name = std::string(TESSERA_CUDA_CCL_PREFIX) + suffix;
  *out = reinterpret_cast<F>(dlsym(g_ccl.library, name.c_str()));
  return *out != nullptr || !required;
}

bool load() {
  if (std::strlen(TESSERA_CUDA_CCL_LIBRARY) == 0) return false;
  g_ccl.library = dlopen(TESSERA_CUDA_CCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (g_ccl.library == nullptr) {
    const char* why = dlerror();
    log(TSR_LOG_INFO, "%s backend: no native collectives: %s", kBackendName, why ? why : "?");
    return false;
  }
  bool ok =
      bind(&g_ccl.get_unique_id, "GetUniqueId") && bind(&g_ccl.comm_init_rank, "CommInitRank") &&
      bind(&g_ccl.comm_destroy, "CommDestroy") && bind(&g_ccl.comm_abort, "CommAbort") &&
      bind(&g_ccl.comm_get_async_error, "CommGetAsyncError") &&
      bind(&g_ccl.all_reduce, "AllReduce") && bind(&g_ccl.all_gather, "AllGather") &&
      bind(&g_ccl.reduce_scatter, "ReduceScatter") && bind(&g_ccl.broadcast, "Broadcast") &&
      bind(&g_ccl.send, "Send") && bind(&g_ccl.recv, "Recv") &&
      bind(&g_ccl.group_start, "GroupStart") && bind(&g_ccl.group_end, "GroupEnd") &&
      bind(&g_ccl.error_string, "GetErrorString") && bind(&g_ccl.all_to_all, "AlltoAll", false) &&
      bind(&g_ccl.last_error, "GetLastError", false);
  if (!ok) {
    log(TSR_LOG_WARN, "%s backend: %s lacks a required symbol; native collectives disabled",
        kBackendName, TESSERA_CUDA_CCL_LIBRARY);
    dlclose(g_ccl.library);
    g_ccl.library = nullptr;
    return false;
  }
  int version = 0;
  int (*get_version)(int*) = nullptr;
  bind(&get_version, "GetVersion", false);
  if (get_version != nullptr) (void)get_version(&version);
  std::string upper = TESSERA_CUDA_CCL_PREFIX;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  std::snprintf(g_ccl.name, sizeof g_ccl.name, "%s %d.%d.%d", upper.c_str(), version / 10000,
                version % 10000 / 100, version % 100);
  return true;
}

int ccl_type(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return 7;
    case TSR_DTYPE_F16: return 6;
    case TSR_DTYPE_BF16: return 9;
    case TSR_DTYPE_F64: return 8;
    case TSR_DTYPE_I32: return 2;
    case TSR_DTYPE_I64: return 4;
    case TSR_DTYPE_U8: return 1;
    default: return -1;
  }
}

int ccl_op(tsr_reduce_op op) {
  switch (op) {
    case TSR_REDUCE_SUM: return 0;
    case TSR_REDUCE_PROD: return 1;
    case TSR_REDUCE_MAX: return 2;
    case TSR_REDUCE_MIN: return 3;
    case TSR_REDUCE_AVG: return 4;
    default: return -1;
  }
}

tsr_status check(int result, const char* operation, Raw comm = nullptr) {
  switch (result) {
    case 0: return TSR_OK;
    case 7: return TSR_OK;  // in progress: only for non-blocking communicators
    default: break;
  }
  const tsr_status status = result == 4                  ? TSR_INVALID_ARGUMENT
                            : result == 5                ? TSR_FAILED_PRECONDITION
                            : result == 2 || result == 6 ? TSR_UNAVAILABLE
                                                         : TSR_INTERNAL;
  const char* detail = comm && g_ccl.last_error ? g_ccl.last_error(comm) : "";
  return fail(status, "%s: %s: %s%s%s", operation, g_ccl.name, g_ccl.error_string(result),
              detail && detail[0] ? ": " : "", detail ? detail : "");
}

// The stream and the communicator behind an operation's arguments.
tsr_status prepare(const char* operation, tsr_comm comm, tsr_stream handle, tsr_dtype dtype,
                   Comm** out_comm, rtStream_t* out_stream, int* out_type) {
  Backend* backend = nullptr;
  if (tsr_status s = require_backend(operation, &backend); s != TSR_OK) return s;
  if (comm == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: comm is NULL", operation);
  std::shared_ptr<Stream> stream;
  if (tsr_status s = lookup_stream(*backend, operation, handle, &stream); s != TSR_OK) return s;
  *out_type = ccl_type(dtype);
  if (*out_type < 0) return fail(TSR_INVALID_ARGUMENT, "%s: unknown dtype %d", operation, dtype);
  *out_comm = reinterpret_cast<Comm*>(comm);
  *out_stream = stream->raw;  // the handle stays valid: destroying it waits for this work
  return TSR_OK;
}

#define TSR_CCL_PREPARE(op_name)                                                        \
  static constexpr const char* kOp = op_name;                                           \
  Comm* c;                                                                              \
  rtStream_t s;                                                                         \
  int type;                                                                             \
  if (tsr_status st = prepare(kOp, comm, stream, dtype, &c, &s, &type); st != TSR_OK) { \
    return st;                                                                          \
  }

tsr_status get_unique_id(tsr_comm_unique_id* out_id) {
  if (out_id == nullptr) return fail(TSR_INVALID_ARGUMENT, "get_unique_id: out_id is NULL");
  UniqueId id;
  if (tsr_status s = check(g_ccl.get_unique_id(&id), "get_unique_id"); s != TSR_OK) return s;
  std::memcpy(out_id->bytes, id.internal, sizeof id.internal);
  return TSR_OK;
}

tsr_status comm_init_rank(int32_t device, int32_t nranks, const tsr_comm_unique_id* id,
                          int32_t rank, tsr_comm* out_comm) {
  static constexpr const char* kOp = "comm_init_rank";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (tsr_status s = check_device(*backend, kOp, device); s != TSR_OK) return s;
    if (id == nullptr || out_comm == nullptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: id or out_comm is NULL", kOp);
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
      return fail(TSR_INVALID_ARGUMENT, "%s: rank %d of %d is out of range", kOp, rank, nranks);
    }
    UniqueId raw_id;
    std::memcpy(raw_id.internal, id->bytes, sizeof raw_id.internal);
    DeviceGuard guard;
    if (tsr_status s = guard.enter(kOp, device); s != TSR_OK) return s;
    auto comm = std::make_unique<Comm>();
    comm->device = device;
    comm->nranks = nranks;
    comm->rank = rank;
    if (tsr_status s = check(g_ccl.comm_init_rank(&comm->raw, nranks, raw_id, rank), kOp);
        s != TSR_OK) {
      return s;
    }
    *out_comm = reinterpret_cast<tsr_comm>(comm.release());
    return TSR_OK;
  });
}

tsr_status comm_destroy(tsr_comm comm) {
  if (comm == nullptr) return fail(TSR_INVALID_ARGUMENT, "comm_destroy: comm is NULL");
  std::unique_ptr<Comm> c(reinterpret_cast<Comm*>(comm));
  if (c->aborted.load()) return TSR_OK;  // comm_abort released it already
  DeviceGuard guard;
  if (tsr_status s = guard.enter("comm_destroy", c->device); s != TSR_OK) return s;
  return check(g_ccl.comm_destroy(c->raw), "comm_destroy");
}

tsr_status comm_abort(tsr_comm comm) {
  if (comm == nullptr) return fail(TSR_INVALID_ARGUMENT, "comm_abort: comm is NULL");
  // The handle stays valid until comm_destroy, which then only frees Tessera's wrapper.
  Comm* c = reinterpret_cast<Comm*>(comm);
  if (c->aborted.exchange(true)) return TSR_OK;
  return check(g_ccl.comm_abort(c->raw), "comm_abort");
}

tsr_status comm_get_async_error(tsr_comm comm) {
  if (comm == nullptr) return fail(TSR_INVALID_ARGUMENT, "comm_get_async_error: comm is NULL");
  Comm* c = reinterpret_cast<Comm*>(comm);
  // The library freed the communicator in comm_abort: asking it would read freed memory.
  if (c->aborted.load()) {
    return fail(TSR_ABORTED, "comm_get_async_error: %s: the communicator was aborted (comm_abort)",
                g_ccl.name);
  }
  int result = 0;
  if (tsr_status s = check(g_ccl.comm_get_async_error(c->raw, &result), "comm_get_async_error");
      s != TSR_OK) {
    return s;
  }
  return check(result, "comm_get_async_error (asynchronous failure)", c->raw);
}

tsr_status allreduce(const void* send, void* recv, size_t count, tsr_dtype dtype, tsr_reduce_op op,
                     tsr_comm comm, tsr_stream stream) {
  TSR_CCL_PREPARE("allreduce");
  if (ccl_op(op) < 0) return fail(TSR_INVALID_ARGUMENT, "%s: unknown operator %d", kOp, op);
  return check(g_ccl.all_reduce(send, recv, count, type, ccl_op(op), c->raw, s), kOp, c->raw);
}

tsr_status allgather(const void* send, void* recv, size_t send_count, tsr_dtype dtype,
                     tsr_comm comm, tsr_stream stream) {
  TSR_CCL_PREPARE("allgather");
  return check(g_ccl.all_gather(send, recv, send_count, type, c->raw, s), kOp, c->raw);
}

tsr_status reduce_scatter(const void* send, void* recv, size_t recv_count, tsr_dtype dtype,
                          tsr_reduce_op op, tsr_comm comm, tsr_stream stream) {
  TSR_CCL_PREPARE("reduce_scatter");
  if (ccl_op(op) < 0) return fail(TSR_INVALID_ARGUMENT, "%s: unknown operator %d", kOp, op);
  return check(g_ccl.reduce_scatter(send, recv, recv_count, type, ccl_op(op), c->raw, s), kOp,
               c->raw);
}

tsr_status broadcast(const void* send, void* recv, size_t count, tsr_dtype dtype, int32_t root,
                     tsr_comm comm, tsr_stream stream) {
  TSR_CCL_PREPARE("broadcast");
  return check(g_ccl.broadcast(send, recv, count, type, root, c->raw, s), kOp, c->raw);
}

tsr_status send(const void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                tsr_stream stream) {
  TSR_CCL_PREPARE("send");
  return check(g_ccl.send(buf, count, type, peer, c->raw, s), kOp, c->raw);
}

tsr_status recv(void* buf, size_t count, tsr_dtype dtype, int32_t peer, tsr_comm comm,
                tsr_stream stream) {
  TSR_CCL_PREPARE("recv");
  return check(g_ccl.recv(buf, count, type, peer, c->raw, s), kOp, c->raw);
}

tsr_status alltoall(const void* send_buf, void* recv_buf, size_t count, tsr_dtype dtype,
                    tsr_comm comm, tsr_stream stream) {
  TSR_CCL_PREPARE("alltoall");
  if (g_ccl.all_to_all != nullptr) {
    return check(g_ccl.all_to_all(send_buf, recv_buf, count, type, c->raw, s), kOp, c->raw);
  }
  // Older libraries: one grouped send/recv pair per peer.
  size_t bytes = 0;
  switch (dtype) {
    case TSR_DTYPE_U8: bytes = 1; break;
    case TSR_DTYPE_F16:
    case TSR_DTYPE_BF16: bytes = 2; break;
    case TSR_DTYPE_F32:
    case TSR_DTYPE_I32: bytes = 4; break;
    default: bytes = 8; break;
  }
  const size_t block = count * bytes;
  if (tsr_status st = check(g_ccl.group_start(), kOp); st != TSR_OK) return st;
  tsr_status first = TSR_OK;
  for (int32_t peer = 0; peer < c->nranks && first == TSR_OK; ++peer) {
    first = check(
        g_ccl.send(static_cast<const char*>(send_buf) + peer * block, count, type, peer, c->raw, s),
        kOp, c->raw);
    if (first == TSR_OK) {
      first = check(
          g_ccl.recv(static_cast<char*>(recv_buf) + peer * block, count, type, peer, c->raw, s),
          kOp, c->raw);
    }
  }
  tsr_status end = check(g_ccl.group_end(), kOp);
  return first != TSR_OK ? first : end;
}

tsr_status group_start() {
  return check(g_ccl.group_start(), "group_start");
}
tsr_status group_end() {
  return check(g_ccl.group_end(), "group_end");
}

const tsr_collectives_api_v1* build() {
  if (!load()) return nullptr;
  static tsr_collectives_api_v1 table{};
  table.struct_size = sizeof table;
  table.library = g_ccl.name;
  table.get_unique_id = &get_unique_id;
  table.comm_init_rank = &comm_init_rank;
  table.comm_destroy = &comm_destroy;
  table.comm_abort = &comm_abort;
  table.comm_get_async_error = &comm_get_async_error;
  table.allreduce = &allreduce;
  table.allgather = &allgather;
  table.reduce_scatter = &reduce_scatter;
  table.broadcast = &broadcast;
  table.send = &send;
  table.recv = &recv;
  table.alltoall = &alltoall;
  table.group_start = &group_start;
  table.group_end = &group_end;
  return &table;
}

}  // namespace

namespace api {
const tsr_collectives_api_v1* collectives() {
  static const tsr_collectives_api_v1* table = build();
  return table;
}
}  // namespace api
}  // namespace tessera::cuda
