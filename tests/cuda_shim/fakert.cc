// The fake runtime behind fakert_runtime.h: CUDA runtime semantics over host memory. This file:
// errors, devices, memory; fakert_stream.cc: streams, events, copies. Device "memory" is aligned
// host memory with a per-device capacity. Small on purpose: it implements what backends/cuda
// calls and no more.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "fakert_internal.h"
#include "fakert_runtime.h"

using namespace fakert_internal;

namespace {

thread_local fakertError_t t_last_error = fakertSuccess;
thread_local int t_device = 0;

size_t env_size(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  return end && *end == '\0' ? size_t(value) : fallback;
}

// Read when fakertGetDeviceCount is called (a driver's enumeration), fixed until the next call.
std::atomic<int> g_device_count{1};
int device_count() {
  return g_device_count.load();
}
size_t capacity() {
  return env_size("FAKERT_DEVICE_MEMORY", size_t(2) << 30);
}

struct Block {
  size_t size;
  int device;           // -1: pinned host
  bool mapped = false;  // pinned host with fakertHostAllocMapped
};

struct State {
  std::mutex mutex;
  std::map<void*, Block> blocks;           // device and pinned allocations
  std::map<uintptr_t, size_t> registered;  // host_register ranges
  std::set<fakertStream_t> streams;        // live streams, for the implicit sync of Free
  size_t zombies = 0;                      // destroyed streams still running their work
  std::condition_variable zombies_done;
  std::set<std::pair<int, int>> peers;  // enabled peer access (device, peer)
  size_t used[64] = {};
};

State& state() {
  static State* s = new State;  // never destroyed: worker threads may outlive static teardown
  return *s;
}

}  // namespace

namespace fakert_internal {

fakertError_t set_error(fakertError_t error) {
  if (error != fakertSuccess && error != fakertErrorNotReady) t_last_error = error;
  return error;
}

int current_device() {
  return t_device;
}

bool valid_device(int device) {
  return device >= 0 && device < device_count();
}

void register_stream(fakertStream_t stream) {
  std::lock_guard lock(state().mutex);
  state().streams.insert(stream);
}

bool unregister_stream(fakertStream_t stream) {
  std::lock_guard lock(state().mutex);
  return state().streams.erase(stream) != 0;
}

void synchronize_all() {
  std::set<fakertStream_t> streams;
  {
    std::lock_guard lock(state().mutex);
    streams = state().streams;
  }
  for (fakertStream_t s : streams) s->synchronize();
  std::unique_lock lock(state().mutex);
  state().zombies_done.wait(lock, [] { return state().zombies == 0; });
}

void add_zombie() {
  std::lock_guard lock(state().mutex);
  ++state().zombies;
}

void remove_zombie() {
  {
    std::lock_guard lock(state().mutex);
    --state().zombies;
  }
  state().zombies_done.notify_all();
}

void* mapped_host_address(uintptr_t device_address, size_t bytes) {
  if ((device_address & kDeviceWindow) == 0) return nullptr;
  void* host = reinterpret_cast<void*>(device_address & ~kDeviceWindow);
  std::lock_guard lock(state().mutex);
  auto it = state().blocks.upper_bound(host);
  if (it == state().blocks.begin()) return nullptr;
  --it;
  const auto offset = uintptr_t(host) - uintptr_t(it->first);
  if (it->second.device >= 0 || !it->second.mapped || offset > it->second.size ||
      bytes > it->second.size - offset) {
    return nullptr;
  }
  return host;
}

fakertError_t submit(fakertStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    synchronize_all();
    work();
    return fakertSuccess;
  }
  stream->enqueue(std::move(work));
  return fakertSuccess;
}

}  // namespace fakert_internal

