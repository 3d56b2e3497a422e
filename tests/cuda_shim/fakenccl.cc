// fakenccl: a small fake of NCCL's C API under the prefix `fakenccl` (fakencclAllReduce, ...), for
// the fakert build of the CUDA backend (CMakeLists.txt: CCL_LIBRARY, CCL_PREFIX), so that the
// backend's NCCL adapter (backends/cuda/collectives.cc: dlopen, symbol binding, type and error
// mapping, grouped send/recv for alltoall) runs in CI without a GPU. NCCL's ABI is reproduced:
// ncclUniqueId is 128 bytes passed by value, result codes and data types are NCCL's numbers.
//
// Ranks are threads of one process over fakert's memory (plain host memory). Each operation is a
// host function on the caller's fakert stream; the k-th operation of every rank meets in one
// place, and the last rank to arrive does the whole operation for all of them. send is eager (the
// bytes are copied into a per-pair queue), so grouped or not, sends never deadlock; group calls
// only count their depth. fakencclCommAbort wakes every waiting rank; the other ranks'
// fakencclCommGetAsyncError then report ncclRemoteError.
//
// Fault injection for the adapter's error-mapping tests: FAKENCCL_FAIL=<Name>:<code> makes
// fakencclName return <code> (e.g. AllReduce:5), FAKENCCL_ASYNC_ERROR=<code> makes
// fakencclCommGetAsyncError report <code>. Both are read at every call.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "fakert_runtime.h"

namespace {

// NCCL's result codes and data types (nccl.h), by number.
enum Result {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};
enum Type { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat16, kFloat32, kFloat64, kBf16 };
enum Op { kSum, kProd, kMax, kMin, kAvg };

constexpr auto kInitTimeout = std::chrono::seconds(60);

struct UniqueId {
  char internal[128];
};

thread_local std::string t_last_error;

Result error(Result code, const std::string& why) {
  t_last_error = "fake NCCL: " + why;
  return code;
}

// FAKENCCL_FAIL=<name>:<code> for this entry: its code, else kSuccess.
Result injected(const char* name) {
  const char* env = std::getenv("FAKENCCL_FAIL");
  if (env == nullptr) return kSuccess;
  const char* colon = std::strchr(env, ':');
  if (colon == nullptr || size_t(colon - env) != std::strlen(name) ||
      std::strncmp(env, name, std::strlen(name)) != 0) {
    return kSuccess;
  }
  return error(static_cast<Result>(std::atoi(colon + 1)),
               std::string("failure injected into ") + name + " by FAKENCCL_FAIL");
}

size_t type_size(int type) {
  switch (type) {
    case kInt8:
    case kUint8: return 1;
    case kFloat16:
    case kBf16: return 2;
    case kInt32:
    case kUint32:
    case kFloat32: return 4;
    case kInt64:
    case kUint64:
    case kFloat64: return 8;
    default: return 0;
  }
}

// One rank's arguments to an operation.
struct Args {
  const char* send = nullptr;
  char* recv = nullptr;
};

// Where the k-th operation of every rank meets.
struct Meeting {
  std::vector<Args> args;
  int arrived = 0;
  int left = 0;
  bool done = false;
};

// What every rank of one communicator shares.
struct Clique {
  explicit Clique(int n) : nranks(n), joined(size_t(n), false), queues(size_t(n * n)) {}
  const int nranks;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<bool> joined;
  int joined_count = 0;
  bool aborted = false;
  std::map<uint64_t, Meeting> meetings;
  std::vector<std::deque<std::vector<char>>> queues;  // [src * n + dst]: sent messages
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  uint64_t next_operation = 0;  // issue order, on the calling thread
};

std::mutex g_registry_mutex;
std::map<std::string, std::weak_ptr<Clique>> g_registry;  // unique id -> the clique forming

template <typename T>
void reduce_typed(char* dst, const std::vector<const char*>& srcs, size_t count, int op) {
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, srcs[0] + i * sizeof(T), sizeof(T));
    for (size_t s = 1; s < srcs.size(); ++s) {
      T v;
      std::memcpy(&v, srcs[s] + i * sizeof(T), sizeof(T));
      switch (op) {
        case kProd: acc = T(acc * v); break;
        case kMax: acc = v > acc ? v : acc; break;
        case kMin: acc = v < acc ? v : acc; break;
        default: acc = T(acc + v); break;
      }
    }
    if (op == kAvg) acc = T(acc / T(srcs.size()));
    std::memcpy(dst + i * sizeof(T), &acc, sizeof(T));
  }
}

