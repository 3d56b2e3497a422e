// Copies in every direction between pageable host, pinned host and device memory; memset; peer
// copies. Each copy lands inside a larger pre-filled buffer, so writes outside the destination
// range (overruns, off-by-one, wrong offset) are caught as well as wrong contents.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fixture.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Copy : public DeviceTest {};

enum class Kind { kHost, kPinned, kDevice };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kHost: return "pageable host";
    case Kind::kPinned: return "pinned host";
    default: return "device";
  }
}

// Larger than the chunks backends split copies into (staging buffers, DMA descriptors: a few MiB
// at most) and odd-sized, so a chunked copy's last partial chunk is checked. Every copy allocates
// and fills ~4x this much; at 64 MiB page faults alone made the copy tests half of every CTS run.
constexpr size_t kLarge = (16u << 20) + 7;
constexpr size_t kSlack = 16;  // bytes around the copied range that must stay untouched

// A buffer of one kind whose contents can be set and read from the host (device memory through
// blocking copies from pageable memory, the path the H2D/D2H tests check on their own).
class Buffer {
 public:
  ::testing::AssertionResult allocate(Kind kind, int32_t device, size_t bytes) {
    kind_ = kind;
    bytes_ = bytes;
    switch (kind) {
      case Kind::kHost: host_.assign(bytes, 0); return ::testing::AssertionSuccess();
      case Kind::kPinned:
        return status_is(TSR_OK, PinnedMemory::allocate(bytes, &pinned_), "host_malloc_pinned");
      default:
        return status_is(TSR_OK, DeviceMemory::allocate(device, bytes, &device_), "device_malloc");
    }
  }
  uint8_t* data() {
    switch (kind_) {
      case Kind::kHost: return host_.data();
      case Kind::kPinned: return pinned_.get();
      default: return device_.get();
    }
  }
  ::testing::AssertionResult write(const std::vector<uint8_t>& bytes, const OwnedStream& stream) {
    if (kind_ != Kind::kDevice) {
      std::memcpy(data(), bytes.data(), bytes.size());
      return ::testing::AssertionSuccess();
    }
    return copy_and_wait(data(), bytes.data(), bytes.size(), stream);
  }
  ::testing::AssertionResult read(std::vector<uint8_t>* out, const OwnedStream& stream) {
    out->assign(bytes_, 0);
    if (kind_ != Kind::kDevice) {
      std::memcpy(out->data(), data(), bytes_);
      return ::testing::AssertionSuccess();
    }
    return copy_and_wait(out->data(), data(), bytes_, stream);
  }

 private:
  Kind kind_ = Kind::kHost;
  size_t bytes_ = 0;
  std::vector<uint8_t> host_;
  PinnedMemory pinned_;
  DeviceMemory device_;
};

// Copies `bytes` from src+src_offset to dst+dst_offset and checks the whole destination buffer.
void check_copy(Kind src_kind, Kind dst_kind, size_t bytes, size_t src_offset, size_t dst_offset,
                const OwnedStream& stream) {
  SCOPED_TRACE(std::string(kind_name(src_kind)) + " -> " + kind_name(dst_kind) + ", " +
               std::to_string(bytes) + " bytes, offsets " + std::to_string(src_offset) + "/" +
               std::to_string(dst_offset));
  Buffer src;
  Buffer dst;
  ASSERT_TRUE(src.allocate(src_kind, 0, bytes + kSlack));
  ASSERT_TRUE(dst.allocate(dst_kind, 0, bytes + kSlack));
  const auto src_pattern = make_pattern(bytes + kSlack, 3);
  auto expected = make_pattern(bytes + kSlack, 4);
  ASSERT_TRUE(src.write(src_pattern, stream));
  ASSERT_TRUE(dst.write(expected, stream));
  CTS_ASSERT_OK(
      api().memcpy_async(dst.data() + dst_offset, src.data() + src_offset, bytes, stream.get()));
  CTS_ASSERT_OK(stream.synchronize());
  std::memcpy(expected.data() + dst_offset, src_pattern.data() + src_offset, bytes);
  std::vector<uint8_t> seen;
  ASSERT_TRUE(dst.read(&seen, stream));
  EXPECT_TRUE(same_bytes(expected.data(), seen.data(), expected.size()));
}

void check_direction(Kind src, Kind dst) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  for (size_t bytes : {size_t{1}, size_t{3}, size_t{4097}}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      check_copy(src, dst, bytes, offset, (offset * 3) % 8, stream);
    }
  }
  check_copy(src, dst, kLarge, 0, 0, stream);
  check_copy(src, dst, kLarge, 7, 1, stream);
}

TEST_F(Copy, CopiesHostToDevice) {
  check_direction(Kind::kHost, Kind::kDevice);
}
TEST_F(Copy, CopiesDeviceToHost) {
  check_direction(Kind::kDevice, Kind::kHost);
}
TEST_F(Copy, CopiesDeviceToDevice) {
  check_direction(Kind::kDevice, Kind::kDevice);
}
TEST_F(Copy, CopiesHostToHost) {
  check_direction(Kind::kHost, Kind::kHost);
}
TEST_F(Copy, CopiesPinnedHostToDevice) {
  check_direction(Kind::kPinned, Kind::kDevice);
}
TEST_F(Copy, CopiesDeviceToPinnedHost) {
  check_direction(Kind::kDevice, Kind::kPinned);
}
TEST_F(Copy, CopiesPinnedHostToPinnedHost) {
  check_direction(Kind::kPinned, Kind::kPinned);
}
TEST_F(Copy, CopiesHostToPinnedHost) {
  check_direction(Kind::kHost, Kind::kPinned);
}
TEST_F(Copy, CopiesPinnedHostToHost) {
  check_direction(Kind::kPinned, Kind::kHost);
}

