// Helpers the test groups share: status assertions that print the backend's last_error, RAII
// owners of backend objects, and blocking copy helpers. Everything goes through api(), the table
// of the backend under test.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "context.h"

namespace tessera::cts {

// "INVALID_ARGUMENT" and so on.
std::string status_name(tsr_status status);

// Success when `actual == expected`; otherwise names the call, both codes and the backend's
// last_error (read right away, on the calling thread, as the ABI requires).
::testing::AssertionResult status_is(tsr_status expected, tsr_status actual, const char* call);

#define CTS_ASSERT_OK(call) ASSERT_TRUE(::tessera::cts::status_is(TSR_OK, (call), #call))
#define CTS_EXPECT_OK(call) EXPECT_TRUE(::tessera::cts::status_is(TSR_OK, (call), #call))
#define CTS_ASSERT_STATUS(expected, call) \
  ASSERT_TRUE(::tessera::cts::status_is((expected), (call), #call))
#define CTS_EXPECT_STATUS(expected, call) \
  EXPECT_TRUE(::tessera::cts::status_is((expected), (call), #call))

// Owns one device allocation; frees it (and checks the free) on destruction.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;

  static tsr_status allocate(int32_t device, size_t bytes, DeviceMemory* out);
  void reset();

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }
  int32_t device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int32_t device_ = 0;
};

// Owns a block of pinned host memory.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory() { reset(); }
  PinnedMemory(PinnedMemory&& other) noexcept { *this = std::move(other); }
  PinnedMemory& operator=(PinnedMemory&& other) noexcept;

  static tsr_status allocate(size_t bytes, PinnedMemory* out);
  void reset();

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns a stream; destroy waits for its work.
class OwnedStream {
 public:
  OwnedStream() = default;
  ~OwnedStream() { reset(); }
  OwnedStream(OwnedStream&& other) noexcept { *this = std::move(other); }
  OwnedStream& operator=(OwnedStream&& other) noexcept;

  static tsr_status create(int32_t device, OwnedStream* out, int32_t priority = 0);
  void reset();
  // Gives up ownership without destroying (the test destroyed it itself).
  tsr_stream release() { return std::exchange(stream_, nullptr); }

  tsr_stream get() const { return stream_; }
  tsr_status synchronize() const { return api().stream_synchronize(stream_); }

 private:
  tsr_stream stream_ = nullptr;
};

// Owns an event.
class OwnedEvent {
 public:
  OwnedEvent() = default;
  ~OwnedEvent() { reset(); }
  OwnedEvent(OwnedEvent&& other) noexcept { *this = std::move(other); }
  OwnedEvent& operator=(OwnedEvent&& other) noexcept;

  static tsr_status create(int32_t device, uint32_t flags, OwnedEvent* out);
  void reset();
  tsr_event release() { return std::exchange(event_, nullptr); }

  tsr_event get() const { return event_; }

 private:
  tsr_event event_ = nullptr;
};

// memcpy_async + stream_synchronize: a blocking copy in any direction.
::testing::AssertionResult copy_and_wait(void* dst, const void* src, size_t bytes,
                                         const OwnedStream& stream);

// Deterministic bytes that differ between neighbours and between salts, so a copy that drops,
// repeats or shifts bytes is caught.
std::vector<uint8_t> make_pattern(size_t bytes, uint32_t salt);

// Success when the two ranges are equal; otherwise the first differing offset and both values.
::testing::AssertionResult same_bytes(const uint8_t* expected, const uint8_t* actual, size_t bytes);

// Success when every byte is `value`.
::testing::AssertionResult all_bytes_are(const uint8_t* data, size_t bytes, uint8_t value);

}  // namespace tessera::cts