extern "C" {

const char* fakertGetErrorName(fakertError_t error) {
  switch (error) {
    case fakertSuccess: return "fakertSuccess";
    case fakertErrorInvalidValue: return "fakertErrorInvalidValue";
    case fakertErrorMemoryAllocation: return "fakertErrorMemoryAllocation";
    case fakertErrorInsufficientDriver: return "fakertErrorInsufficientDriver";
    case fakertErrorNoDevice: return "fakertErrorNoDevice";
    case fakertErrorInvalidDevice: return "fakertErrorInvalidDevice";
    case fakertErrorInvalidResourceHandle: return "fakertErrorInvalidResourceHandle";
    case fakertErrorNotReady: return "fakertErrorNotReady";
    case fakertErrorPeerAccessAlreadyEnabled: return "fakertErrorPeerAccessAlreadyEnabled";
    case fakertErrorLaunchFailure: return "fakertErrorLaunchFailure";
    case fakertErrorHostMemoryAlreadyRegistered: return "fakertErrorHostMemoryAlreadyRegistered";
    case fakertErrorNotPermitted: return "fakertErrorNotPermitted";
    case fakertErrorNotSupported: return "fakertErrorNotSupported";
  }
  return "fakertErrorUnknown";
}

const char* fakertGetErrorString(fakertError_t error) {
  switch (error) {
    case fakertSuccess: return "no error";
    case fakertErrorInvalidValue: return "invalid argument";
    case fakertErrorMemoryAllocation: return "out of memory";
    case fakertErrorInsufficientDriver: return "driver version is insufficient";
    case fakertErrorNoDevice: return "no fakert device is detected (FAKERT_DEVICES=0)";
    case fakertErrorInvalidDevice: return "invalid device ordinal";
    case fakertErrorInvalidResourceHandle: return "invalid resource handle";
    case fakertErrorNotReady: return "device not ready";
    case fakertErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case fakertErrorLaunchFailure: return "unspecified launch failure (a host kernel failed)";
    case fakertErrorHostMemoryAlreadyRegistered: return "host memory already registered";
    case fakertErrorNotPermitted: return "operation not permitted";
    case fakertErrorNotSupported: return "operation not supported by fakert";
  }
  return "unknown error";
}

fakertError_t fakertGetLastError(void) {
  fakertError_t error = t_last_error;
  t_last_error = fakertSuccess;
  return error;
}

fakertError_t fakertRuntimeGetVersion(int* version) {
  *version = 1000;
  return fakertSuccess;
}
fakertError_t fakertDriverGetVersion(int* version) {
  *version = 1000;
  return fakertSuccess;
}

fakertError_t fakertGetDeviceCount(int* count) {
  if (count == nullptr) return set_error(fakertErrorInvalidValue);
  g_device_count = int(std::min<size_t>(env_size("FAKERT_DEVICES", 1), 64));
  *count = device_count();
  return *count == 0 ? set_error(fakertErrorNoDevice) : fakertSuccess;
}

fakertError_t fakertGetDeviceProperties(fakertDeviceProp* prop, int device) {
  if (prop == nullptr) return set_error(fakertErrorInvalidValue);
  if (!valid_device(device)) return set_error(fakertErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "fakert device %d", device);
  for (int i = 0; i < 16; ++i) prop->uuid.bytes[i] = char(0xfa ^ (i * 17) ^ device);
  prop->totalGlobalMem = capacity();
  prop->multiProcessorCount = 4;
  prop->major = 1;
  prop->minor = 0;
  prop->pciDomainID = 0;
  prop->pciBusID = 0xfa;
  prop->pciDeviceID = device;
  prop->memoryBusWidth = 64;
  return fakertSuccess;
}

fakertError_t fakertDeviceGetAttribute(int* value, enum fakertDeviceAttr attr, int device) {
  if (value == nullptr) return set_error(fakertErrorInvalidValue);
  if (!valid_device(device)) return set_error(fakertErrorInvalidDevice);
  switch (attr) {
    case fakertDevAttrClockRate: *value = 1000000; return fakertSuccess;       // 1 GHz
    case fakertDevAttrMemoryClockRate: *value = 500000; return fakertSuccess;  // 500 MHz
    case fakertDevAttrMaxThreadsPerBlock: *value = 1024; return fakertSuccess;
    case fakertDevAttrMaxBlockDimX: *value = 1024; return fakertSuccess;
    case fakertDevAttrMaxBlockDimY: *value = 1024; return fakertSuccess;
    case fakertDevAttrMaxBlockDimZ: *value = 64; return fakertSuccess;
    case fakertDevAttrMaxGridDimX: *value = 0x7fffffff; return fakertSuccess;
    case fakertDevAttrMaxGridDimY: *value = 65535; return fakertSuccess;
    case fakertDevAttrMaxGridDimZ: *value = 65535; return fakertSuccess;
    case fakertDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; return fakertSuccess;
    case fakertDevAttrMaxSharedMemoryPerBlockOptin: *value = 96 << 10; return fakertSuccess;
  }
  return set_error(fakertErrorInvalidValue);
}

fakertError_t fakertGetDevice(int* device) {
  if (device == nullptr) return set_error(fakertErrorInvalidValue);
  *device = t_device;
  return fakertSuccess;
}

fakertError_t fakertSetDevice(int device) {
  if (!valid_device(device)) return set_error(fakertErrorInvalidDevice);
  t_device = device;
  return fakertSuccess;
}

fakertError_t fakertDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -1;
  return fakertSuccess;
}

fakertError_t fakertDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (can_access == nullptr) return set_error(fakertErrorInvalidValue);
  if (!valid_device(device) || !valid_device(peer)) return set_error(fakertErrorInvalidDevice);
  *can_access = device != peer ? 1 : 0;
  return fakertSuccess;
}

fakertError_t fakertDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (flags != 0) return set_error(fakertErrorInvalidValue);
  if (!valid_device(peer) || peer == t_device) return set_error(fakertErrorInvalidDevice);
  std::lock_guard lock(state().mutex);
  if (!state().peers.insert({t_device, peer}).second) {
    return set_error(fakertErrorPeerAccessAlreadyEnabled);
  }
  return fakertSuccess;
}

