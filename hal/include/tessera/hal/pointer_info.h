// What a backend knows about a pointer (its pointer_attributes entry), asked in one place by every
// layer that must refuse memory it cannot use: the communicator (collectives), the overlap engine,
// the checkpointer and the C API. Each layer words its own refusal; the facts, the owner's name
// and the extent check are shared here so they cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::hal {

enum class PointerKind : uint8_t {
  kUnknown,     // not the backend's: pageable host memory, or another backend's memory
  kPinnedHost,  // host_malloc_pinned / host_register of this backend: the CPU may touch it
  kDevice,      // device_malloc of this backend
  kDeviceIpc,   // another process's device memory opened with ipc_open_handle
};

struct PointerInfo {
  PointerKind kind = PointerKind::kUnknown;
  int32_t device = -1;         // the owning device of the device kinds, else -1
  const void* base = nullptr;  // the allocation holding the pointer (null: not known)
  size_t size = 0;             // bytes of that allocation (0: not known)
  bool queried = false;        // false: the backend has no pointer_attributes, nothing is known

  bool is_device() const { return kind == PointerKind::kDevice || kind == PointerKind::kDeviceIpc; }
};

// Asks `backend` about `ptr`. A backend without pointer_attributes gives kUnknown with `queried`
// false (callers decide whether to trust the pointer); a failing query is the backend's status,
// with `operation` as its context.
Result<PointerInfo> pointer_info(const Backend& backend, const void* ptr,
                                 std::string_view operation = "pointer_attributes");

// "device memory of host:1", "an IPC mapping of device memory of cuda:0", "pinned host memory of
// the host backend", "memory the host backend does not know (pageable host memory, or another
// backend's)".
std::string describe_pointer(const PointerInfo& info, std::string_view backend);

// "0x7f..." as every refusal prints a pointer.
std::string pointer_text(const void* ptr);

// INVALID_ARGUMENT "<what>: <bytes> bytes at offset <o> run past the end of its <size>-byte
// allocation on <owner>" when [ptr, ptr + bytes) leaves the allocation `info` describes; OK when
// it fits or the allocation's extent is not known.
Status check_extent(const PointerInfo& info, const void* ptr, size_t bytes,
                    std::string_view backend, std::string_view what);

}  // namespace tessera::hal
