// A checkpoint directory is input: anyone can edit a manifest and recompute its checksum, replace
// a file by a symbolic link or a FIFO, or write a huge `latest`. Every such checkpoint is refused
// with an error naming the file and field, without touching files outside the directory, without
// allocating what the manifest claims before the files back it, and without blocking.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec.h"
#include "fs.h"
#include "support/model_state.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/checkpoint/reshard.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::ordered_json;
using testing::Layout;
using testing::ModelState;
using testing::ScratchDir;

class UntrustedInputTest : public ::testing::Test {
 public:
  void SetUp() override {
    CheckpointOptions o;
    o.dir = dir_.path();
    o.chunk_bytes = 1024;
    o.fsync = false;
    auto ck = std::move(Checkpointer::create(o, std::make_shared<SingleRankGroup>())).value();
    const Status saved = testing::save_two_steps(*ck);
    ASSERT_TRUE(saved.ok()) << saved.to_string();
  }
  // step-2's manifest as JSON, to edit and write back re-signed.
  Json manifest_json() const {
    return Json::parse(fs::read_file(dir_ / "step-2/manifest.json").value());
  }
  // What an adversary does after editing a manifest: recompute its checksum.
  static std::string resign(Json j) {
    j.erase("manifest_checksum");
    const std::string body = j.dump();
    j["manifest_checksum"] = hex64(codec::xxh3(body.data(), body.size()));
    return j.dump(1) + "\n";
  }
  void write_manifest(const Json& j) const {
    ASSERT_TRUE(fs::write_file(dir_ / "step-2/manifest.json", resign(j), false).ok());
  }
  Status parse(const Json& j) const { return parse_manifest(resign(j), "'m'").status(); }
  ScratchDir dir_{"untrusted"};
  ScratchDir outside_{"outside"};
};

#define EXPECT_REFUSED(status, want_code, needle)                            \
  do {                                                                       \
    const Status s_ = (status);                                              \
    EXPECT_EQ(s_.code(), want_code) << s_.to_string();                       \
    EXPECT_NE(s_.message().find(needle), std::string::npos) << s_.message(); \
  } while (0)

// --- paths -------------------------------------------------------------------------------------

TEST(PathInRoot, RefusesAbsoluteDotDotAndLinksLeadingOutsideAlikeWhetherTheTargetExists) {
  ScratchDir root("root"), out("out");
  std::filesystem::create_directories(root / "step-1");
  std::ofstream(out / "secret") << "secret";
  ASSERT_EQ(::symlink((out / "secret").c_str(), (root / "step-1/abs").c_str()), 0);
  ASSERT_EQ(::symlink((out / "missing").c_str(), (root / "step-1/abs_missing").c_str()), 0);
  const std::string up = "../../" + std::filesystem::path(out.path()).filename().string();
  ASSERT_EQ(::symlink((up + "/secret").c_str(), (root / "step-1/rel").c_str()), 0);
  ASSERT_EQ(::symlink((up + "/missing").c_str(), (root / "step-1/rel_missing").c_str()), 0);
  for (const char* name : {"/etc/passwd", "../x", "step-1/../../x", "step-1//x", "./latest"}) {
    EXPECT_REFUSED(fs::path_in_root(root.path(), name).status(), StatusCode::kDataLoss, name);
  }
  // The message is the same for an outside target that exists and one that does not.
  for (const auto& [exists, missing] : {std::pair{"step-1/abs", "step-1/abs_missing"},
                                        std::pair{"step-1/rel", "step-1/rel_missing"}}) {
    auto a = fs::path_in_root(root.path(), exists);
    auto b = fs::path_in_root(root.path(), missing);
    ASSERT_FALSE(a.ok());
    ASSERT_FALSE(b.ok());
    EXPECT_NE(a.status().message().find("outside the checkpoint directory"), std::string::npos)
        << a.status().message();
    std::string mb = b.status().message();
    mb.replace(mb.find(missing), std::string(missing).size(), exists);
    EXPECT_EQ(a.status().message(), mb);
  }
}

