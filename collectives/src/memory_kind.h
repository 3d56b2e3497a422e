// Which memory a collective's buffers are, and which route moves them (docs/COLLECTIVES.md,
// "Memory"). The HAL knows which allocation a pointer belongs to (pointer_attributes); this file
// turns that into one decision per buffer and refuses memory the communicator must not touch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "algo/algo.h"
#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::coll {

// CommOptions::memory / TESSERA_COLL_MEMORY.
enum class MemoryMode : uint8_t {
  kAuto,    // classify each buffer (device memory of the communicator's device, or host memory)
  kHost,    // host memory only: device memory the CPU cannot address is refused
  kDevice,  // device memory of the communicator's device only: host memory is refused
};
Result<MemoryMode> parse_memory_mode(std::string_view text);  // "auto", "host", "device"
std::string_view memory_mode_name(MemoryMode mode);

// CommOptions::device_path / TESSERA_COLL_DEVICE_PATH: how device buffers move.
enum class DevicePath : uint8_t { kAuto, kNative, kStaged };
Result<DevicePath> parse_device_path(std::string_view text);  // "auto", "native", "staged"
std::string_view device_path_name(DevicePath path);

// The route one operation takes; chosen in one place (CommImpl::route_for).
enum class DeviceRoute : uint8_t {
  kHost,  // the CPU reads and writes the buffers itself (host memory, or addressable device memory)
  kStaged,  // device bytes move through the communicator's pinned buffers, in chunks
  kNative,  // the backend's collective library (tsr_collectives_api_v1) on the device buffers
};
std::string_view route_name(DeviceRoute route);

// The memory of the buffers of one call, after classification.
enum class BufferMemory : uint8_t {
  kHost,    // host memory (pageable, pinned or unknown to the backend): the CPU may touch it
  kDevice,  // device memory of the communicator's device
};

// The device buffers are checked against: the communicator's device, or the stream's device for
// a communicator created without one (which cannot stage, see `can_stage`).
struct MemoryTarget {
  std::shared_ptr<hal::Backend> backend;  // null: no device known, every buffer is host memory
  int32_t device = -1;
  std::string id;                // "host:0"
  bool host_accessible = false;  // TSR_CAP_HOST_ACCESSIBLE: the CPU may dereference its memory
  bool can_stage = false;        // the communicator owns this device (pinned buffers, streams)
  MemoryMode mode = MemoryMode::kAuto;
};

// The bytes one call touches per buffer on this rank (0: the buffer is not used here).
struct OpExtents {
  size_t send = 0;
  size_t recv = 0;
};
OpExtents op_extents(const OpDesc& d, int rank, int size);

// Classifies the buffers `d` uses on this rank. Refuses (INVALID_ARGUMENT naming the operation,
// the argument and the device): device memory of another device or backend; host memory under
// MemoryMode::kDevice; device memory the CPU cannot address under MemoryMode::kHost, or on a
// communicator without a device; a buffer that runs past the end of its device allocation; send
// and recv of different kinds. Thread-safe.
Result<BufferMemory> classify_buffers(const OpDesc& d, int rank, int size,
                                      const MemoryTarget& target);

}  // namespace tessera::coll
