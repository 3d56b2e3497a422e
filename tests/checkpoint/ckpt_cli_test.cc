// The `tessera ckpt` contract: JSON on stdout, exit codes, errors naming the file and chunk.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include "cli_run.h"
#define XXH_INLINE_ALL  // the manifest checksum, header-only
#include <xxhash.h>

#include "support/model_state.h"
#include "support/socket_rank_group.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {
namespace {

using ::tessera::testing::run_cli;
using testing::Layout;
using testing::ModelState;
using testing::ScratchDir;

class CkptCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CheckpointOptions o;
    o.dir = dir_.path();
    o.chunk_bytes = 1024;
    o.fsync = false;
    o.layout = "tp=1 dp=1";
    auto ck = std::move(Checkpointer::create(o, std::make_shared<SingleRankGroup>())).value();
    const Status saved = testing::save_two_steps(*ck);
    ASSERT_TRUE(saved.ok()) << saved.to_string();
  }
  ::tessera::testing::CliRun ckpt(const std::string& args) {
    return run_cli(TESSERA_BIN, "ckpt", args);
  }
  ScratchDir dir_{"cli"};
};

TEST_F(CkptCliTest, LsListsTheStepsAsJson) {
  auto r = ckpt("ls " + dir_.path() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["step"], 1);
  EXPECT_EQ(j[1]["step"], 2);
  EXPECT_EQ(j[1]["latest"], true);
  EXPECT_EQ(j[1]["committed"], true);
  EXPECT_EQ(j[1]["kind"], "full");
  EXPECT_EQ(j[1]["layout"], "tp=1 dp=1");
  auto text = ckpt("ls " + dir_.path());
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("committed, latest"), std::string::npos) << text.out;
}

TEST_F(CkptCliTest, InspectShowsTensorsShapesAndShards) {
  auto r = ckpt("inspect " + dir_.path() + "/step-1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 1);
  ASSERT_EQ(j["tensors"].size(), testing::model_tensors().size());
  EXPECT_EQ(j["tensors"][0]["name"], "w1");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({64, 48}));
  EXPECT_EQ(j["tensors"][0]["shard_list"][0]["chunks"], 12);
  auto text = ckpt("inspect " + dir_.path());
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("step-2: full"), std::string::npos) << text.out;
}

TEST_F(CkptCliTest, VerifyPassesAndThenNamesTheCorruptFileAndChunk) {
  auto ok = ckpt("verify " + dir_.path());
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("step-1: OK"), std::string::npos);
  Manifest m = read_manifest(dir_.path(), 2).value();
  const ChunkLocation& where = m.find_tensor("w2")->shards[0].chunks[5].data;
  testing::flip_byte(dir_ / where.file, where.offset + 3);
  auto bad = ckpt("verify " + dir_.path() + "/step-2");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("step-2/rank-00000.shard"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("tensor 'w2' shard of rank 0 chunk 5"), std::string::npos) << bad.err;
  auto json = ckpt("verify " + dir_.path() + " --json");
  EXPECT_EQ(json.code, 1);
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[1]["ok"], false);
}

TEST_F(CkptCliTest, DiffSaysWhichTensorsDiffer) {
  auto same = ckpt("diff " + dir_.path() + "/step-2 " + dir_.path());
  EXPECT_EQ(same.code, 0) << same.err << same.out;
  auto differ = ckpt("diff " + dir_.path() + "/step-1 " + dir_.path() + "/step-2 --json");
  EXPECT_EQ(differ.code, 1) << differ.err;
  auto j = nlohmann::json::parse(differ.out);
  ASSERT_EQ(j.size(), testing::model_tensors().size());
  EXPECT_EQ(j[0]["tensor"], "w1");
  EXPECT_EQ(j[0]["differing_elements"], 64 * 48);
}

// A 20-digit step does not fit in int64: an error naming the file, not an abort of the command.
TEST_F(CkptCliTest, AStepNumberOutOfRangeIsAnErrorNotAnAbort) {
  std::ofstream(dir_ / "latest", std::ios::trunc) << "step-99999999999999999999\n";
  auto ls = ckpt("ls " + dir_.path() + " --json");
  ASSERT_EQ(ls.code, 1) << ls.err;  // listed, and `latest` reported as broken
  EXPECT_NE(ls.err.find("out of range"), std::string::npos) << ls.err;
  auto j = nlohmann::json::parse(ls.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["latest"], false);
  const std::string huge = dir_ / "step-99999999999999999999";
  std::filesystem::create_directories(huge);
  std::filesystem::copy_file(dir_ / "step-2/manifest.json", huge + "/manifest.json");
  auto inspect = ckpt("inspect " + huge);
  EXPECT_EQ(inspect.code, 2) << inspect.err;
  EXPECT_NE(inspect.err.find("out of range"), std::string::npos) << inspect.err;
}