fakertError_t fakertMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return set_error(fakertErrorInvalidValue);
  const int device = t_device;
  const size_t rounded = bytes > SIZE_MAX - 255 ? 0 : (bytes + 255) / 256 * 256;
  std::lock_guard lock(state().mutex);
  if (rounded == 0 || rounded > capacity() - state().used[device]) {
    return set_error(fakertErrorMemoryAllocation);
  }
  void* block = std::aligned_alloc(256, rounded);
  if (block == nullptr) return set_error(fakertErrorMemoryAllocation);
  state().used[device] += rounded;
  state().blocks[block] = Block{rounded, device};
  *ptr = block;
  return fakertSuccess;
}

fakertError_t fakertFree(void* ptr) {
  if (ptr == nullptr) return fakertSuccess;
  synchronize_all();  // as cudaFree: queued work must not touch freed memory
  std::lock_guard lock(state().mutex);
  auto it = state().blocks.find(ptr);
  if (it == state().blocks.end() || it->second.device < 0) {
    return set_error(fakertErrorInvalidValue);
  }
  state().used[it->second.device] -= it->second.size;
  state().blocks.erase(it);
  std::free(ptr);
  return fakertSuccess;
}

fakertError_t fakertHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  if (ptr == nullptr || bytes == 0) return set_error(fakertErrorInvalidValue);
  if (flags & ~unsigned(fakertHostAllocPortable | fakertHostAllocMapped)) {
    return set_error(fakertErrorInvalidValue);
  }
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* block = std::aligned_alloc(4096, rounded);
  if (block == nullptr) return set_error(fakertErrorMemoryAllocation);
  std::lock_guard lock(state().mutex);
  state().blocks[block] = Block{rounded, -1, (flags & fakertHostAllocMapped) != 0};
  *ptr = block;
  return fakertSuccess;
}

fakertError_t fakertFreeHost(void* ptr) {
  if (ptr == nullptr) return fakertSuccess;
  synchronize_all();
  std::lock_guard lock(state().mutex);
  auto it = state().blocks.find(ptr);
  if (it == state().blocks.end() || it->second.device >= 0) {
    return set_error(fakertErrorInvalidValue);
  }
  state().blocks.erase(it);
  std::free(ptr);
  return fakertSuccess;
}

fakertError_t fakertHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags) {
  if (device_ptr == nullptr || host_ptr == nullptr || flags != 0) {
    return set_error(fakertErrorInvalidValue);
  }
  std::lock_guard lock(state().mutex);
  auto it = state().blocks.upper_bound(host_ptr);
  if (it == state().blocks.begin()) return set_error(fakertErrorInvalidValue);
  --it;
  const auto offset = uintptr_t(host_ptr) - uintptr_t(it->first);
  if (it->second.device >= 0 || !it->second.mapped || offset >= it->second.size) {
    return set_error(fakertErrorInvalidValue);  // only mapped pinned memory has a device address
  }
  *device_ptr = reinterpret_cast<void*>(uintptr_t(host_ptr) | kDeviceWindow);
  return fakertSuccess;
}

fakertError_t fakertHostRegister(void* ptr, size_t bytes, unsigned int) {
  if (ptr == nullptr || bytes == 0) return set_error(fakertErrorInvalidValue);
  std::lock_guard lock(state().mutex);
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  auto next = state().registered.lower_bound(begin);
  bool overlaps = next != state().registered.end() && next->first < begin + bytes;
  if (next != state().registered.begin()) {
    auto prev = std::prev(next);
    overlaps = overlaps || prev->first + prev->second > begin;
  }
  if (overlaps) return set_error(fakertErrorHostMemoryAlreadyRegistered);
  state().registered[begin] = bytes;
  return fakertSuccess;
}

fakertError_t fakertHostUnregister(void* ptr) {
  std::lock_guard lock(state().mutex);
  if (state().registered.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
    return set_error(fakertErrorInvalidValue);
  }
  return fakertSuccess;
}

fakertError_t fakertMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return set_error(fakertErrorInvalidValue);
  std::lock_guard lock(state().mutex);
  *total_bytes = capacity();
  *free_bytes = capacity() - state().used[t_device];
  return fakertSuccess;
}

fakertError_t fakertIpcGetMemHandle(fakertIpcMemHandle_t*, void*) {
  return set_error(fakertErrorNotSupported);
}
fakertError_t fakertIpcOpenMemHandle(void**, fakertIpcMemHandle_t, unsigned int) {
  return set_error(fakertErrorNotSupported);
}
fakertError_t fakertIpcCloseMemHandle(void*) {
  return set_error(fakertErrorNotSupported);
}

}  // extern "C"
