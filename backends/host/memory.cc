#include "memory.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api.h"
#include "config.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {
namespace {

size_t page_size() {
  static const size_t size = [] {
    long value = sysconf(_SC_PAGESIZE);
    return value > 0 ? size_t(value) : size_t(4096);
  }();
  return size;
}

bool round_up(size_t bytes, size_t to, size_t* out) {
  if (bytes > SIZE_MAX - (to - 1)) return false;
  *out = (bytes + to - 1) / to * to;
  return true;
}

tsr_status errno_status(int error) {
  switch (error) {
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case ENOSPC:
    case EAGAIN: return TSR_RESOURCE_EXHAUSTED;
    case EPERM:
    case EACCES: return TSR_PERMISSION_DENIED;
    default: return TSR_INTERNAL;
  }
}

// Device memory is a memfd mapped MAP_SHARED: ordinary host memory to this process (or, in
// discrete mode, a PROT_NONE view plus a private shadow view), and a file another process can map
// (ipc.cc) through /proc/<pid>/fd/<fd> without a broker.
tsr_status map_device_memory(int32_t device, size_t bytes, bool discrete, Allocation* out) {
  size_t mapped;
  if (!round_up(bytes, page_size(), &mapped)) {
    return fail(TSR_RESOURCE_EXHAUSTED, "device_malloc: %zu bytes is too large", bytes);
  }
  char name[48];
  std::snprintf(name, sizeof name, "tessera-host-device-%d", device);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    int error = errno;
    return fail(
        errno_status(error), "device_malloc: memfd_create failed: %s%s", std::strerror(error),
        error == EMFILE ? " (one file descriptor per device allocation; raise ulimit -n)" : "");
  }
  struct stat info;
  if (ftruncate(fd, off_t(mapped)) != 0 || fstat(fd, &info) != 0) {
    int error = errno;
    close(fd);
    return fail(errno_status(error), "device_malloc: sizing the memfd to %zu bytes failed: %s",
                mapped, std::strerror(error));
  }
  void* base = nullptr;
  void* shadow = nullptr;
  if (!map_device_view(fd, mapped, 0, discrete, &base, &shadow)) {
    int error = errno;
    close(fd);
    return fail(errno_status(error), "device_malloc: mmap of %zu bytes failed: %s", mapped,
                std::strerror(error));
  }
  out->base = base;
  out->shadow = shadow;
  out->size = bytes;
  out->mapped_size = mapped;
  out->kind = AllocationKind::kDevice;
  out->device = device;
  out->fd = fd;
  out->file_dev = info.st_dev;
  out->file_ino = info.st_ino;
  return TSR_OK;
}

// What a pointer a kernel refuses in discrete mode is, for the message.
const char* host_memory_name(AllocationKind kind) {
  return kind == AllocationKind::kPinned ? "pinned host memory" : "registered host memory";
}

}  // namespace

bool map_device_view(int fd, size_t bytes, off_t offset, bool discrete, void** base,
                     void** shadow) {
  void* writable = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
  if (writable == MAP_FAILED) return false;
  if (!discrete) {
    *base = *shadow = writable;
    return true;
  }
  // The caller's view: same pages, no access, so a CPU dereference faults as on a GPU pointer.
  void* fenced = mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, offset);
  if (fenced == MAP_FAILED) {
    int error = errno;
    munmap(writable, bytes);
    errno = error;
    return false;
  }
  *base = fenced;
  *shadow = writable;
  return true;
}

const char* allocation_kind_name(AllocationKind kind) {
  switch (kind) {
    case AllocationKind::kDevice: return "device allocation";
    case AllocationKind::kPinned: return "pinned host allocation";
    case AllocationKind::kRegistered: return "registered host range";
    case AllocationKind::kIpc: return "IPC mapping";
  }
  return "allocation";
}

