// What memory the overlap engine accepts, and the few blocking moves of small state between a
// device buffer and the host (codec state for the checkpointer). Internal.
//
// The engine hands every buffer to its device's stream operations (copies, memset, reduce, cast,
// GEMM) and to the communicator's stream API; it never dereferences one on the CPU. Only pinned
// staging buffers (hal::Device::allocate_host) are read and written by host code, in stream
// callbacks that wait for nothing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::overlap {

// OK when the `bytes` bytes at `ptr` may be given to `device`'s stream operations: device memory
// of `device` (an allocation of its backend on that device, or an IPC mapping there) within one
// allocation, or host memory when the device's memory is host-accessible
// (TSR_CAP_HOST_ACCESSIBLE, e.g. the host backend outside discrete mode). Otherwise
// INVALID_ARGUMENT naming `what`, what the pointer is and the device. Backends without
// pointer_attributes cannot be checked: everything passes. Thread-safe.
Status check_device_range(const hal::Device& device, const void* ptr, size_t bytes,
                          const std::string& what);

// Blocking moves between device memory and a host vector on `stream` (which must be idle of the
// engine's step work: the callers run between steps).
Status download(const hal::Stream& stream, const void* device_src, size_t count,
                std::vector<float>& out);
Status upload(const hal::Stream& stream, void* device_dst, const std::vector<float>& in);

}  // namespace tessera::overlap
