#include "errors.h"

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>

namespace tessera::cuda {
namespace {

constexpr size_t kMessageBytes = 1024;
// A fixed buffer, not std::string: fail() runs inside catch(std::bad_alloc).
thread_local char t_last_error[kMessageBytes] = {0};

std::atomic<tsr_log_fn> g_log_fn{nullptr};
std::atomic<void*> g_log_user_data{nullptr};
std::atomic<int32_t> g_log_level{-1};

}  // namespace

tsr_status fail(tsr_status status, const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_last_error, kMessageBytes, format, args);
  va_end(args);
  if (log_enabled(TSR_LOG_DEBUG)) log(TSR_LOG_DEBUG, "error %d: %s", int(status), t_last_error);
  return status;
}

const char* last_error_message() noexcept {
  return t_last_error;
}

tsr_status status_of(rtError_t error) noexcept {
  switch (error) {
    case rtSuccess: return TSR_OK;
    case rtErrorNotReady: return TSR_NOT_READY;
    case rtErrorInvalidValue:
    case rtErrorInvalidDevice:
    case rtErrorInvalidResourceHandle: return TSR_INVALID_ARGUMENT;
    case rtErrorMemoryAllocation: return TSR_RESOURCE_EXHAUSTED;
    case rtErrorNoDevice: return TSR_NO_DEVICE;
    case rtErrorInsufficientDriver: return TSR_VERSION_MISMATCH;
    case rtErrorNotSupported: return TSR_UNIMPLEMENTED;
    case rtErrorNotPermitted: return TSR_FAILED_PRECONDITION;
    case rtErrorHostMemoryAlreadyRegistered: return TSR_ALREADY_EXISTS;
    default: return TSR_INTERNAL;
  }
}

tsr_status fail_runtime(rtError_t error, const char* operation, const char* call) noexcept {
  (void)rtGetLastError();  // reset the runtime's last error; sticky errors stay regardless
  const char* text = rtGetErrorString(error);
  const char* name = rtGetErrorName(error);
  return fail(status_of(error), "%s: %s failed: %s (%s)", operation, call, text ? text : "?",
              name ? name : "?");
}

void set_host_info(const tsr_host_info* host) noexcept {
  constexpr size_t kLogEnd = offsetof(tsr_host_info, log) + sizeof(tsr_log_fn);
  constexpr size_t kUserEnd = offsetof(tsr_host_info, log_user_data) + sizeof(void*);
  constexpr size_t kLevelEnd = offsetof(tsr_host_info, log_level) + sizeof(int32_t);
  tsr_log_fn fn = nullptr;
  void* user = nullptr;
  int32_t level = TSR_LOG_WARN;
  if (host != nullptr) {
    if (host->struct_size >= kLogEnd) fn = host->log;
    if (host->struct_size >= kUserEnd) user = host->log_user_data;
    if (host->struct_size >= kLevelEnd) level = host->log_level;
  }
  g_log_user_data.store(user, std::memory_order_relaxed);
  g_log_level.store(fn ? level : -1, std::memory_order_relaxed);
  g_log_fn.store(fn, std::memory_order_release);
}

bool log_enabled(tsr_log_level level) noexcept {
  return g_log_fn.load(std::memory_order_acquire) != nullptr &&
         int32_t(level) <= g_log_level.load(std::memory_order_relaxed);
}

void log(tsr_log_level level, const char* format, ...) noexcept {
  tsr_log_fn fn = g_log_fn.load(std::memory_order_acquire);
  if (fn == nullptr || int32_t(level) > g_log_level.load(std::memory_order_relaxed)) return;
  char line[kMessageBytes + 64];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  fn(g_log_user_data.load(std::memory_order_relaxed), level, line);
}

}  // namespace tessera::cuda
