// A bad checkpoint is refused with an error naming the file (and chunk); an older one is loaded
// only when asked (fallback), and reported. Faults injected at each commit point leave the last
// committed checkpoint intact and training able to continue.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "fs.h"
#include "support/model_state.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {
namespace {

using testing::Layout;
using testing::ModelState;
using testing::ScratchDir;

class CorruptionTest : public ::testing::Test {
 public:
  void SetUp() override {
    auto ck = open();
    const Status saved = testing::save_two_steps(*ck);
    ASSERT_TRUE(saved.ok()) << saved.to_string();
  }
  std::unique_ptr<Checkpointer> open(std::function<Status(FaultPoint)> hook = {}) {
    CheckpointOptions o;
    o.dir = dir_.path();
    o.chunk_bytes = 1024;
    o.fsync = false;
    o.keep_last = 5;
    o.fault_hook = std::move(hook);
    return std::move(Checkpointer::create(o, std::make_shared<SingleRankGroup>())).value();
  }
  // Loads into fresh memory; on success checks the content is the pattern of the loaded step.
  Result<LoadResult> load(bool fallback) {
    auto ck = open();
    ModelState state;
    EXPECT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, -1).ok());
    LoadOptions options;
    options.fallback = fallback;
    auto r = ck->load(options);
    if (r.ok()) {
      EXPECT_EQ(state.check(Layout{1, 1}, 0, r->step, 0), "");
    }
    return r;
  }
  void expect_refused_then_fallback(const std::string& needle) {
    auto strict = load(false);
    ASSERT_FALSE(strict.ok());
    EXPECT_EQ(strict.status().code(), StatusCode::kDataLoss) << strict.status().to_string();
    EXPECT_NE(strict.status().message().find(needle), std::string::npos)
        << strict.status().message();
    auto fallback = load(true);
    ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
    EXPECT_EQ(fallback->step, 1);
    ASSERT_EQ(fallback->refused.size(), 1u);
    EXPECT_NE(fallback->refused[0].find(needle), std::string::npos) << fallback->refused[0];
  }
  ScratchDir dir_{"corrupt"};
};

TEST_F(CorruptionTest, AnIntactCheckpointLoads) {
  auto r = load(false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->step, 2);
}

TEST_F(CorruptionTest, ATruncatedShardIsRefusedNamingTheFile) {
  testing::truncate_to(dir_ / "step-2/rank-00000.shard", 100);
  expect_refused_then_fallback("step-2/rank-00000.shard");
}

TEST_F(CorruptionTest, AFlippedByteInAShardIsRefusedNamingTheFileAndChunk) {
  Manifest m = read_manifest(dir_.path(), 2).value();
  const TensorRecord* w1 = m.find_tensor("w1");
  ASSERT_NE(w1, nullptr);
  ASSERT_GT(w1->shards[0].chunks.size(), 3u);
  const ChunkLocation& where = w1->shards[0].chunks[3].data;
  testing::flip_byte(dir_ / where.file, where.offset + where.stored / 2);
  expect_refused_then_fallback("tensor 'w1' shard of rank 0 chunk 3");
  auto strict = load(false);
  EXPECT_NE(strict.status().message().find("step-2/rank-00000.shard"), std::string::npos)
      << strict.status().message();
}

TEST_F(CorruptionTest, AFlippedByteInTheManifestIsRefused) {
  const std::string path = dir_ / "step-2/manifest.json";
  testing::flip_byte(path, std::filesystem::file_size(path) / 2);
  expect_refused_then_fallback("step-2/manifest.json");
}