// `latest` is part of a checkpoint: one naming nothing fails verify and ls (which still lists).
TEST_F(CkptCliTest, ALatestNamingNothingFailsVerifyAndLs) {
  for (const char* latest : {"step-99", "../.."}) {
    std::ofstream(dir_ / "latest", std::ios::trunc) << latest << "\n";
    auto verify = ckpt("verify " + dir_.path());
    EXPECT_EQ(verify.code, 1) << latest << ": " << verify.err;
    EXPECT_NE(verify.err.find("latest'"), std::string::npos) << verify.err;
    auto ls = ckpt("ls " + dir_.path() + " --json");
    EXPECT_EQ(ls.code, 1) << latest << ": " << ls.err;
    EXPECT_NE(ls.err.find(std::string(latest) == "../.." ? "malformed" : "names step-99"),
              std::string::npos)
        << ls.err;
    auto j = nlohmann::json::parse(ls.out);
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[1]["committed"], false);
    auto inspect = ckpt("inspect " + dir_.path());
    EXPECT_EQ(inspect.code, 2) << inspect.err;
  }
}

// A step-N/ newer than `latest` is not a checkpoint (a crash between the rename and `latest`).
TEST_F(CkptCliTest, AStepNewerThanLatestIsLabelledUnpublished) {
  std::ofstream(dir_ / "latest", std::ios::trunc) << "step-1\n";
  auto ls = ckpt("ls " + dir_.path() + " --json");
  ASSERT_EQ(ls.code, 0) << ls.err;
  auto j = nlohmann::json::parse(ls.out);
  EXPECT_EQ(j[0]["latest"], true);
  EXPECT_EQ(j[1]["committed"], false);
  EXPECT_EQ(j[1]["state"], "unpublished (newer than latest)");
  auto text = ckpt("ls " + dir_.path());
  EXPECT_NE(text.out.find("unpublished (newer than latest)"), std::string::npos) << text.out;
  auto verify = ckpt("verify " + dir_.path());
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_NE(verify.out.find("step-2: OK (unpublished"), std::string::npos) << verify.out;
}

// A FIFO would block open() and read() forever: refused at once (the timeout only guards the test).
TEST_F(CkptCliTest, AFifoAsLatestManifestOrShardIsRefusedNotWaitedOn) {
  auto fifo = [&](const std::string& rel) {
    std::filesystem::remove(dir_ / rel);
    ASSERT_EQ(::mkfifo((dir_ / rel).c_str(), 0600), 0);
  };
  auto timed = [&](const std::string& args) {
    return run_cli("timeout 20 " TESSERA_BIN, "ckpt", args);
  };
  fifo("step-2/rank-00000.shard");
  auto verify = timed("verify " + dir_.path() + "/step-2");
  EXPECT_EQ(verify.code, 1) << verify.err;
  EXPECT_NE(verify.err.find("is a FIFO"), std::string::npos) << verify.err;
  fifo("step-1/manifest.json");
  auto inspect = timed("inspect " + dir_.path() + "/step-1");
  EXPECT_EQ(inspect.code, 2) << inspect.err;
  EXPECT_NE(inspect.err.find("is a FIFO"), std::string::npos) << inspect.err;
  fifo("latest");
  auto latest = timed("inspect " + dir_.path());
  EXPECT_EQ(latest.code, 2) << latest.err;
  EXPECT_NE(latest.err.find("is a FIFO"), std::string::npos) << latest.err;
}

// What an adversary does after editing a manifest: recompute its checksum.
void resign_manifest(const std::string& path, nlohmann::ordered_json j) {
  j.erase("manifest_checksum");
  const std::string body = j.dump();
  j["manifest_checksum"] = hex64(XXH3_64bits(body.data(), body.size()));
  std::ofstream(path, std::ios::trunc) << j.dump(1) << "\n";
}

nlohmann::ordered_json manifest_of(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::ordered_json::parse(in);
}