TEST(PathInRoot, FollowsLinksThatStayInside) {
  ScratchDir root("root");
  std::filesystem::create_directories(root / "real/sub");
  std::ofstream(root / "real/sub/f") << "x";
  ASSERT_EQ(::symlink("real", (root / "alias").c_str()), 0);
  ASSERT_EQ(::symlink("../real/sub", (root / "real/up").c_str()), 0);
  const std::string real = (std::filesystem::canonical(root.path()) / "real").string();
  ASSERT_EQ(::symlink(real.c_str(), (root / "abs").c_str()), 0);
  const std::string canon = std::filesystem::canonical(root / "real/sub/f").string();
  for (const char* name : {"alias/sub/f", "real/up/f", "alias/up/f", "abs/sub/f"}) {
    auto p = fs::path_in_root(root.path(), name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
    EXPECT_EQ(*p, canon) << name;
  }
}

TEST_F(UntrustedInputTest, AManifestFileNameWithDotDotIsRefusedByName) {
  Json j = manifest_json();
  j["files"][0]["name"] = "../outside.shard";
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "'../outside.shard' has a '..' component");
  j = manifest_json();
  j["tensors"][0]["shards"][0]["chunks"][0]["data"]["file"] = "/etc/passwd";
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "'/etc/passwd' is absolute");
}

// A shard replaced by a link to an intact copy outside the directory: reading it would verify.
TEST_F(UntrustedInputTest, AShardLinkedToAFileOutsideIsNotRead) {
  const std::string shard = dir_ / "step-2/rank-00000.shard";
  std::filesystem::copy_file(shard, outside_ / "copy.shard");
  std::filesystem::remove(shard);
  ASSERT_EQ(::symlink((outside_ / "copy.shard").c_str(), shard.c_str()), 0);
  Manifest m = read_manifest(dir_.path(), 2).value();
  Status s = verify_checkpoint(dir_.path(), m);
  EXPECT_REFUSED(s, StatusCode::kDataLoss, "step-2/rank-00000.shard");
  EXPECT_NE(s.message().find("outside the checkpoint directory"), std::string::npos);
  // The size of the outside file is not told.
  EXPECT_EQ(s.message().find(std::to_string(std::filesystem::file_size(outside_ / "copy.shard"))),
            std::string::npos)
      << s.message();
}

TEST_F(UntrustedInputTest, ALatestOrStepDirectoryLinkedOutsideIsRefused) {
  std::ofstream(outside_ / "latest") << "step-2\n";
  std::filesystem::remove(dir_ / "latest");
  ASSERT_EQ(::symlink((outside_ / "latest").c_str(), (dir_ / "latest").c_str()), 0);
  EXPECT_REFUSED(read_latest(dir_.path()).status(), StatusCode::kDataLoss, "outside");
  std::filesystem::rename(dir_ / "step-1", outside_ / "step-1");
  ASSERT_EQ(::symlink((outside_ / "step-1").c_str(), (dir_ / "step-1").c_str()), 0);
  EXPECT_REFUSED(read_manifest(dir_.path(), 1).status(), StatusCode::kDataLoss, "outside");
}

// --- values ------------------------------------------------------------------------------------

TEST_F(UntrustedInputTest, ANegativeOrOverflowingShapeIsRefusedNamingTheField) {
  Json j = manifest_json();
  j["tensors"][0]["shape"][0] = -64;
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "tensor 'w1': field 'shape' has extent -64");
  // 2^32 x 2^32 elements: their product wraps to 0 in int64 (a 0-byte tensor).
  j = manifest_json();
  j["tensors"][0]["shape"] = {int64_t(1) << 32, int64_t(1) << 32};
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "tensor 'w1': field 'shape' describes more than");
  j = manifest_json();
  j["tensors"][0]["shards"][0]["len"][0] = 65;  // past the extent 64
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "is outside the shape at dim 0");
}

TEST_F(UntrustedInputTest, ANegativeTruncatedOrHugeWorldSizeIsRefused) {
  for (const Json& bad : {Json(-1), Json(0), Json((int64_t(1) << 32) + 1), Json(1.5)}) {
    Json j = manifest_json();
    j["world_size"] = bad;
    EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "field 'world_size' is " + bad.dump());
  }
  Json j = manifest_json();
  j["tensors"][0]["shards"][0]["rank"] = 1;  // world_size is 1
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "tensor 'w1' shard 0: field 'rank' is 1");
}

