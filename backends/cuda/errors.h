// Error reporting and logging: the thread-local last-error message behind
// tsr_backend_api_v1::last_error, the host's log callback, the mapping from runtime errors to
// tsr_status, and the exception firewall every C entry point runs its body inside.
#pragma once

#include <new>
#include <system_error>

#include "runtime_names.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::cuda {

// The table's name ("cuda", or the name a CUDA-compatible build was given), for messages.
extern const char* const kBackendName;

// Stores a printf-style message as the calling thread's last error and returns `status`. Never
// allocates or throws (fixed 1 KiB thread-local buffer). Thread-safe.
tsr_status fail(tsr_status status, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// The calling thread's last error, "" when none. Never NULL. Thread-safe.
const char* last_error_message() noexcept;

// The tsr_status for a runtime error code (rtErrorMemoryAllocation -> RESOURCE_EXHAUSTED, ...).
tsr_status status_of(rtError_t error) noexcept;

// Fails with status_of(error) and "<operation>: <call> failed: <runtime message> (<error name>)".
// Also clears the runtime's (non-sticky) last error so it does not surface in a later call.
tsr_status fail_runtime(rtError_t error, const char* operation, const char* call) noexcept;

// Runs a runtime call; on failure returns from the enclosing function with fail_runtime(). The
// call's name is spelled after macro expansion, so messages say mcMalloc on MetaX.
#define TSR_RT_CHECK(operation, fn, ...)                                               \
  do {                                                                                 \
    rtError_t tsr_rt_error_ = fn(__VA_ARGS__);                                         \
    if (tsr_rt_error_ != rtSuccess) {                                                  \
      return ::tessera::cuda::fail_runtime(tsr_rt_error_, operation, TSR_RT_NAME(fn)); \
    }                                                                                  \
  } while (0)

// Records the loader's log callback (only the fields inside host->struct_size). Not thread-safe
// against log(); called from tessera_backend_get_api_v1.
void set_host_info(const tsr_host_info* host) noexcept;
bool log_enabled(tsr_log_level level) noexcept;
void log(tsr_log_level level, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// Runs `body` and turns any C++ exception into a status: nothing unwinds through the C ABI.
template <typename Body>
tsr_status guarded(const char* operation, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TSR_RESOURCE_EXHAUSTED, "%s: out of host memory", operation);
  } catch (const std::exception& e) {
    return fail(TSR_INTERNAL, "%s: unexpected exception: %s", operation, e.what());
  } catch (...) {
    return fail(TSR_UNKNOWN, "%s: unexpected non-standard exception", operation);
  }
}

}  // namespace tessera::cuda