// A re-signed manifest naming a file outside the directory: verify does not read it, and the
// error names the file without telling whether (or how large) the outside file is.
TEST_F(CkptCliTest, AManifestNamingAFileOutsideTheDirectoryIsRefusedByName) {
  const std::string manifest = dir_ / "step-2/manifest.json";
  auto j = manifest_of(manifest);
  const std::string evil =
      "step-2/../../" + std::filesystem::path(dir_.path()).filename().string() + "-outside.shard";
  std::ofstream(dir_.path() + "-outside.shard") << std::string(777, 'x');
  j["files"][0]["name"] = evil;
  resign_manifest(manifest, j);
  auto verify = ckpt("verify " + dir_.path() + "/step-2");
  EXPECT_EQ(verify.code, 1) << verify.err;
  EXPECT_NE(verify.err.find("'" + evil + "' has a '..' component"), std::string::npos)
      << verify.err;
  EXPECT_EQ(verify.err.find("777"), std::string::npos) << verify.err;
  std::filesystem::remove(dir_.path() + "-outside.shard");
}

// The same through reshard: a chunk read from an (intact) copy outside the directory would be
// copied into the output.
TEST_F(CkptCliTest, ReshardRefusesAChunkInAFileOutsideTheDirectory) {
  const std::string copy = dir_.path() + "-copy";
  std::filesystem::copy(dir_.path(), copy, std::filesystem::copy_options::recursive);
  const std::string manifest = dir_ / "step-2/manifest.json";
  auto j = manifest_of(manifest);
  const std::string evil = "step-2/../../" + std::filesystem::path(copy).filename().string() +
                           "/step-2/rank-00000.shard";
  j["tensors"][0]["shards"][0]["chunks"][0]["data"]["file"] = evil;
  resign_manifest(manifest, j);
  std::ofstream(dir_.path() + "-plan.json") << R"({"tp": 1, "pp": 1, "dp": 1, "zero": 0})";
  auto r = ckpt("reshard " + dir_.path() + " --to " + dir_.path() + "-plan.json --out " +
                dir_.path() + "-out");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("'" + evil + "' has a '..' component"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "-out/step-2"));
  for (const char* suffix : {"-copy", "-plan.json", "-out"}) {
    std::filesystem::remove_all(dir_.path() + suffix);
  }
}

// Absurd values are refused naming the field, not an INTERNAL error from the standard library.
TEST_F(CkptCliTest, AManifestWithANegativeShapeOrHugeWorldIsRefusedNamingTheField) {
  const std::string manifest = dir_ / "step-2/manifest.json";
  const auto good = manifest_of(manifest);
  auto j = good;
  j["tensors"][0]["shape"][0] = -5;
  resign_manifest(manifest, j);
  auto diff = ckpt("diff " + dir_.path() + "/step-1 " + dir_.path() + "/step-2");
  EXPECT_EQ(diff.code, 2) << diff.err;
  EXPECT_NE(diff.err.find("tensor 'w1': field 'shape' has extent -5"), std::string::npos)
      << diff.err;
  EXPECT_EQ(diff.err.find("INTERNAL"), std::string::npos) << diff.err;
  j = good;
  j["world_size"] = -3;
  resign_manifest(manifest, j);
  auto inspect = ckpt("inspect " + dir_.path());
  EXPECT_EQ(inspect.code, 2) << inspect.err;
  EXPECT_NE(inspect.err.find("field 'world_size' is -3"), std::string::npos) << inspect.err;
}

// `step-2` given relative to the current directory: the root is "" (the current directory).
TEST_F(CkptCliTest, AStepRelativeToTheCurrentDirectoryIsFound) {
  auto r = run_cli("cd " + dir_.path() + " && " TESSERA_BIN, "ckpt", "verify step-2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step-2: OK"), std::string::npos) << r.out;
}