TEST_F(UntrustedInputTest, AChunkTableThatDoesNotTileTheSliceIsRefused) {
  Json j = manifest_json();
  j["tensors"][0]["shards"][0]["chunks"][0]["raw"] = 1u << 30;
  j["tensors"][0]["shards"][0]["chunks"][0]["data"].erase("zstd");  // else "stored as is" fails
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "chunk 0: field 'raw' is 1073741824");
  j = manifest_json();
  j["tensors"][0]["shards"][0]["chunks"].erase(0);
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "11 chunks for 12288 bytes");
  j = manifest_json();
  j["blobs"][0]["size"] = 1u << 30;
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "field 'size' is 1073741824");
}

// Bytes claimed beyond the end of the file: refused by the file's size, not read into a buffer of
// the claimed size (2^40 bytes would abort the reader with bad_alloc).
TEST_F(UntrustedInputTest, AChunkClaimingBytesBeyondItsFileIsRefusedBeforeAllocating) {
  Json j = manifest_json();
  j["tensors"][0]["shards"][0]["chunks"][3]["data"]["stored"] = uint64_t(1) << 40;
  j["tensors"][0]["shards"][0]["chunks"][3]["data"].erase("zstd");
  write_manifest(j);
  Manifest m = read_manifest(dir_.path(), 2).value();
  codec::ChunkReader reader(dir_.path());
  std::string out;
  EXPECT_REFUSED(reader.read(m.tensors[0].shards[0].chunks[3], &out, "chunk 3"),
                 StatusCode::kDataLoss, "lie beyond the end of the file");
}

// A 1 GiB chunk whose stored bytes are a frame of 1 KiB: refused by the frame's size before the
// 1 GiB buffer is allocated.
TEST(ChunkReader, AFrameSmallerThanTheRawSizeIsRefusedBeforeTheBufferIsSized) {
  ScratchDir root("frame");
  std::filesystem::create_directories(root / "step-1");
  codec::Compressor compressor;
  std::string small(1024, 'a'), stored;
  ASSERT_TRUE(compressor.compress(small.data(), small.size(), 1, &stored).ok());
  std::ofstream(root / "step-1/rank-00000.shard", std::ios::binary) << stored;
  ChunkRecord chunk;
  chunk.enc = "zstd";
  chunk.raw = kMaxChunkBytes;
  chunk.data = {"step-1/rank-00000.shard", 0, stored.size(),
                codec::xxh3(stored.data(), stored.size()), true};
  codec::ChunkReader reader(root.path());
  std::string out;
  const size_t rss = testing::rss_bytes();
  EXPECT_REFUSED(reader.read(chunk, &out, "chunk 0"), StatusCode::kDataLoss,
                 "its zstd frame holds 1024 bytes, the manifest says 1073741824");
  EXPECT_LT(out.capacity(), size_t(1) << 20);
  EXPECT_LT(testing::rss_bytes(), rss + (size_t(256) << 20));
}

// A chunk whose stored bytes hold `stored` for a manifest raw size of `raw`, in its own root.
struct OneChunk {
  explicit OneChunk(const std::string& stored, uint64_t raw) {
    std::filesystem::create_directories(root / "step-1");
    std::ofstream(root / "step-1/rank-00000.shard", std::ios::binary) << stored;
    chunk.enc = "zstd";
    chunk.raw = raw;
    chunk.data = {"step-1/rank-00000.shard", 0, stored.size(),
                  codec::xxh3(stored.data(), stored.size()), true};
  }
  ScratchDir root{"bomb"};
  ChunkRecord chunk;
};

// zstd of `bytes` zeros, with or without the content size in the frame header.
std::string zeros_frame(size_t bytes, bool declare_size) {
  const std::string zeros(bytes, '\0');
  std::string out(ZSTD_compressBound(bytes), '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, declare_size ? 1 : 0);
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), zeros.data(), zeros.size());
  ZSTD_freeCCtx(cctx);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