// A file's checksum is a digest of its chunks' checksums, so verify must also see that the
// manifest's chunks cover every byte of the file: a chunk dropped from the table (the manifest
// re-signed, so its own checksum holds) leaves bytes no chunk vouches for.
TEST_F(CorruptionTest, VerifyRefusesAShardWhoseBytesTheManifestDoesNotCover) {
  ASSERT_TRUE(verify_checkpoint(dir_.path(), read_manifest(dir_.path(), 2).value()).ok());
  Manifest m = read_manifest(dir_.path(), 2).value();
  ASSERT_FALSE(m.tensors.empty());
  std::vector<ChunkRecord>& chunks = m.tensors[0].shards.at(0).chunks;
  ASSERT_GT(chunks.size(), 2u);
  const uint64_t gap = chunks[1].data.offset;
  chunks.erase(chunks.begin() + 1);
  Status s = verify_checkpoint(dir_.path(), m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("step-2/rank-00000.shard"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bytes [" + std::to_string(gap) + ", "), std::string::npos)
      << s.message();

  Manifest other = read_manifest(dir_.path(), 2).value();
  other.files.at(0).checksum ^= 1;  // a table that is whole but not the one written
  s = verify_checkpoint(dir_.path(), other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("whole-file checksum mismatch"), std::string::npos) << s.message();
}

TEST_F(CorruptionTest, AMissingShardIsRefusedNamingTheFile) {
  std::filesystem::remove(dir_ / "step-2/rank-00000.shard");
  expect_refused_then_fallback("step-2/rank-00000.shard' is missing");
}

TEST_F(CorruptionTest, AStrayFileFromAnotherSaveIsRefusedNamingIt) {
  std::filesystem::copy_file(dir_ / "step-1/rank-00000.shard", dir_ / "step-2/rank-00001.shard");
  expect_refused_then_fallback("step-2/rank-00001.shard");
}

TEST_F(CorruptionTest, AMalformedLatestIsRefusedUnlessFallingBack) {
  testing::flip_byte(dir_ / "latest", 0);
  auto strict = load(false);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("latest"), std::string::npos);
  auto fallback = load(true);
  ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
  EXPECT_EQ(fallback->step, 2);
}

// Saves `step` with a fresh checkpointer (and `hook`) and returns its result.
SaveResult save_step(CorruptionTest& t, int64_t step, std::function<Status(FaultPoint)> hook = {}) {
  auto ck = t.open(std::move(hook));
  ModelState state;
  EXPECT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, step).ok());
  EXPECT_TRUE(ck->save_async(step).ok());
  return ck->wait().value();
}

// A crashed save of a larger world left step-3.tmp/rank-00005.shard: it must not be renamed into
// step-3/ (where verify and load would refuse the stray).
TEST_F(CorruptionTest, AStaleTmpOfACrashedLargerSaveIsClearedBeforeTheSave) {
  std::filesystem::create_directories(dir_ / "step-3.tmp");
  std::ofstream(dir_ / "step-3.tmp/rank-00005.shard") << "left by a crashed 8-rank save";
  SaveResult r = save_step(*this, 3);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3/rank-00005.shard"));
  Status verified = verify_checkpoint(dir_.path(), read_manifest(dir_.path(), 3).value());
  EXPECT_TRUE(verified.ok()) << verified.to_string();
  auto loaded = load(false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 3);
}

// An exception on the persist thread (here from the hook; in life a JSON type error or
// bad_alloc) fails the save naming the rank and removes step-N.tmp/, instead of terminating.
TEST_F(CorruptionTest, AnExceptionOnThePersistThreadFailsTheSaveAndCleansUp) {
  SaveResult r = save_step(*this, 3, [](FaultPoint at) -> Status {
    if (at == FaultPoint::kMidShard) throw std::runtime_error("thrown mid-shard");
    return Status();
  });
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("rank 0: exception: thrown mid-shard"), std::string::npos)
      << r.status.message();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3.tmp"));
  EXPECT_EQ(read_latest(dir_.path()).value(), 2);
  EXPECT_TRUE(save_step(*this, 4).status.ok()) << "training continues";
}

// A file appearing in step-N.tmp/ during the save is not published.
TEST_F(CorruptionTest, AStrayFileInTheTmpDirectoryStopsTheCommitNamingIt) {
  const std::string stray = dir_ / "step-3.tmp/rank-00007.shard";
  SaveResult r = save_step(*this, 3, [&](FaultPoint at) {
    if (at == FaultPoint::kAfterShards) std::ofstream(stray) << "stray";
    return Status();
  });
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("rank-00007.shard"), std::string::npos) << r.status.message();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3"));
  EXPECT_EQ(read_latest(dir_.path()).value(), 2);
}

// Saving a step that `latest` already covers would delete a committed step (maybe the base of a
// kept delta): refused, and the step stays loadable.
TEST_F(CorruptionTest, SavingACommittedStepAgainIsRefusedAndKeepsIt) {
  SaveResult r = save_step(*this, 1);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), StatusCode::kAlreadyExists) << r.status.to_string();
  EXPECT_NE(r.status.message().find("step-1"), std::string::npos) << r.status.message();
  EXPECT_EQ(read_latest(dir_.path()).value(), 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-1.tmp"));
  auto ck = open();
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, -1).ok());
  LoadOptions at1;
  at1.step = 1;
  ASSERT_TRUE(ck->load(at1).ok());
  EXPECT_EQ(state.check(Layout{1, 1}, 0, 1, 0), "");
}

// A step-N/ newer than `latest` was never published (a crash between rename and `latest`): the
// save of N replaces it.
TEST_F(CorruptionTest, AnUnpublishedStepDirectoryIsReplacedBySavingThatStep) {
  std::filesystem::create_directories(dir_ / "step-3");
  std::ofstream(dir_ / "step-3/rank-00003.shard") << "half of a crashed save";
  SaveResult r = save_step(*this, 3);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3/rank-00003.shard"));
  auto loaded = load(false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 3);
}