TEST_F(CkptCliTest, AMissingDirectoryIsOneLineAndExitTwo) {
  auto r = ckpt("inspect " + dir_.path() + "/nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("tessera ckpt inspect: NOT_FOUND"), std::string::npos) << r.err;
}

// `tessera ckpt reshard`: a checkpoint saved by 4 ranks under (tp=2, dp=2), rewritten offline for
// other layouts and loaded there by 4 ranks.
class CkptReshardTest : public ::testing::Test {
 protected:
  static CheckpointOptions options(const std::string& dir) {
    CheckpointOptions o;
    o.dir = dir;
    o.chunk_bytes = 1024;
    o.fsync = false;
    return o;
  }
  // Every rank of `layout` loads `dir` and checks its slices are the state of step 10, bitwise.
  static void load_and_check(const std::string& dir, Layout layout) {
    auto exits = testing::run_ranks(layout.size(), [&](int rank, std::shared_ptr<RankGroup> g) {
      auto ck = Checkpointer::create(options(dir), g);
      ModelState state;
      if (!ck.ok() || !state.register_in((*ck)->registry(), layout, rank, -1).ok()) return 3;
      auto loaded = (*ck)->load();
      if (!loaded.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, loaded.status().to_string().c_str());
        return 4;
      }
      const std::string diff = state.check(layout, rank, 10, rank < 4 ? rank : -1);
      if (!diff.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, diff.c_str());
      return diff.empty() ? 0 : 5;
    });
    for (size_t r = 0; r < exits.size(); ++r) {
      EXPECT_EQ(exits[r].code, 0) << "rank " << r << " under tp=" << layout.tp;
    }
  }
  void SetUp() override {
    auto exits = testing::run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> g) {
      CheckpointOptions o = options(src_.path());
      o.layout = "tp=2 pp=1 dp=2 zero=1";
      auto ck = Checkpointer::create(o, g);
      ModelState state;
      if (!ck.ok() || !state.register_in((*ck)->registry(), Layout{2, 2}, rank, 10).ok()) return 3;
      if (!(*ck)->save_async(10).ok()) return 4;
      auto r = (*ck)->wait();
      return r.ok() && r->status.ok() ? 0 : 5;
    });
    for (const auto& e : exits) ASSERT_EQ(e.code, 0);
  }
  std::string plan(const std::string& name, const std::string& json) {
    std::ofstream(work_ / name) << json;
    return work_ / name;
  }
  ::tessera::testing::CliRun ckpt(const std::string& args) {
    return run_cli(TESSERA_BIN, "ckpt", args);
  }
  ScratchDir src_{"reshard_src"};
  ScratchDir work_{"reshard_work"};
};

TEST_F(CkptReshardTest, Tp2Dp2ToTp1Dp4ToTp4Dp1AndBackLoadsBitwise) {
  // The output of `tessera plan --json` (trimmed): the best plan is used.
  const std::string to14 = plan("p14.json",
                                R"({"model": {"name": "m"}, "plans": [{"tp": 1, "pp": 1, "dp": 4,
                                   "cp": 1, "ep": 1, "zero": 1, "stage_layers": [2]}]})");
  const std::string to41 = plan("p41.json", R"({"tp": 4, "pp": 1, "dp": 1, "zero": 1})");
  const std::string to22 = plan("p22.json", R"({"tp": 2, "pp": 1, "dp": 2, "zero": 1})");
  auto a = ckpt("reshard " + src_.path() + " --to " + to14 + " --out " + (work_ / "b") + " --json");
  ASSERT_EQ(a.code, 0) << a.err;
  auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["whole_tensors"], nlohmann::json::array({"bias", "scale"}));
  Manifest b = read_manifest(work_ / "b", 10).value();
  EXPECT_EQ(b.layout, "tp=1 pp=1 dp=4 zero=1");
  EXPECT_EQ(b.find_tensor("w1")->shards.size(), 1u);      // replicated over dp: written once
  EXPECT_EQ(b.find_tensor("adam_m")->shards.size(), 4u);  // ZeRO: one part per dp rank
  ASSERT_TRUE(b.find_tensor("adam_m")->placement.has_value());
  EXPECT_EQ(read_latest(work_ / "b").value(), 10);
  load_and_check(work_ / "b", Layout{1, 4});

  auto c = ckpt("reshard " + (work_ / "b") + "/step-10 --to " + to41 + " --out " + (work_ / "c"));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("tp=4 pp=1 dp=1 zero=1 (4 ranks)"), std::string::npos) << c.out;
  EXPECT_EQ(read_manifest(work_ / "c", 10).value().find_tensor("w2")->shards.size(), 4u);
  load_and_check(work_ / "c", Layout{4, 1});

  auto d = ckpt("reshard " + (work_ / "c") + " --to " + to22 + " --out " + (work_ / "d"));
  ASSERT_EQ(d.code, 0) << d.err;
  load_and_check(work_ / "d", Layout{2, 2});
  EXPECT_EQ(ckpt("verify " + (work_ / "d")).code, 0);
  // Gathered whole, the round trip is the original, bitwise.
  auto same = ckpt("diff " + src_.path() + " " + (work_ / "d"));
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  auto whole = Checkpointer::create(options(work_ / "d"), std::make_shared<SingleRankGroup>());
  ModelState gathered;
  ASSERT_TRUE(gathered.register_in((*whole)->registry(), Layout{1, 1}, 0, -1).ok());
  ASSERT_TRUE((*whole)->load().ok());
  EXPECT_EQ(gathered.check(Layout{1, 1}, 0, 10, 0), "");
}

