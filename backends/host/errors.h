// Error reporting and logging for the host backend: the thread-local last-error message behind
// tsr_backend_api_v1::last_error, the host's log callback, and the exception firewall that every
// C entry point runs its body inside.
#pragma once

#include <new>
#include <system_error>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

// Stores a printf-style message as the calling thread's last error and returns `status`, so a
// failing path reads `return fail(TSR_INVALID_ARGUMENT, "...", ...)`. Never allocates, never
// throws (the message lives in a fixed thread-local buffer and is truncated at 1 KiB).
// Thread-safe: each thread has its own message.
tsr_status fail(tsr_status status, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// Same as fail() but copies a message that is already formatted.
tsr_status fail_with_message(tsr_status status, const char* message) noexcept;

// The calling thread's last error message, "" when none. Valid until the next fail() on this
// thread. Never NULL. Thread-safe.
const char* last_error_message() noexcept;

// Records the loader's log callback (only the fields that fit in host->struct_size). Called from
// tessera_backend_get_api_v1; host may be NULL (silence). Not thread-safe against log().
void set_host_info(const tsr_host_info* host) noexcept;

// True when a message at `level` would be printed by the host; lets callers skip formatting.
bool log_enabled(tsr_log_level level) noexcept;

// Formats and sends one line to the host's logger, prefixed by nothing (the loader adds the
// backend name). Thread-safe as long as the host's callback is.
void log(tsr_log_level level, const char* format, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// Runs `body` (returning tsr_status) and turns any C++ exception into a status, so nothing
// unwinds through the C ABI. `operation` names the entry point in the message.
template <typename Body>
tsr_status guarded(const char* operation, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TSR_RESOURCE_EXHAUSTED, "%s: out of host memory", operation);
  } catch (const std::system_error& e) {
    // std::thread reports EAGAIN when the process cannot have another thread.
    tsr_status status = e.code() == std::errc::resource_unavailable_try_again
                            ? TSR_RESOURCE_EXHAUSTED
                            : TSR_INTERNAL;
    return fail(status, "%s: %s", operation, e.what());
  } catch (const std::exception& e) {
    return fail(TSR_INTERNAL, "%s: unexpected exception: %s", operation, e.what());
  } catch (...) {
    return fail(TSR_UNKNOWN, "%s: unexpected non-standard exception", operation);
  }
}

}  // namespace tessera::host