// GC cannot see the base of a kept step whose manifest is unreadable: it deletes nothing.
TEST_F(CorruptionTest, GcDeletesNothingWhenAKeptStepsManifestIsUnreadable) {
  const std::string manifest = dir_ / "step-2/manifest.json";
  testing::flip_byte(manifest, std::filesystem::file_size(manifest) / 2);
  auto ck = open();
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 3).ok());
  // keep_last = 5: after step 6 the kept steps are 2..6 and step 1 would go, unless step 2 is a
  // delta of it, which GC cannot tell with step 2's manifest unreadable.
  for (int64_t step : {3, 4, 5, 6}) {
    state.fill(Layout{1, 1}, 0, step);
    ASSERT_TRUE(ck->save_async(step).ok());
    ASSERT_TRUE(ck->wait()->status.ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ / "step-1/manifest.json"));
}

TEST_F(CorruptionTest, AnOutOfRangeStepInLatestIsDataLossNamingTheFile) {
  std::ofstream(dir_ / "latest", std::ios::trunc) << "step-99999999999999999999\n";
  auto latest = read_latest(dir_.path());
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(latest.status().message().find("latest"), std::string::npos)
      << latest.status().message();
}

// A manifest may not declare chunks larger than a reader will decode whole.
TEST_F(CorruptionTest, AManifestWithHugeChunksIsRefused) {
  Manifest m = read_manifest(dir_.path(), 2).value();
  m.tensors.at(0).shards.at(0).chunk_bytes = kMaxChunkBytes + 1;
  auto parsed = parse_manifest(manifest_to_json(m), "test manifest");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(parsed.status().message().find("chunk_bytes"), std::string::npos)
      << parsed.status().message();
}

// replace_file: a failed write leaves no `path`.tmp; *renamed says whether `path` changed.
TEST(ReplaceFile, AFailedWriteRemovesTheTmpAndReportsNoRename) {
  ScratchDir dir("replace");
  const std::string latest = dir / "latest";
  ASSERT_TRUE(fs::write_file(latest, "step-1\n", false).ok());
  ASSERT_EQ(::symlink("/dev/full", (latest + ".tmp").c_str()), 0);  // every write: ENOSPC
  bool renamed = true;
  Status s = fs::replace_file(latest, "step-2\n", false, {}, &renamed);
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(renamed);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(latest + ".tmp")));
  EXPECT_EQ(fs::read_file(latest).value(), "step-1\n");
  ASSERT_TRUE(fs::replace_file(latest, "step-2\n", true, {}, &renamed).ok());
  EXPECT_TRUE(renamed);
  EXPECT_EQ(fs::read_file(latest).value(), "step-2\n");
}

class FaultPointTest : public CorruptionTest, public ::testing::WithParamInterface<FaultPoint> {};

TEST_P(FaultPointTest, AFailedSaveLeavesTheLastCommittedCheckpointAndTrainingContinues) {
  const FaultPoint point = GetParam();
  auto ck =
      open([point](FaultPoint at) { return at == point ? internal_error("injected") : Status(); });
  ModelState state;
  ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 3).ok());
  ASSERT_TRUE(ck->save_async(3).ok());
  SaveResult r = ck->wait().value();
  if (point == FaultPoint::kDuringGc) {
    // Committed and published before garbage collection; the fault only stops the cleanup.
    EXPECT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(read_latest(dir_.path()).value(), 3);
    return;
  }
  ASSERT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find(std::string(fault_point_name(point))), std::string::npos)
      << r.status.message();
  EXPECT_EQ(read_latest(dir_.path()).value(), 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "step-3.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "latest.tmp"));
  auto loaded = load(false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 2);
  // Training continues: the next save commits.
  auto again = open();
  ModelState next;
  ASSERT_TRUE(next.register_in(again->registry(), Layout{1, 1}, 0, 4).ok());
  ASSERT_TRUE(again->save_async(4).ok());
  EXPECT_TRUE(again->wait()->status.ok());
  EXPECT_EQ(read_latest(dir_.path()).value(), 4);
}

INSTANTIATE_TEST_SUITE_P(Points, FaultPointTest,
                         ::testing::Values(FaultPoint::kMidShard, FaultPoint::kAfterShards,
                                           FaultPoint::kAfterManifest, FaultPoint::kDuringLatest,
                                           FaultPoint::kDuringGc),
                         [](const auto& p) {
                           std::string name(fault_point_name(p.param));
                           std::erase(name, '-');
                           return name;
                         });

}  // namespace
}  // namespace tessera::ckpt