bool MemoryRegistry::insert(const Allocation& allocation) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(allocation.base);
  uintptr_t end = begin + allocation.size;
  std::unique_lock lock(mutex_);
  auto next = by_base_.lower_bound(begin);
  if (next != by_base_.end() && next->first < end) return false;
  if (next != by_base_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > begin) return false;
  }
  by_base_.emplace(begin, allocation);
  return true;
}

std::optional<Allocation> MemoryRegistry::find(const void* ptr) const {
  uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  if (address - it->first >= it->second.size) return std::nullopt;
  return it->second;
}

std::optional<Allocation> MemoryRegistry::take(const void* base,
                                               std::initializer_list<AllocationKind> kinds) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it == by_base_.end()) return std::nullopt;
  for (AllocationKind kind : kinds) {
    if (it->second.kind == kind) {
      Allocation allocation = it->second;
      by_base_.erase(it);
      return allocation;
    }
  }
  return std::nullopt;
}

void MemoryRegistry::mark_locked(const void* base) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it != by_base_.end()) it->second.locked = true;
}

std::vector<Allocation> MemoryRegistry::take_all() {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> out;
  out.reserve(by_base_.size());
  for (auto& [base, allocation] : by_base_) out.push_back(allocation);
  by_base_.clear();
  return out;
}

std::optional<Allocation> MemoryRegistry::find_in_tail(const void* ptr) const {
  uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  const Allocation& allocation = it->second;
  if (allocation.kind != AllocationKind::kDevice && allocation.kind != AllocationKind::kIpc) {
    return std::nullopt;
  }
  uintptr_t offset = address - it->first;
  if (offset < allocation.size || offset >= allocation.mapped_size) return std::nullopt;
  return allocation;
}

tsr_status resolve(const MemoryRegistry& registry, const char* operation, const char* param,
                   const void* ptr, size_t bytes, bool device_only, void** out) {
  *out = const_cast<void*>(ptr);
  if (bytes == 0) return TSR_OK;
  std::optional<Allocation> allocation = registry.find(ptr);
  if (!allocation) {
    std::optional<Allocation> tail = registry.find_in_tail(ptr);
    if (tail && tail->shadow != tail->base) {
      return fail(
          TSR_INVALID_ARGUMENT,
          "%s: %s %p lies %zu bytes past the end of its %zu-byte %s (discrete device "
          "memory: the rest of the page is not the caller's)",
          operation, param, ptr,
          size_t(static_cast<const char*>(ptr) - static_cast<const char*>(tail->base)) - tail->size,
          tail->size, allocation_kind_name(tail->kind));
    }
    if (device_only) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: %s %p is host memory the backend does not know (pageable); in discrete "
                  "mode kernels take device memory only",
                  operation, param, ptr);
    }
    return TSR_OK;  // pageable host memory: the backend uses it as it is
  }
  size_t offset =
      size_t(static_cast<const char*>(ptr) - static_cast<const char*>(allocation->base));
  if (bytes > allocation->size - offset) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s range of %zu bytes at offset %zu runs past the end of its %zu-byte %s",
                operation, param, bytes, offset, allocation->size,
                allocation_kind_name(allocation->kind));
  }
  const bool device_memory =
      allocation->kind == AllocationKind::kDevice || allocation->kind == AllocationKind::kIpc;
  if (device_only && !device_memory) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s is %s; in discrete mode kernels take device memory only", operation, param,
                host_memory_name(allocation->kind));
  }
  *out = static_cast<char*>(allocation->shadow) + offset;
  return TSR_OK;
}

void release_allocation(Backend& backend, const Allocation& allocation) {
  switch (allocation.kind) {
    case AllocationKind::kDevice:
      munmap(allocation.base, allocation.mapped_size);
      if (allocation.shadow != allocation.base) munmap(allocation.shadow, allocation.mapped_size);
      close(allocation.fd);
      if (allocation.device >= 0 && size_t(allocation.device) < backend.devices.size()) {
        backend.devices[size_t(allocation.device)]->release(allocation.size);
      }
      break;
    case AllocationKind::kIpc:
      munmap(allocation.base, allocation.mapped_size);
      if (allocation.shadow != allocation.base) munmap(allocation.shadow, allocation.mapped_size);
      break;
    case AllocationKind::kPinned:
      if (allocation.locked) munlock(allocation.base, allocation.size);
      std::free(allocation.base);
      break;
    case AllocationKind::kRegistered:
      if (allocation.locked) munlock(allocation.base, allocation.size);
      break;
  }
}