// Reduces `srcs` into a new buffer (sources may alias the destinations written later).
std::vector<char> reduce(const std::vector<const char*>& srcs, size_t count, int type, int op) {
  std::vector<char> out(count * type_size(type));
  switch (type) {
    case kInt8: reduce_typed<int8_t>(out.data(), srcs, count, op); break;
    case kUint8: reduce_typed<uint8_t>(out.data(), srcs, count, op); break;
    case kInt32: reduce_typed<int32_t>(out.data(), srcs, count, op); break;
    case kUint32: reduce_typed<uint32_t>(out.data(), srcs, count, op); break;
    case kInt64: reduce_typed<int64_t>(out.data(), srcs, count, op); break;
    case kUint64: reduce_typed<uint64_t>(out.data(), srcs, count, op); break;
    case kFloat32: reduce_typed<float>(out.data(), srcs, count, op); break;
    case kFloat64: reduce_typed<double>(out.data(), srcs, count, op); break;
    default: break;  // refused when the operation was issued
  }
  return out;
}

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

// One operation of one rank, run as a host function on its stream.
struct Task {
  std::shared_ptr<Clique> clique;
  int rank;
  uint64_t sequence;
  Kind kind;
  Args args;
  size_t count;
  int type;
  int op;
  int root;
};

// Done by the last rank to arrive, for every rank, with the clique's mutex held.
void perform(const Task& t, Meeting& m) {
  const int n = t.clique->nranks;
  const size_t e = type_size(t.type), block = t.count * e;
  std::vector<const char*> srcs;
  switch (t.kind) {
    case Kind::kAllReduce: {
      for (const Args& a : m.args) srcs.push_back(a.send);
      std::vector<char> sum = reduce(srcs, t.count, t.type, t.op);
      for (const Args& a : m.args) std::memcpy(a.recv, sum.data(), block);
      break;
    }
    case Kind::kReduceScatter: {
      std::vector<std::vector<char>> parts;
      for (int r = 0; r < n; ++r) {
        srcs.clear();
        for (const Args& a : m.args) srcs.push_back(a.send + size_t(r) * block);
        parts.push_back(reduce(srcs, t.count, t.type, t.op));
      }
      for (int r = 0; r < n; ++r)
        std::memcpy(m.args[size_t(r)].recv, parts[size_t(r)].data(), block);
      break;
    }
    case Kind::kAllGather: {
      std::vector<char> all(block * size_t(n));
      for (int r = 0; r < n; ++r)
        std::memcpy(all.data() + size_t(r) * block, m.args[size_t(r)].send, block);
      for (const Args& a : m.args) std::memcpy(a.recv, all.data(), all.size());
      break;
    }
    case Kind::kBroadcast: {
      std::vector<char> data(m.args[size_t(t.root)].send, m.args[size_t(t.root)].send + block);
      for (const Args& a : m.args) std::memcpy(a.recv, data.data(), block);
      break;
    }
  }
}

void run_task(void* user_data) {
  std::unique_ptr<Task> t(static_cast<Task*>(user_data));
  Clique& c = *t->clique;
  std::unique_lock lock(c.mutex);
  Meeting& m = c.meetings[t->sequence];
  if (m.args.empty()) m.args.resize(size_t(c.nranks));
  m.args[size_t(t->rank)] = t->args;
  if (++m.arrived == c.nranks) {
    perform(*t, m);
    m.done = true;
    c.cv.notify_all();
  }
  c.cv.wait(lock, [&] { return m.done || c.aborted; });
  if (++m.left == c.nranks) c.meetings.erase(t->sequence);
}

Result issue(Comm* comm, fakertStream_t stream, Kind kind, const void* send, void* recv,
             size_t count, int type, int op, int root, const char* name) {
  if (Result r = injected(name); r != kSuccess) return r;
  if (comm == nullptr) return error(kInvalidArgument, std::string(name) + ": comm is NULL");
  if (type_size(type) == 0 || type == kFloat16 || type == kBf16) {
    return error(kInvalidArgument, std::string(name) + ": data type " + std::to_string(type) +
                                       " is not modelled by the fake");
  }
  if (op < kSum || op > kAvg) return error(kInvalidArgument, std::string(name) + ": bad op");
  if (root < 0 || root >= comm->clique->nranks) {
    return error(kInvalidArgument, std::string(name) + ": root out of range");
  }
  auto* task = new Task{comm->clique,
                        comm->rank,
                        comm->next_operation++,
                        kind,
                        Args{static_cast<const char*>(send), static_cast<char*>(recv)},
                        count,
                        type,
                        op,
                        root};
  if (fakertLaunchHostFunc(stream, &run_task, task) != fakertSuccess) {
    delete task;
    return error(kUnhandledCudaError, std::string(name) + ": fakertLaunchHostFunc failed");
  }
  return kSuccess;
}