TEST_F(CkptReshardTest, BadInputIsRefusedNamingTheFileOrField) {
  const std::string good = plan("good.json", R"({"tp": 1, "pp": 1, "dp": 4, "zero": 1})");
  auto missing = ckpt("reshard " + (work_ / "nope") + " --to " + good + " --out " + (work_ / "o"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("nope' is not a checkpoint directory"), std::string::npos)
      << missing.err;

  std::filesystem::create_directories(src_ / "step-11.tmp");
  auto uncommitted =
      ckpt("reshard " + (src_ / "step-11.tmp") + " --to " + good + " --out " + (work_ / "o"));
  EXPECT_EQ(uncommitted.code, 2);
  EXPECT_NE(uncommitted.err.find("step-11' is not committed"), std::string::npos)
      << uncommitted.err;

  const std::string no_dp = plan("no_dp.json", R"({"plans": [{"tp": 1, "pp": 1, "zero": 1}]})");
  auto field = ckpt("reshard " + src_.path() + " --to " + no_dp + " --out " + (work_ / "o"));
  EXPECT_EQ(field.code, 2);
  EXPECT_NE(field.err.find("no_dp.json': plans[0]: missing field 'dp'"), std::string::npos)
      << field.err;

  const std::string ep3 = plan("ep3.json", R"({"tp": 1, "pp": 1, "dp": 4, "ep": 3, "zero": 1})");
  auto ep = ckpt("reshard " + src_.path() + " --to " + ep3 + " --out " + (work_ / "o"));
  EXPECT_EQ(ep.code, 2);
  EXPECT_NE(ep.err.find("ep3.json': field 'ep' (3) must divide 'dp' (4)"), std::string::npos)
      << ep.err;

  const std::string tp3 = plan("tp3.json", R"({"tp": 3, "pp": 1, "dp": 1, "zero": 0})");
  auto divide = ckpt("reshard " + src_.path() + " --to " + tp3 + " --out " + (work_ / "o"));
  EXPECT_EQ(divide.code, 2);
  EXPECT_NE(divide.err.find("tensor 'w1': tp=3 does not divide dim 0 (extent 64)"),
            std::string::npos)
      << divide.err;

  const std::string unknown =
      plan("unknown.json", R"({"tp": 1, "pp": 1, "dp": 1, "zero": 0, "tensors": {"w9": {}}})");
  auto name = ckpt("reshard " + src_.path() + " --to " + unknown + " --out " + (work_ / "o"));
  EXPECT_EQ(name.code, 2);
  EXPECT_NE(name.err.find("tensor 'w9'"), std::string::npos) << name.err;
  EXPECT_FALSE(std::filesystem::exists(work_ / "o/step-10"));

  // A corrupt source chunk: refused naming the file and chunk, nothing is published.
  Manifest m = read_manifest(src_.path(), 10).value();
  const ChunkLocation& where = m.find_tensor("w2")->shards[1].chunks[2].data;
  testing::flip_byte(src_ / where.file, where.offset + 1);
  auto corrupt = ckpt("reshard " + src_.path() + " --to " + good + " --out " + (work_ / "o"));
  EXPECT_EQ(corrupt.code, 1);
  EXPECT_NE(corrupt.err.find(where.file), std::string::npos) << corrupt.err;
  EXPECT_NE(corrupt.err.find("tensor 'w2'"), std::string::npos) << corrupt.err;
  EXPECT_FALSE(std::filesystem::exists(work_ / "o/step-10"));
  EXPECT_FALSE(std::filesystem::exists(work_ / "o/step-10.tmp"));

  auto itself = ckpt("reshard " + src_.path() + " --to " + good + " --out " + src_.path());
  EXPECT_EQ(itself.code, 2);
  EXPECT_NE(itself.err.find("is the source itself"), std::string::npos) << itself.err;
}

}  // namespace
}  // namespace tessera::ckpt