namespace api {

tsr_status device_malloc(int32_t device, size_t bytes, void** out_ptr) {
  return guarded("device_malloc", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_malloc", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "device_malloc", device, &dev); s != TSR_OK) {
      return s;
    }
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "device_malloc: out_ptr is NULL");
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    if (tsr_status s = dev->reserve(bytes); s != TSR_OK) return s;
    Allocation allocation;
    if (tsr_status s = map_device_memory(device, bytes, backend->config.discrete, &allocation);
        s != TSR_OK) {
      dev->release(bytes);
      return s;
    }
    if (!backend->memory.insert(allocation)) {  // cannot happen: mmap returned fresh addresses
      release_allocation(*backend, allocation);
      return fail(TSR_INTERNAL, "device_malloc: new mapping overlaps a registered range");
    }
    *out_ptr = allocation.base;
    return TSR_OK;
  });
}

tsr_status device_free(int32_t device, void* ptr) {
  return guarded("device_free", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("device_free", &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, "device_free", device, &dev); s != TSR_OK) return s;
    if (ptr == nullptr) return TSR_OK;
    std::optional<Allocation> found = backend->memory.find(ptr);
    if (!found || found->kind != AllocationKind::kDevice || found->base != ptr) {
      return fail(TSR_INVALID_ARGUMENT, "device_free: %p was not returned by device_malloc (%s)",
                  ptr,
                  !found ? "unknown pointer, or already freed"
                         : (found->base != ptr ? "points inside an allocation, not at its start"
                                               : allocation_kind_name(found->kind)));
    }
    if (found->device != device) {
      return fail(TSR_INVALID_ARGUMENT, "device_free: %p belongs to device %d, not device %d", ptr,
                  found->device, device);
    }
    std::optional<Allocation> taken = backend->memory.take(ptr, {AllocationKind::kDevice});
    if (!taken) {
      return fail(TSR_INVALID_ARGUMENT, "device_free: %p was freed concurrently", ptr);
    }
    drain_streams(*backend);  // queued work may still read or write it
    release_allocation(*backend, *taken);
    return TSR_OK;
  });
}

tsr_status host_malloc_pinned(size_t bytes, void** out_ptr) {
  return guarded("host_malloc_pinned", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("host_malloc_pinned", &backend); s != TSR_OK) return s;
    if (out_ptr == nullptr)
      return fail(TSR_INVALID_ARGUMENT, "host_malloc_pinned: out_ptr is NULL");
    if (bytes == 0) {
      *out_ptr = nullptr;
      return TSR_OK;
    }
    void* base = nullptr;
    if (posix_memalign(&base, page_size(), bytes) != 0) {
      return fail(TSR_RESOURCE_EXHAUSTED, "host_malloc_pinned: cannot allocate %s",
                  format_bytes(bytes).c_str());
    }
    Allocation allocation;
    allocation.base = allocation.shadow = base;
    allocation.size = bytes;
    allocation.kind = AllocationKind::kPinned;
    // Best effort: locking needs RLIMIT_MEMLOCK headroom; unlocked memory works the same here.
    allocation.locked = mlock(base, bytes) == 0;
    if (!backend->memory.insert(allocation)) {
      release_allocation(*backend, allocation);
      return fail(TSR_INTERNAL, "host_malloc_pinned: new block overlaps a registered range");
    }
    *out_ptr = base;
    return TSR_OK;
  });
}

