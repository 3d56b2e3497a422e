// The `tessera ckpt` contract: JSON on stdout, exit codes, errors naming the file and chunk.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/model_state.h"
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
    ModelState state;
    ASSERT_TRUE(state.register_in(ck->registry(), Layout{1, 1}, 0, 1).ok());
    for (int64_t step : {1, 2}) {
      state.fill(Layout{1, 1}, 0, step);
      ASSERT_TRUE(ck->save_async(step).ok());
      ASSERT_TRUE(ck->wait()->status.ok());
    }
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

TEST_F(CkptCliTest, AMissingDirectoryIsOneLineAndExitTwo) {
  auto r = ckpt("inspect " + dir_.path() + "/nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("tessera ckpt inspect: NOT_FOUND"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera::ckpt
