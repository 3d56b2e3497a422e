// fakert's fake driver (fakert_runtime.h, fakecu*): the part of CUDA's driver API that the CUDA
// backend's host signals resolve with dlsym (backends/cuda/host_signal.cc). The wait is a stream
// item that polls the mapped word until (int64_t)(*word - value) >= 0, exactly the comparison
// CU_STREAM_WAIT_VALUE_GEQ makes, so a backend that let the word run past 2^63 - 1 would hang
// here as it would on a GPU.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fakert_internal.h"
#include "fakert_runtime.h"

using namespace fakert_internal;

namespace {

// CUresult values this fake returns.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr int kInvalidDevice = 101;  // CUDA_ERROR_INVALID_DEVICE
constexpr int kInvalidHandle = 400;  // CUDA_ERROR_INVALID_HANDLE
constexpr int kNotSupported = 801;   // CUDA_ERROR_NOT_SUPPORTED

bool mem_ops_disabled() {
  const char* text = std::getenv("FAKERT_NO_STREAM_MEM_OPS");
  return text != nullptr && std::strcmp(text, "1") == 0;
}

// The device polls; the fake polls with a growing sleep (up to 200 us) so a long wait costs
// little CPU. Nothing depends on the poll interval but latency.
void wait_until_geq(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t> ref(*word);
  auto pause = std::chrono::microseconds(1);
  while (int64_t(ref.load(std::memory_order_acquire) - value) < 0) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

// The driver's text for an image error, with the reason fakert_module.cc recorded for the calling
// thread's last refusal (a real driver keeps such detail in its JIT log).
const char* image_error_text(int result) {
  thread_local char text[640];
  const char* base = result == FAKECU_ERROR_INVALID_IMAGE
                         ? "device kernel image is invalid"
                         : "no kernel image is available for execution on the device";
  const char* reason = last_module_reason();
  std::snprintf(text, sizeof text, "%s%s%s", base, *reason ? ": " : "", reason);
  return text;
}

}  // namespace

extern "C" {

int fakecuStreamWaitValue64_v2(fakertStream_t stream, unsigned long long address,
                               unsigned long long value, unsigned int flags) {
  if (mem_ops_disabled()) return kNotSupported;
  if (stream == nullptr) return kInvalidHandle;  // the backend always names its stream
  if (flags != FAKECU_STREAM_WAIT_VALUE_GEQ || address % 8 != 0) return kInvalidValue;
  // Only a device address of mapped pinned memory is readable by the fake device.
  void* host = mapped_host_address(uintptr_t(address), sizeof(uint64_t));
  if (host == nullptr) return kInvalidValue;
  auto* word = static_cast<uint64_t*>(host);
  submit(stream, [word, value] { wait_until_geq(word, value); });
  return kSuccess;
}

int fakecuDeviceGet(int* device, int ordinal) {
  if (device == nullptr) return kInvalidValue;
  if (!valid_device(ordinal)) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

int fakecuDeviceGetAttribute(int* value, int attribute, int device) {
  if (value == nullptr) return kInvalidValue;
  if (!valid_device(device)) return kInvalidDevice;
  if (attribute != FAKECU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) return kInvalidValue;
  *value = mem_ops_disabled() ? 0 : 1;
  return kSuccess;
}

int fakecuGetErrorName(int result, const char** text) {
  if (text == nullptr) return kInvalidValue;
  switch (result) {
    case kSuccess: *text = "CUDA_SUCCESS"; return kSuccess;
    case kInvalidValue: *text = "CUDA_ERROR_INVALID_VALUE"; return kSuccess;
    case kInvalidDevice: *text = "CUDA_ERROR_INVALID_DEVICE"; return kSuccess;
    case kInvalidHandle: *text = "CUDA_ERROR_INVALID_HANDLE"; return kSuccess;
    case kNotSupported: *text = "CUDA_ERROR_NOT_SUPPORTED"; return kSuccess;
    case FAKECU_ERROR_INVALID_IMAGE: *text = "CUDA_ERROR_INVALID_IMAGE"; return kSuccess;
    case FAKECU_ERROR_NO_BINARY_FOR_GPU: *text = "CUDA_ERROR_NO_BINARY_FOR_GPU"; return kSuccess;
    case FAKECU_ERROR_INVALID_PTX: *text = "CUDA_ERROR_INVALID_PTX"; return kSuccess;
    case FAKECU_ERROR_NOT_FOUND: *text = "CUDA_ERROR_NOT_FOUND"; return kSuccess;
    case FAKECU_ERROR_LAUNCH_FAILED: *text = "CUDA_ERROR_LAUNCH_FAILED"; return kSuccess;
  }
  *text = nullptr;
  return kInvalidValue;
}

int fakecuGetErrorString(int result, const char** text) {
  if (text == nullptr) return kInvalidValue;
  switch (result) {
    case kSuccess: *text = "no error"; return kSuccess;
    case kInvalidValue: *text = "invalid argument"; return kSuccess;
    case kInvalidDevice: *text = "invalid device ordinal"; return kSuccess;
    case kInvalidHandle: *text = "invalid resource handle"; return kSuccess;
    case kNotSupported:
      *text = "operation not supported (FAKERT_NO_STREAM_MEM_OPS=1)";
      return kSuccess;
    case FAKECU_ERROR_INVALID_IMAGE:
    case FAKECU_ERROR_NO_BINARY_FOR_GPU: *text = image_error_text(result); return kSuccess;
    case FAKECU_ERROR_INVALID_PTX: *text = "a PTX JIT compilation failed"; return kSuccess;
    case FAKECU_ERROR_NOT_FOUND: *text = "named symbol not found"; return kSuccess;
    case FAKECU_ERROR_LAUNCH_FAILED: *text = "unspecified launch failure"; return kSuccess;
  }
  *text = nullptr;
  return kInvalidValue;
}

}  // extern "C"