tsr_status host_free_pinned(void* ptr) {
  return guarded("host_free_pinned", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("host_free_pinned", &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return TSR_OK;
    std::optional<Allocation> taken = backend->memory.take(ptr, {AllocationKind::kPinned});
    if (!taken) {
      return fail(TSR_INVALID_ARGUMENT,
                  "host_free_pinned: %p was not returned by host_malloc_pinned (or is already "
                  "freed)",
                  ptr);
    }
    drain_streams(*backend);
    release_allocation(*backend, *taken);
    return TSR_OK;
  });
}

tsr_status host_register(void* ptr, size_t bytes) {
  return guarded("host_register", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("host_register", &backend); s != TSR_OK) return s;
    if (backend->config.discrete) {
      // A discrete device reaches host memory only through copies; registering would have to
      // make an arbitrary host range device memory, which a GPU without mapped host memory
      // cannot do either. TSR_CAP_HOST_REGISTER is off accordingly.
      return fail(TSR_UNIMPLEMENTED,
                  "host_register: not supported in discrete mode (TESSERA_HOST_DEVICES=N:discrete "
                  "or discrete=1): registered host memory is not device memory there; use "
                  "host_malloc_pinned for the host side of copies");
    }
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "host_register: ptr is NULL");
    if (bytes == 0) return fail(TSR_INVALID_ARGUMENT, "host_register: bytes is 0");
    if (reinterpret_cast<uintptr_t>(ptr) > UINTPTR_MAX - bytes) {
      return fail(TSR_INVALID_ARGUMENT, "host_register: %p + %zu bytes wraps around", ptr, bytes);
    }
    Allocation allocation;
    allocation.base = allocation.shadow = ptr;
    allocation.size = bytes;
    allocation.kind = AllocationKind::kRegistered;
    if (!backend->memory.insert(allocation)) {
      std::optional<Allocation> other = backend->memory.find(ptr);
      return fail(TSR_ALREADY_EXISTS,
                  "host_register: [%p, +%zu) overlaps memory the backend already knows (%s)", ptr,
                  bytes, other ? allocation_kind_name(other->kind) : "a registered range");
    }
    // mlock after insertion so a concurrent duplicate registration cannot double-lock. Best
    // effort, as for pinned allocations; the flag is only read on unregister.
    if (mlock(ptr, bytes) == 0) backend->memory.mark_locked(ptr);
    return TSR_OK;
  });
}

tsr_status host_unregister(void* ptr) {
  return guarded("host_unregister", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("host_unregister", &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "host_unregister: ptr is NULL");
    std::optional<Allocation> taken = backend->memory.take(ptr, {AllocationKind::kRegistered});
    if (!taken) {
      return fail(TSR_INVALID_ARGUMENT,
                  "host_unregister: %p is not the start of a range registered with host_register",
                  ptr);
    }
    release_allocation(*backend, *taken);
    return TSR_OK;
  });
}

tsr_status pointer_attributes(const void* ptr, tsr_pointer_attributes* out) {
  return guarded("pointer_attributes", [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend("pointer_attributes", &backend); s != TSR_OK) return s;
    if (out == nullptr) return fail(TSR_INVALID_ARGUMENT, "pointer_attributes: out is NULL");
    if (out->struct_size < sizeof(size_t)) {
      return fail(TSR_INVALID_ARGUMENT, "pointer_attributes: out->struct_size is %zu",
                  out->struct_size);
    }
    tsr_pointer_attributes full{};
    full.struct_size = sizeof full;
    full.type = TSR_MEMORY_UNKNOWN;
    full.device = -1;
    if (std::optional<Allocation> allocation = backend->memory.find(ptr)) {
      switch (allocation->kind) {
        case AllocationKind::kDevice: full.type = TSR_MEMORY_DEVICE; break;
        case AllocationKind::kIpc: full.type = TSR_MEMORY_DEVICE_IPC; break;
        case AllocationKind::kPinned:
        case AllocationKind::kRegistered: full.type = TSR_MEMORY_HOST_PINNED; break;
      }
      full.device = allocation->device;
      full.base = allocation->base;
      full.size = allocation->size;
    }
    copy_prefix(out, &full, sizeof full);
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::host