struct PointTask {
  std::shared_ptr<Clique> clique;
  int src, dst;
  const char* send;
  char* recv;
  size_t bytes;
};

void run_send(void* user_data) {
  std::unique_ptr<PointTask> t(static_cast<PointTask*>(user_data));
  Clique& c = *t->clique;
  std::lock_guard lock(c.mutex);
  c.queues[size_t(t->src * c.nranks + t->dst)].emplace_back(t->send, t->send + t->bytes);
  c.cv.notify_all();
}

void run_recv(void* user_data) {
  std::unique_ptr<PointTask> t(static_cast<PointTask*>(user_data));
  Clique& c = *t->clique;
  std::unique_lock lock(c.mutex);
  auto& queue = c.queues[size_t(t->src * c.nranks + t->dst)];
  c.cv.wait(lock, [&] { return !queue.empty() || c.aborted; });
  if (queue.empty()) return;
  std::memcpy(t->recv, queue.front().data(), std::min(t->bytes, queue.front().size()));
  queue.pop_front();
}

Result point(Comm* comm, fakertStream_t stream, bool sending, const void* send, void* recv,
             size_t count, int type, int peer, const char* name) {
  if (Result r = injected(name); r != kSuccess) return r;
  if (comm == nullptr) return error(kInvalidArgument, std::string(name) + ": comm is NULL");
  if (type_size(type) == 0) return error(kInvalidArgument, std::string(name) + ": bad type");
  if (peer < 0 || peer >= comm->clique->nranks) {
    return error(kInvalidArgument, std::string(name) + ": peer out of range");
  }
  auto* task = new PointTask{comm->clique,
                             sending ? comm->rank : peer,
                             sending ? peer : comm->rank,
                             static_cast<const char*>(send),
                             static_cast<char*>(recv),
                             count * type_size(type)};
  if (fakertLaunchHostFunc(stream, sending ? &run_send : &run_recv, task) != fakertSuccess) {
    delete task;
    return error(kUnhandledCudaError, std::string(name) + ": fakertLaunchHostFunc failed");
  }
  return kSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int fakencclGetVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  *version = 22105;  // reads as 2.21.5
  return kSuccess;
}

__attribute__((visibility("default"))) const char* fakencclGetErrorString(int result) {
  switch (result) {
    case kSuccess: return "no error";
    case kUnhandledCudaError: return "unhandled cuda error";
    case kSystemError: return "unhandled system error";
    case kInternalError: return "internal error";
    case kInvalidArgument: return "invalid argument";
    case kInvalidUsage: return "invalid usage";
    case kRemoteError: return "remote process exited or there was a network error";
    default: return "unknown result code";
  }
}

__attribute__((visibility("default"))) const char* fakencclGetLastError(void*) {
  return t_last_error.c_str();
}

__attribute__((visibility("default"))) int fakencclGetUniqueId(UniqueId* id) {
  if (Result r = injected("GetUniqueId"); r != kSuccess) return r;
  if (id == nullptr) return error(kInvalidArgument, "GetUniqueId: id is NULL");
  std::random_device device;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, "fakenccl", 8);
  for (size_t i = 8; i < 40; i += 4) {
    const uint32_t word = device();
    std::memcpy(id->internal + i, &word, 4);
  }
  return kSuccess;
}

__attribute__((visibility("default"))) int fakencclCommInitRank(Comm** out, int nranks, UniqueId id,
                                                                int rank) {
  if (Result r = injected("CommInitRank"); r != kSuccess) return r;
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return error(kInvalidArgument, "CommInitRank: bad rank, rank count or output");
  }
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard lock(g_registry_mutex);
    const std::string key(id.internal, sizeof id.internal);
    clique = g_registry[key].lock();
    if (clique == nullptr) {
      clique = std::make_shared<Clique>(nranks);
      g_registry[key] = clique;
    }
  }
  std::unique_lock lock(clique->mutex);
  if (clique->nranks != nranks || clique->joined[size_t(rank)]) {
    return error(kInvalidUsage, "CommInitRank: rank count differs between ranks or rank " +
                                    std::to_string(rank) + " joined twice");
  }
  clique->joined[size_t(rank)] = true;
  ++clique->joined_count;
  clique->cv.notify_all();
  if (!clique->cv.wait_for(lock, kInitTimeout, [&] { return clique->joined_count == nranks; })) {
    return error(kSystemError, "CommInitRank: not every rank joined within 60 s");
  }
  *out = new Comm{clique, rank, 0};
  return kSuccess;
}