TEST_F(Copy, TreatsAZeroByteCopyAsANoOp) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  CTS_EXPECT_OK(api().memcpy_async(nullptr, nullptr, 0, stream.get()));
  CTS_EXPECT_OK(api().memset_async(nullptr, 7, 0, stream.get()));
  for (Kind src : {Kind::kHost, Kind::kPinned, Kind::kDevice}) {
    for (Kind dst : {Kind::kHost, Kind::kPinned, Kind::kDevice}) {
      check_copy(src, dst, 0, 3, 5, stream);
    }
  }
  CTS_EXPECT_OK(stream.synchronize());
}

TEST_F(Copy, RejectsANullPointerWithANonZeroSize) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 64, &block));
  std::vector<uint8_t> host(64);
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().memcpy_async(nullptr, block.get(), 16, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().memcpy_async(block.get(), nullptr, 16, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().memcpy_async(host.data(), nullptr, 16, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().memset_async(nullptr, 0, 16, stream.get()));
  CTS_EXPECT_OK(stream.synchronize()) << "a refused call must not poison the stream";
}

TEST_F(Copy, SetsDeviceMemoryToTheLowByteOfTheValue) {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{4097}, size_t{(1 << 20) + 5}}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes at offset " + std::to_string(offset));
      Buffer dst;
      ASSERT_TRUE(dst.allocate(Kind::kDevice, 0, bytes + kSlack));
      auto expected = make_pattern(bytes + kSlack, 5);
      ASSERT_TRUE(dst.write(expected, stream));
      CTS_ASSERT_OK(api().memset_async(dst.data() + offset, 0x1ab, bytes, stream.get()));
      CTS_ASSERT_OK(stream.synchronize());
      std::memset(expected.data() + offset, 0xab, bytes);
      std::vector<uint8_t> seen;
      ASSERT_TRUE(dst.read(&seen, stream));
      ASSERT_TRUE(same_bytes(expected.data(), seen.data(), seen.size()));
    }
  }
}

CTS_TEST(Copy, CopiesBetweenDevicesWithPeerCopy, "memcpy_peer_async") {
  // With one device this copies within it, which must work as well.
  const int32_t a = 0;
  const int32_t b = context().device_count - 1;
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(a, &stream));
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    for (size_t bytes : {size_t{1}, size_t{4097}, kLarge}) {
      SCOPED_TRACE("device " + std::to_string(from) + " -> " + std::to_string(to) + ", " +
                   std::to_string(bytes) + " bytes");
      DeviceMemory src;
      DeviceMemory dst;
      CTS_ASSERT_OK(DeviceMemory::allocate(from, bytes + kSlack, &src));
      CTS_ASSERT_OK(DeviceMemory::allocate(to, bytes + kSlack, &dst));
      const auto src_pattern = make_pattern(bytes + kSlack, 6);
      auto expected = make_pattern(bytes + kSlack, 7);
      ASSERT_TRUE(copy_and_wait(src.get(), src_pattern.data(), src_pattern.size(), stream));
      ASSERT_TRUE(copy_and_wait(dst.get(), expected.data(), expected.size(), stream));
      CTS_ASSERT_OK(
          api().memcpy_peer_async(dst.get() + 1, to, src.get() + 3, from, bytes, stream.get()));
      CTS_ASSERT_OK(stream.synchronize());
      std::memcpy(expected.data() + 1, src_pattern.data() + 3, bytes);
      std::vector<uint8_t> seen(expected.size());
      ASSERT_TRUE(copy_and_wait(seen.data(), dst.get(), seen.size(), stream));
      EXPECT_TRUE(same_bytes(expected.data(), seen.data(), seen.size()));
    }
  }
}

CTS_TEST(Copy, AnswersPeerAccessForEveryPairOfDevices, "device_can_access_peer",
         "device_enable_peer_access") {
  const int32_t count = context().device_count;
  for (int32_t d = 0; d < count; ++d) {
    for (int32_t p = 0; p < count; ++p) {
      if (p == d) continue;
      SCOPED_TRACE("device " + std::to_string(d) + ", peer " + std::to_string(p));
      int32_t can = -1;
      CTS_ASSERT_OK(api().device_can_access_peer(d, p, &can));
      EXPECT_TRUE(can == 0 || can == 1) << "can_access is " << can;
      if (can == 1) {
        CTS_EXPECT_OK(api().device_enable_peer_access(d, p));
        CTS_EXPECT_OK(api().device_enable_peer_access(d, p)) << "already enabled is OK";
      }
    }
  }
  int32_t can = -1;
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_can_access_peer(0, count, &can));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().device_can_access_peer(-1, 0, &can));
  EXPECT_EQ(can, -1) << "outputs are written only on TSR_OK";
}

}  // namespace
}  // namespace tessera::cts
