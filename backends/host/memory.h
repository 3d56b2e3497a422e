// The allocation registry: every range of memory the host backend handed out or was told about
// (device allocations, pinned host memory, registered host memory, IPC mappings), so that
// pointers can be recognised (pointer_attributes), frees of foreign pointers refused, and copies
// that run past the end of an allocation rejected before they touch memory.
//
// In discrete mode (Config::discrete) a device allocation or IPC mapping is two mappings of one
// memfd: `base`, handed to the caller, is PROT_NONE (any CPU load or store faults, as a GPU
// pointer would), and `shadow`, never handed out, is readable and writable. Every entry that
// touches bytes translates the caller's pointers with resolve() when it enqueues the work.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

struct Backend;

enum class AllocationKind { kDevice, kPinned, kRegistered, kIpc };

struct Allocation {
  void* base = nullptr;    // the address the caller holds
  void* shadow = nullptr;  // where the backend reaches the bytes: base, or a second mapping
  size_t size = 0;         // bytes the caller asked for (what pointer_attributes reports)
  size_t mapped_size = 0;  // bytes actually mapped (page-rounded) for kDevice and kIpc
  AllocationKind kind = AllocationKind::kDevice;
  int32_t device = -1;  // owning device; for kIpc the device it was opened on; -1 for host
  int fd = -1;          // kDevice: the memfd backing the mapping (exported over IPC)
  bool locked = false;  // mlock succeeded (kPinned, kRegistered)
  // Identity of the memfd (kDevice), so an importer can tell the exporter's fd still refers to
  // the same allocation.
  dev_t file_dev = 0;
  ino_t file_ino = 0;
};

// All members are thread-safe (a shared_mutex: lookups from enqueue paths run concurrently).
class MemoryRegistry {
 public:
  // Adds `allocation`. False when it overlaps a registered range (nothing is added).
  bool insert(const Allocation& allocation);

  // The allocation containing `ptr`, if any.
  std::optional<Allocation> find(const void* ptr) const;

  // The device allocation or IPC mapping whose page-rounded mapping contains `ptr` past its
  // requested size (the tail of its last page), if any: such a pointer is not memory the caller
  // owns, and in discrete mode dereferencing it would fault.
  std::optional<Allocation> find_in_tail(const void* ptr) const;

  // Removes and returns the allocation whose base is exactly `base` and whose kind is one of
  // `kinds`. nullopt when there is none (and nothing is removed).
  std::optional<Allocation> take(const void* base, std::initializer_list<AllocationKind> kinds);

  // Records that the allocation at `base` was mlock'ed (so its release munlocks it).
  void mark_locked(const void* base);

  // Removes and returns everything (finalize).
  std::vector<Allocation> take_all();

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> by_base_;
};

const char* allocation_kind_name(AllocationKind kind);

// The one translation every entry that touches bytes goes through, at enqueue time. Rejects
// `bytes` at `ptr` when ptr lies inside a known allocation and the range runs past its end
// (TSR_INVALID_ARGUMENT naming `operation` and `param`), and sets *out to the address the backend
// reads or writes the bytes through: the shadow mapping for device memory in discrete mode, `ptr`
// itself otherwise (pinned, registered and pageable host memory, and every pointer outside
// discrete mode). With `device_only` (a kernel in discrete mode) anything but a device allocation
// or IPC mapping is refused, naming what the pointer is. In discrete mode a pointer into the
// unused tail of a device mapping's last page is refused too (it would fault). When `bytes` is 0
// nothing is checked and *out is `ptr`. Thread-safe.
tsr_status resolve(const MemoryRegistry& registry, const char* operation, const char* param,
                   const void* ptr, size_t bytes, bool device_only, void** out);

// Maps `bytes` of the memfd `fd` from `offset`, MAP_SHARED, as device memory: *base readable and
// writable and *shadow == *base; in discrete mode *base PROT_NONE and *shadow a second, writable
// mapping of the same pages. False (errno set, nothing left mapped) on failure.
bool map_device_view(int fd, size_t bytes, off_t offset, bool discrete, void** base, void** shadow);

// Releases the OS resources behind `allocation` (munmap of both mappings, close, free, munlock)
// and returns its capacity charge to its device. Callers must have drained the streams that might
// use it.
void release_allocation(Backend& backend, const Allocation& allocation);

}  // namespace tessera::host
