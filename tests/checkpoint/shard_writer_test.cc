// codec::ShardWriter, the one writer of shard files: with O_DIRECT (zero-copy stretches, the
// aligned stage, the padded tail cut back) and buffered, the file holds exactly the appended bytes
// at the offsets the locations name, and the file checksum is the digest of the chunk checksums.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "codec.h"
#include "support/test_util.h"

namespace tessera::ckpt {
namespace {

using testing::ScratchDir;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ShardWriterTest : public ::testing::TestWithParam<bool> {};

TEST_P(ShardWriterTest, TheFileHoldsExactlyTheAppendedBytesAtTheirLocations) {
  const bool direct = GetParam();
  ScratchDir dir(direct ? "writer_direct" : "writer_buffered");
  const std::string path = dir.path() + "/rank-00000.shard";
  auto writer = codec::ShardWriter::create(path, "step-1/rank-00000.shard", direct);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  std::printf("O_DIRECT asked %d, in use %d\n", direct, (*writer)->direct());

  // A page-aligned source: whole aligned stretches go out without a copy.
  constexpr size_t kBig = (4u << 20) + 4096 + 3;
  std::unique_ptr<char, decltype(&std::free)> aligned(
      static_cast<char*>(std::aligned_alloc(4096, (kBig + 4095) / 4096 * 4096)), &std::free);
  for (size_t i = 0; i < kBig; ++i) aligned.get()[i] = static_cast<char>(i * 7 + 1);
  std::vector<std::string_view> pieces = {
      std::string_view(aligned.get(), 4u << 20),  // aligned, at an aligned position
      std::string_view(aligned.get() + 1, 100),   // unaligned: into the stage
      std::string_view(aligned.get(), kBig),      // aligned but the stage is not empty
      std::string_view(aligned.get() + 5, 0),     // empty (an empty blob)
      std::string_view(aligned.get() + 9, 3),     // a tail
  };
  std::string expected;
  codec::FileDigest digest;
  for (std::string_view piece : pieces) {
    auto where = (*writer)->append(piece);
    ASSERT_TRUE(where.ok()) << where.status().to_string();
    EXPECT_EQ(where->offset, expected.size());
    EXPECT_EQ(where->stored, piece.size());
    EXPECT_EQ(where->checksum, codec::xxh3(piece.data(), piece.size()));
    digest.add_chunk(where->checksum);
    expected.append(piece);
  }
  // A checksum the caller vouches for is taken as it is.
  auto known = (*writer)->append(std::string_view(aligned.get(), 10), 42);
  ASSERT_TRUE(known.ok());
  EXPECT_EQ(known->checksum, 42u);
  digest.add_chunk(42);
  expected.append(aligned.get(), 10);

  auto record = (*writer)->finish(true);
  ASSERT_TRUE(record.ok()) << record.status().to_string();
  EXPECT_EQ(record->size, expected.size());
  EXPECT_EQ(record->checksum, digest.digest());
  EXPECT_EQ(std::filesystem::file_size(path), expected.size());
  EXPECT_TRUE(read_all(path) == expected) << "file content differs from the appended bytes";
  EXPECT_FALSE((*writer)->append("x").ok()) << "append after finish must fail";
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardWriterTest, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "Direct" : "Buffered"; });

TEST(ShardWriter, AMissingDirectoryIsNamed) {
  auto writer = codec::ShardWriter::create("/nonexistent-tessera-dir/x.shard", "x.shard", true);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/nonexistent-tessera-dir/x.shard"), std::string::npos)
      << writer.status().message();
}

}  // namespace
}  // namespace tessera::ckpt
