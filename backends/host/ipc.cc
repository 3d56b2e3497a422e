// IPC handles. Device memory is a memfd (memory.cc), so exporting an allocation is describing
// the exporter's file descriptor: {pid, fd, inode}. An importer on the same host opens
// /proc/<pid>/fd/<fd>, checks that it is still the same file (the exporter may have freed the
// allocation and reused the descriptor number), and maps it MAP_SHARED. No broker process and no
// fd passing over a socket are needed; the kernel's ptrace-read check on /proc/<pid>/fd limits it
// to processes of the same user, as CUDA IPC is. In discrete mode the importer maps it as
// device_malloc does: a PROT_NONE view for the caller and a writable shadow for the backend.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "api.h"
#include "errors.h"
#include "state.h"

namespace tessera::host {
namespace {

constexpr uint32_t kMagic = 0x48525354;  // "TSRH" little-endian
constexpr uint16_t kVersion = 1;

// The layout of tsr_ipc_handle::bytes for this backend. Fixed-width fields only: the handle
// crosses processes (same host, same backend build family).
struct IpcHandleData {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  int32_t pid;           // exporting process
  int32_t fd;            // the allocation's memfd in that process
  uint64_t size;         // bytes the exporter allocated
  uint64_t mapped_size;  // page-rounded size of the memfd
  uint64_t offset;       // offset of the allocation in the file (0 today)
  uint64_t file_dev;     // identity of the memfd, checked by the importer
  uint64_t file_ino;
  int32_t device;  // exporter's device (informational)
  uint32_t reserved2;
};
static_assert(sizeof(IpcHandleData) <= TSR_IPC_HANDLE_BYTES, "IPC handle data must fit");

tsr_status open_exported_file(const IpcHandleData& data, int* out_fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", data.pid, data.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int error = errno;
    char proc[32];
    std::snprintf(proc, sizeof proc, "/proc/%d", data.pid);
    if (access(proc, F_OK) != 0) {
      return fail(TSR_NOT_FOUND,
                  "ipc_open_handle: the exporting process %d has exited (its allocations are "
                  "gone)",
                  data.pid);
    }
    if (error == ENOENT) {
      return fail(TSR_NOT_FOUND,
                  "ipc_open_handle: process %d no longer has the exported allocation open (freed "
                  "with device_free?)",
                  data.pid);
    }
    return fail(error == EACCES || error == EPERM ? TSR_PERMISSION_DENIED : TSR_UNAVAILABLE,
                "ipc_open_handle: cannot open %s: %s (importer and exporter must run as the same "
                "user on the same host)",
                path, std::strerror(error));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || uint64_t(info.st_dev) != data.file_dev ||
      uint64_t(info.st_ino) != data.file_ino) {
    close(fd);
    return fail(TSR_NOT_FOUND,
                "ipc_open_handle: fd %d of process %d no longer refers to the exported "
                "allocation (it was freed and the descriptor reused)",
                data.fd, data.pid);
  }
  if (uint64_t(info.st_size) < data.offset + data.mapped_size) {
    close(fd);
    return fail(TSR_DATA_LOSS, "ipc_open_handle: the exported file is %lld bytes, expected %llu",
                (long long)info.st_size, (unsigned long long)(data.offset + data.mapped_size));
  }
  *out_fd = fd;
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status ipc_get_handle(void* device_ptr, tsr_ipc_handle* out_handle) {
  static constexpr const char* kOp = "ipc_get_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (device_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: device_ptr is NULL", kOp);
    if (out_handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_handle is NULL", kOp);
    std::optional<Allocation> allocation = backend->memory.find(device_ptr);
    if (!allocation || allocation->kind != AllocationKind::kDevice ||
        allocation->base != device_ptr) {
      return fail(TSR_INVALID_ARGUMENT, "%s: %p is not the start of a device_malloc allocation%s",
                  kOp, device_ptr,
                  allocation && allocation->kind == AllocationKind::kIpc
                      ? " (memory opened from another process cannot be re-exported)"
                      : "");
    }
    IpcHandleData data{};
    data.magic = kMagic;
    data.version = kVersion;
    data.pid = int32_t(getpid());
    data.fd = allocation->fd;
    data.size = allocation->size;
    data.mapped_size = allocation->mapped_size;
    data.offset = 0;
    data.file_dev = uint64_t(allocation->file_dev);
    data.file_ino = uint64_t(allocation->file_ino);
    data.device = allocation->device;
    tsr_ipc_handle handle{};
    std::memcpy(handle.bytes, &data, sizeof data);
    *out_handle = handle;
    return TSR_OK;
  });
}

tsr_status ipc_open_handle(int32_t device, const tsr_ipc_handle* handle, void** out_ptr) {
  static constexpr const char* kOp = "ipc_open_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    Device* dev = nullptr;
    if (tsr_status s = lookup_device(*backend, kOp, device, &dev); s != TSR_OK) return s;
    if (handle == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: handle is NULL", kOp);
    if (out_ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: out_ptr is NULL", kOp);
    IpcHandleData data;
    std::memcpy(&data, handle->bytes, sizeof data);
    if (data.magic != kMagic || data.version != kVersion) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: not an IPC handle of the host backend (bad magic 0x%08x or version %u)", kOp,
                  data.magic, unsigned(data.version));
    }
    if (data.pid <= 0 || data.fd < 0 || data.size == 0 || data.mapped_size < data.size) {
      return fail(TSR_INVALID_ARGUMENT, "%s: corrupt IPC handle (pid %d, fd %d, size %llu)", kOp,
                  data.pid, data.fd, (unsigned long long)data.size);
    }
    int fd = -1;
    if (tsr_status s = open_exported_file(data, &fd); s != TSR_OK) return s;
    void* base = nullptr;
    void* shadow = nullptr;
    bool mapped = map_device_view(fd, size_t(data.mapped_size), off_t(data.offset),
                                  backend->config.discrete, &base, &shadow);
    int error = errno;
    close(fd);  // the mappings keep the memory alive
    if (!mapped) {
      return fail(error == ENOMEM ? TSR_RESOURCE_EXHAUSTED : TSR_INTERNAL,
                  "%s: mmap of %llu bytes failed: %s", kOp, (unsigned long long)data.mapped_size,
                  std::strerror(error));
    }
    Allocation allocation;
    allocation.base = base;
    allocation.shadow = shadow;
    allocation.size = data.size;
    allocation.mapped_size = data.mapped_size;
    allocation.kind = AllocationKind::kIpc;
    allocation.device = device;
    if (!backend->memory.insert(allocation)) {
      release_allocation(*backend, allocation);
      return fail(TSR_INTERNAL, "%s: new mapping overlaps a registered range", kOp);
    }
    *out_ptr = base;
    return TSR_OK;
  });
}

tsr_status ipc_close_handle(void* ptr) {
  static constexpr const char* kOp = "ipc_close_handle";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    if (ptr == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: ptr is NULL", kOp);
    std::optional<Allocation> taken = backend->memory.take(ptr, {AllocationKind::kIpc});
    if (!taken) {
      return fail(TSR_INVALID_ARGUMENT,
                  "%s: %p was not returned by ipc_open_handle (or is already "
                  "closed)",
                  kOp, ptr);
    }
    drain_streams(*backend);
    release_allocation(*backend, *taken);
    return TSR_OK;
  });
}

}  // namespace api
}  // namespace tessera::host