// A zstd "bomb": a few KiB of frame that inflate to 64 MiB, for a chunk of 4 KiB. Neither the
// frame that says so nor the one that keeps quiet is decoded past the recorded size, and neither
// makes the reader allocate more than it.
TEST(ChunkReader, AFrameInflatingBeyondTheRecordedSizeIsRefusedWithoutDecodingIt) {
  for (const bool declared : {true, false}) {
    OneChunk bomb(zeros_frame(64u << 20, declared), 4096);
    ASSERT_LT(bomb.chunk.data.stored, 64u << 10);
    codec::ChunkReader reader(bomb.root.path());
    std::string out;
    const size_t rss = testing::rss_bytes();
    EXPECT_REFUSED(reader.read(bomb.chunk, &out, "chunk 0"), StatusCode::kDataLoss,
                   declared ? "its zstd frame holds 67108864 bytes, the manifest says 4096"
                            : "its zstd frame does not declare its size (the manifest says 4096 "
                              "bytes)");
    EXPECT_LT(out.capacity(), size_t(1) << 20);
    EXPECT_LT(testing::rss_bytes(), rss + (size_t(32) << 20));
  }
}

// A frame of the right size followed by more frames (or anything else): the reader would decode
// them into the same buffer; refused naming the file, the chunk and the sizes.
TEST(ChunkReader, BytesAfterTheChunksFrameAreRefused) {
  std::string stored = zeros_frame(4096, true);
  const size_t frame = stored.size();
  stored += zeros_frame(4096, true);
  OneChunk chunk(stored, 4096);
  codec::ChunkReader reader(chunk.root.path());
  std::string out;
  EXPECT_REFUSED(reader.read(chunk.chunk, &out, "chunk 0"), StatusCode::kDataLoss,
                 "'step-1/rank-00000.shard' chunk 0: " + std::to_string(stored.size() - frame) +
                     " stored bytes follow its zstd frame of " + std::to_string(frame) + " bytes");
}

// The check and the open are one walk: the name is resolved through directory descriptors and
// its last component opened relative to the directory the check saw, with O_NOFOLLOW. A file
// swapped for a link to an outside file after the check is refused; a directory swapped for a
// link after the check is not followed (the held directory is read). With a path string checked
// and then opened (path_in_root, then open), both swaps read the outside file.
TEST(PathInRoot, ALinkSwappedInBetweenTheCheckAndTheOpenIsNotFollowed) {
  ScratchDir root("race"), out("outside");
  std::filesystem::create_directories(root / "step-1");
  std::ofstream(root / "step-1/f") << "inside";
  std::ofstream(out / "f") << "secret";
  auto checked = fs::resolve_in_root(root.path(), "step-1/f");
  ASSERT_TRUE(checked.ok()) << checked.status().to_string();
  std::filesystem::remove(root / "step-1/f");
  ASSERT_EQ(::symlink((out / "f").c_str(), (root / "step-1/f").c_str()), 0);
  EXPECT_REFUSED(checked->open().status(), StatusCode::kDataLoss, "'step-1/f' (");
  EXPECT_REFUSED(checked->open().status(), StatusCode::kDataLoss,
                 "is a symbolic link now, not when it was checked; refused");

  std::filesystem::remove(root / "step-1/f");
  std::ofstream(root / "step-1/f") << "inside";
  checked = fs::resolve_in_root(root.path(), "step-1/f");
  ASSERT_TRUE(checked.ok()) << checked.status().to_string();
  std::filesystem::rename(root / "step-1", root / "moved");
  ASSERT_EQ(::symlink(out.path().c_str(), (root / "step-1").c_str()), 0);
  auto file = checked->open();
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::string bytes(6, '\0');
  ASSERT_TRUE(file->read_at(0, bytes.data(), bytes.size()).ok());
  EXPECT_EQ(bytes, "inside");
}

// --- files -------------------------------------------------------------------------------------

TEST_F(UntrustedInputTest, AHugeLatestIsRefusedWithoutEchoingIt) {
  std::ofstream(dir_ / "latest", std::ios::trunc) << "step-" << std::string(100000, '7');
  Status s = read_latest(dir_.path()).status();
  EXPECT_REFUSED(s, StatusCode::kDataLoss, "above the limit of 64");
  EXPECT_LT(s.message().size(), 500u) << s.message().substr(0, 500);
}

