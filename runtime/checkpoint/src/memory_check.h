// What a registered pointer is, asked of the Checkpointer's device's backend (pointer_attributes),
// so that device memory is never handed to memcpy and a device tensor is never another device's.
#pragma once

#include <cstddef>
#include <string_view>

#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::ckpt {

// OK when the `bytes` at `data` lie inside one device allocation (or IPC mapping) of `device`.
// INVALID_ARGUMENT naming tensor `name`, the pointer, what it is and the device otherwise. When
// the backend cannot tell (no pointer_attributes entry) the pointer is taken on trust.
Status check_device_memory(const hal::Device& device, std::string_view name, const void* data,
                           size_t bytes);

// OK unless `data` is device memory of `device`'s backend that the CPU cannot read (a device
// without TSR_CAP_HOST_ACCESSIBLE): INVALID_ARGUMENT naming the tensor and the device.
Status check_host_memory(const hal::Device& device, std::string_view name, const void* data);

// True when `device`'s backend says `data` is its device memory (device_malloc or an IPC mapping).
bool is_device_memory(const hal::Device& device, const void* data);

}  // namespace tessera::ckpt
