// The backend's process-wide state between the first init and the last finalize, and the small
// helpers every entry point uses to reach it and to validate common arguments.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "callback_thread.h"
#include "config.h"
#include "devices.h"
#include "event.h"
#include "handles.h"
#include "host_signal.h"
#include "memory.h"
#include "module.h"
#include "stream.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::host {

struct Backend {
  Config config;
  std::vector<std::unique_ptr<Device>> devices;
  MemoryRegistry memory;
  // callback_threads=1 only: the thread every host callback runs on. Declared before the streams
  // so it outlives any stream object (their workers are joined before it is destroyed).
  std::unique_ptr<CallbackThread> callback_thread;
  HandleTable<Stream> streams{kStreamTag};
  HandleTable<Event> events{kEventTag};
  HandleTable<HostSignal> host_signals{kHostSignalTag};
  // Kernel modules (module.h): a function holds its module, a queued launch its function.
  HandleTable<Module> modules{kModuleTag};
  HandleTable<Function> functions{kFunctionTag};
};

// The live backend, or NULL before the first init and after the last finalize. Thread-safe.
Backend* current_backend();

// Brings the backend up or adds a reference (see tsr_backend_api_v1::init). Thread-safe with
// respect to other init/finalize calls.
tsr_status backend_init(const tsr_init_options* options);
// Drops a reference; the last one joins every stream and releases every allocation.
void backend_finalize();

// Sets *out to the live backend, or fails with TSR_FAILED_PRECONDITION naming `operation`.
tsr_status require_backend(const char* operation, Backend** out);

// Sets *out to device `index`, or fails with TSR_INVALID_ARGUMENT naming the valid range.
tsr_status lookup_device(Backend& backend, const char* operation, int32_t index, Device** out);

// Copies the first min(out->struct_size, full_size) bytes of `full` into `out`, keeping
// out->struct_size: how a struct_size-versioned output is filled for an older or newer caller.
void copy_prefix(void* out, const void* full, size_t full_size);

}  // namespace tessera::host
