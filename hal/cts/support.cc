#include "support.h"

#include <cstring>
#include <sstream>

#include "tessera/common/status.h"

namespace tessera::cts {

std::string status_name(tsr_status status) {
  return std::string(status_code_name(static_cast<StatusCode>(status))) + "(" +
         std::to_string(static_cast<int>(status)) + ")";
}

::testing::AssertionResult status_is(tsr_status expected, tsr_status actual, const char* call) {
  const char* detail = api().last_error ? api().last_error() : nullptr;
  if (actual == expected) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << call << " returned " << status_name(actual) << ", expected " << status_name(expected);
  if (detail == nullptr) {
    failure << "; last_error() returned NULL (it must never)";
  } else if (detail[0] != '\0') {
    failure << "; last_error: " << detail;
  }
  return failure;
}

// ---- DeviceMemory ------------------------------------------------------------------------------

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

tsr_status DeviceMemory::allocate(int32_t device, size_t bytes, DeviceMemory* out) {
  out->reset();
  void* ptr = nullptr;
  const tsr_status status = api().device_malloc(device, bytes, &ptr);
  if (status == TSR_OK) {
    out->ptr_ = ptr;
    out->bytes_ = bytes;
    out->device_ = device;
  }
  return status;
}

void DeviceMemory::reset() {
  if (ptr_ == nullptr) return;
  EXPECT_TRUE(status_is(TSR_OK, api().device_free(device_, ptr_), "device_free"));
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- PinnedMemory ------------------------------------------------------------------------------

PinnedMemory& PinnedMemory::operator=(PinnedMemory&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

tsr_status PinnedMemory::allocate(size_t bytes, PinnedMemory* out) {
  out->reset();
  void* ptr = nullptr;
  const tsr_status status = api().host_malloc_pinned(bytes, &ptr);
  if (status == TSR_OK) {
    out->ptr_ = ptr;
    out->bytes_ = bytes;
  }
  return status;
}

void PinnedMemory::reset() {
  if (ptr_ == nullptr) return;
  EXPECT_TRUE(status_is(TSR_OK, api().host_free_pinned(ptr_), "host_free_pinned"));
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- OwnedStream and OwnedEvent
// --------------------------------------------------------------------------

OwnedStream& OwnedStream::operator=(OwnedStream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

tsr_status OwnedStream::create(int32_t device, OwnedStream* out, int32_t priority) {
  out->reset();
  tsr_stream stream = nullptr;
  const tsr_status status = api().stream_create(device, priority, &stream);
  if (status == TSR_OK) out->stream_ = stream;
  return status;
}

void OwnedStream::reset() {
  if (stream_ == nullptr) return;
  EXPECT_TRUE(status_is(TSR_OK, api().stream_destroy(stream_), "stream_destroy"));
  stream_ = nullptr;
}

OwnedEvent& OwnedEvent::operator=(OwnedEvent&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

tsr_status OwnedEvent::create(int32_t device, uint32_t flags, OwnedEvent* out) {
  out->reset();
  tsr_event event = nullptr;
  const tsr_status status = api().event_create(device, flags, &event);
  if (status == TSR_OK) out->event_ = event;
  return status;
}

void OwnedEvent::reset() {
  if (event_ == nullptr) return;
  EXPECT_TRUE(status_is(TSR_OK, api().event_destroy(event_), "event_destroy"));
  event_ = nullptr;
}

// ---- copies and patterns -----------------------------------------------------------------------

::testing::AssertionResult copy_and_wait(void* dst, const void* src, size_t bytes,
                                         const OwnedStream& stream) {
  auto copied =
      status_is(TSR_OK, api().memcpy_async(dst, src, bytes, stream.get()), "memcpy_async");
  if (!copied) return copied;
  return status_is(TSR_OK, stream.synchronize(), "stream_synchronize after memcpy_async");
}

std::vector<uint8_t> make_pattern(size_t bytes, uint32_t salt) {
  std::vector<uint8_t> out(bytes);
  uint32_t state = 0x9e3779b9u * (salt + 1);
  for (size_t i = 0; i < bytes; ++i) {
    state = state * 1664525u + 1013904223u;  // LCG: cheap, varied, reproducible
    out[i] = static_cast<uint8_t>(state >> 24);
  }
  return out;
}

::testing::AssertionResult same_bytes(const uint8_t* expected, const uint8_t* actual,
                                      size_t bytes) {
  if (bytes == 0 || std::memcmp(expected, actual, bytes) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t i = 0;
  while (expected[i] == actual[i]) ++i;
  size_t wrong = 0;
  for (size_t j = i; j < bytes; ++j) wrong += expected[j] != actual[j];
  return ::testing::AssertionFailure()
         << "byte " << i << " of " << bytes << " is " << static_cast<int>(actual[i])
         << ", expected " << static_cast<int>(expected[i]) << " (" << wrong
         << " bytes differ in all)";
}

::testing::AssertionResult all_bytes_are(const uint8_t* data, size_t bytes, uint8_t value) {
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != value) {
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << bytes << " is " << static_cast<int>(data[i])
             << ", expected " << static_cast<int>(value);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::cts