__attribute__((visibility("default"))) int fakencclCommDestroy(Comm* comm) {
  if (Result r = injected("CommDestroy"); r != kSuccess) return r;
  delete comm;
  return kSuccess;
}

// As NCCL's: wakes every waiting operation of the communicator and frees it.
__attribute__((visibility("default"))) int fakencclCommAbort(Comm* comm) {
  if (Result r = injected("CommAbort"); r != kSuccess) return r;
  if (comm == nullptr) return kSuccess;
  {
    std::lock_guard lock(comm->clique->mutex);
    comm->clique->aborted = true;
  }
  comm->clique->cv.notify_all();
  delete comm;
  return kSuccess;
}

__attribute__((visibility("default"))) int fakencclCommGetAsyncError(Comm* comm, int* result) {
  if (Result r = injected("CommGetAsyncError"); r != kSuccess) return r;
  if (comm == nullptr || result == nullptr) return kInvalidArgument;
  *result = kSuccess;
  if (const char* env = std::getenv("FAKENCCL_ASYNC_ERROR"); env != nullptr) {
    *result = std::atoi(env);
    t_last_error = "fake NCCL: asynchronous failure injected by FAKENCCL_ASYNC_ERROR";
    return kSuccess;
  }
  std::lock_guard lock(comm->clique->mutex);
  if (comm->clique->aborted) {
    *result = kRemoteError;
    t_last_error = "fake NCCL: a peer aborted the communicator";
  }
  return kSuccess;
}

__attribute__((visibility("default"))) int fakencclAllReduce(const void* send, void* recv,
                                                             size_t count, int type, int op,
                                                             Comm* comm, fakertStream_t stream) {
  return issue(comm, stream, Kind::kAllReduce, send, recv, count, type, op, 0, "AllReduce");
}

__attribute__((visibility("default"))) int fakencclAllGather(const void* send, void* recv,
                                                             size_t count, int type, Comm* comm,
                                                             fakertStream_t stream) {
  return issue(comm, stream, Kind::kAllGather, send, recv, count, type, kSum, 0, "AllGather");
}

__attribute__((visibility("default"))) int fakencclReduceScatter(const void* send, void* recv,
                                                                 size_t count, int type, int op,
                                                                 Comm* comm,
                                                                 fakertStream_t stream) {
  return issue(comm, stream, Kind::kReduceScatter, send, recv, count, type, op, 0, "ReduceScatter");
}

__attribute__((visibility("default"))) int fakencclBroadcast(const void* send, void* recv,
                                                             size_t count, int type, int root,
                                                             Comm* comm, fakertStream_t stream) {
  return issue(comm, stream, Kind::kBroadcast, send, recv, count, type, kSum, root, "Broadcast");
}

__attribute__((visibility("default"))) int fakencclSend(const void* send, size_t count, int type,
                                                        int peer, Comm* comm,
                                                        fakertStream_t stream) {
  return point(comm, stream, true, send, nullptr, count, type, peer, "Send");
}

__attribute__((visibility("default"))) int fakencclRecv(void* recv, size_t count, int type,
                                                        int peer, Comm* comm,
                                                        fakertStream_t stream) {
  return point(comm, stream, false, nullptr, recv, count, type, peer, "Recv");
}

// Sends are eager, so a group needs no deferred launch: only its nesting is checked.
thread_local int t_group_depth = 0;

__attribute__((visibility("default"))) int fakencclGroupStart() {
  if (Result r = injected("GroupStart"); r != kSuccess) return r;
  ++t_group_depth;
  return kSuccess;
}

__attribute__((visibility("default"))) int fakencclGroupEnd() {
  if (Result r = injected("GroupEnd"); r != kSuccess) return r;
  if (t_group_depth == 0) return error(kInvalidUsage, "GroupEnd without GroupStart");
  --t_group_depth;
  return kSuccess;
}

}  // extern "C"
