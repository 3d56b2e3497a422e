// What the C entry points share: the structs behind the opaque handles, the thread-local last
// error, and `guarded`, which turns a C++ Status (or an escaping exception) into a tessera_status
// and a message that starts with the function's name.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tessera.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/common/status.h"
#include "tessera/hal/platform.h"
#include "tessera/overlap/grad_sync.h"

namespace tessera::capi {

// A magic number first in every handle: a handle of another kind, or one already destroyed
// (the field is cleared then), is refused with INVALID_ARGUMENT instead of being used.
enum class Magic : uint32_t {
  kDead = 0,
  kContext = 0x54534331,     // "TSC1"
  kGradSync = 0x54534731,    // "TSG1"
  kCheckpoint = 0x54534b31,  // "TSK1"
};

// Everything a rank owns. Shared by the handles made from the context, so destroying them in any
// order is safe. Members are destroyed in reverse order: the communicator before the platform.
struct ContextState {
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  std::string device_name;
  std::shared_ptr<coll::Bootstrap> bootstrap;
  std::shared_ptr<coll::Communicator> world;
  // tessera_device_alloc's buffers by pointer, and the stream tessera_memcpy copies on (created at
  // the first copy). Destroyed first, while the device lives.
  std::map<void*, hal::DeviceBuffer> allocations;
  std::optional<hal::Stream> copy_stream;
};

}  // namespace tessera::capi

struct tessera_context {
  tessera::capi::Magic magic = tessera::capi::Magic::kContext;
  std::shared_ptr<tessera::capi::ContextState> state;
};

struct tessera_grad_sync {
  tessera::capi::Magic magic = tessera::capi::Magic::kGradSync;
  std::shared_ptr<tessera::capi::ContextState> context;  // keeps the device and comm alive
  tessera::hal::Stream ready_stream;                     // idle: marks mean "ready now"
  std::unique_ptr<tessera::overlap::GradSync> engine;
};

struct tessera_checkpoint {
  tessera::capi::Magic magic = tessera::capi::Magic::kCheckpoint;
  std::shared_ptr<tessera::capi::ContextState> context;  // null for a single-rank checkpointer
  std::unique_ptr<tessera::ckpt::Checkpointer> checkpointer;
};

namespace tessera::capi {

// Records `status` as this thread's last error ("<function>: <message>") and returns its code;
// OK clears the last error.
tessera_status finish_call(std::string_view function, const Status& status);

// Runs `body` (returning Status) for C entry point `function`, catching what C++ may throw.
template <typename Body>
tessera_status guarded(std::string_view function, Body&& body) noexcept {
  try {
    return finish_call(function, std::forward<Body>(body)());
  } catch (const std::exception& e) {
    return finish_call(function, internal_error(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return finish_call(function, internal_error("unexpected exception"));
  }
}

// Argument checks; each returns INVALID_ARGUMENT naming the argument.
Status check_pointer(const void* pointer, std::string_view name);
Status check_dtype(tessera_dtype dtype, std::string_view name = "dtype");
Status check_reduce_op(tessera_reduce_op op, std::string_view name = "op");
// A handle: not NULL and of the right kind, still alive.
template <typename Handle>
Status check_handle(const Handle* handle, Magic magic, std::string_view name) {
  if (handle == nullptr) return invalid_argument(std::string(name) + " is NULL");
  if (handle->magic != magic) {
    return invalid_argument(std::string(name) + " is not a live handle of its type (destroyed?)");
  }
  return Status();
}
// options->struct_size must cover at least the first `min_size` bytes (the fields of 0.1).
Status check_struct_size(size_t struct_size, size_t min_size, std::string_view name);

hal::DType to_dtype(tessera_dtype dtype);
hal::ReduceOp to_reduce_op(tessera_reduce_op op);
tessera_status to_c(StatusCode code);

}  // namespace tessera::capi