TEST_F(UntrustedInputTest, AFifoOrDirectoryIsRefusedNotReadOrWaitedOn) {
  std::filesystem::remove(dir_ / "latest");
  ASSERT_EQ(::mkfifo((dir_ / "latest").c_str(), 0600), 0);
  EXPECT_REFUSED(read_latest(dir_.path()).status(), StatusCode::kDataLoss, "is a FIFO");
  std::filesystem::remove(dir_ / "step-1/manifest.json");
  ASSERT_EQ(::mkfifo((dir_ / "step-1/manifest.json").c_str(), 0600), 0);
  EXPECT_REFUSED(read_manifest(dir_.path(), 1).status(), StatusCode::kDataLoss, "is a FIFO");
  Manifest m = read_manifest(dir_.path(), 2).value();
  std::filesystem::remove(dir_ / "step-2/rank-00000.shard");
  std::filesystem::create_directory(dir_ / "step-2/rank-00000.shard");
  EXPECT_REFUSED(check_files(dir_.path(), m), StatusCode::kDataLoss, "is a directory");
}

TEST_F(UntrustedInputTest, LatestNamingNoCommittedStepIsRefusedByTheToolsCheck) {
  std::ofstream(dir_ / "latest", std::ios::trunc) << "step-99\n";
  EXPECT_EQ(read_latest(dir_.path()).value(), 99);
  EXPECT_REFUSED(read_latest_committed(dir_.path()).status(), StatusCode::kDataLoss,
                 "names step-99, which has no step-99/manifest.json");
  std::ofstream(dir_ / "latest", std::ios::trunc) << "../..\n";
  EXPECT_REFUSED(read_latest_committed(dir_.path()).status(), StatusCode::kDataLoss,
                 "is malformed: '../..'");
}

// --- resharding --------------------------------------------------------------------------------

// A target world of 4096 ranks that all hold replicas: one file, not 4096.
TEST_F(UntrustedInputTest, ReshardToAHugeDpWritesOnlyWhatTheSourceHolds) {
  ReshardOptions o;
  o.to.dp = 4096;
  o.fsync = false;
  o.direct_io = false;
  ScratchDir out("huge_dp");
  auto r = reshard_checkpoint(dir_.path(), out / "c", o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->world_size, 4096);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(out / "c/step-2"))
    files += !e.is_directory();
  EXPECT_EQ(files, 2u);  // manifest.json and rank-00000.shard
  Manifest m = read_manifest(out / "c", 2).value();
  EXPECT_TRUE(verify_checkpoint(out / "c", m).ok());
}

// --- layout recorded after a plan switch --------------------------------------------------------

TEST_F(UntrustedInputTest, SetLayoutChangesWhatTheNextManifestRecordsAndNegativeStepsAreRefused) {
  CheckpointOptions o;
  o.dir = dir_.path();
  o.chunk_bytes = 1024;
  o.fsync = false;
  o.layout = "tp=1 dp=1";
  auto ck = std::move(Checkpointer::create(o, std::make_shared<SingleRankGroup>())).value();
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 3).ok());
  // A manifest refuses a negative step: so does save_async, instead of the commit in the
  // background.
  EXPECT_EQ(ck->save_async(-1).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ck->set_layout("tp=1 pp=1 dp=1 zero=0 (switched)").ok());
  EXPECT_EQ(ck->set_layout(std::string("\xff")).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ck->save_async(3).ok());
  ASSERT_TRUE(ck->wait()->status.ok());
  EXPECT_EQ(read_manifest(dir_.path(), 3).value().layout, "tp=1 pp=1 dp=1 zero=0 (switched)");
}

// Found while fuzzing (issue 20 §1): placement fields were read with get<int>(), so 2^32 became
// tp_dim 0, a valid dimension.
TEST_F(UntrustedInputTest, APlacementFieldBeyondIntIsRefusedNotTruncated) {
  Json j = manifest_json();
  j["tensors"][0]["placement"] = {
      {"tp_dim", 4294967296ull}, {"zero_dim", -1}, {"zero_stage", 1}, {"layer", -1}};
  EXPECT_REFUSED(parse(j), StatusCode::kDataLoss, "field 'tp_dim' is 4294967296");
  j["tensors"][0]["placement"]["tp_dim"] = -1;
  EXPECT_TRUE(parse(j).ok()) << parse(j).to_string();
}

}  // namespace
}  // namespace tessera::ckpt
