// Layouts and resharding without storage: the placement rule against the trainer's own layout,
// layout files, moving a job's state to another layout in memory, and an elastic restart where
// the survivors keep their memory across a re-formed group (Checkpointer::rebind).
#include <gtest/gtest.h>

#include <cstdio>

#include "support/model_state.h"
#include "support/rank_check.h"
#include "support/socket_rank_group.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/layout.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/checkpoint/reshard.h"

namespace tessera::ckpt {
namespace {

using testing::expect_all_exited_zero;
using testing::Layout;
using testing::ModelState;
using testing::run_ranks;
using testing::ScratchDir;

CheckpointOptions options_for(const std::string& dir) {
  CheckpointOptions o;
  o.dir = dir;
  o.chunk_bytes = 1024;
  o.keep_last = 2;
  o.fsync = false;
  return o;
}

ParallelLayout plan_of(Layout l) {
  ParallelLayout p;
  p.tp = l.tp;
  p.dp = l.dp;
  p.zero = 1;
  return p;
}

TEST(LayoutSlice, FollowsThePlacementRuleLikeTheTrainersOwnLayout) {
  for (Layout l : {Layout{2, 2}, Layout{1, 4}, Layout{4, 1}, Layout{1, 1}}) {
    for (int rank = 0; rank < l.size(); ++rank) {
      for (const auto& spec : testing::model_tensors()) {
        bool replicated = false, rule_replicated = false;
        const Slice expect = testing::model_slice(spec, l, rank, &replicated);
        auto got = layout_slice(spec.name, spec.shape, testing::model_placement(spec), plan_of(l),
                                rank, &rule_replicated);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ASSERT_TRUE(got->has_value());
        EXPECT_EQ(**got, expect) << spec.name << " rank " << rank << " tp=" << l.tp;
      }
    }
  }
}

TEST(LayoutSlice, PipelineStagesHoldOnlyTheirLayersAndBadDegreesAreNamed) {
  ParallelLayout l;
  l.pp = 2;
  l.tp = 2;
  l.stage_layers = {3, 1};
  const Placement layer3{0, -1, 1, 3};
  // Ranks 0, 1 are stage 0 (layers 0-2), ranks 2, 3 stage 1 (layer 3).
  EXPECT_FALSE(layout_slice("x", {8, 4}, layer3, l, 1).value().has_value());
  auto s = layout_slice("x", {8, 4}, layer3, l, 3).value();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (Slice{{4, 0}, {4, 4}}));
  // Interleaved (vp=2): 4 chunks of 1 layer; layer 2 is chunk 2, on stage 0.
  l.stage_layers = {2, 2};
  l.vp = 2;
  EXPECT_TRUE(layout_slice("x", {8, 4}, Placement{0, -1, 1, 2}, l, 1).value().has_value());
  EXPECT_FALSE(layout_slice("x", {8, 4}, Placement{0, -1, 1, 2}, l, 2).value().has_value());
  EXPECT_TRUE(layout_slice("x", {8, 4}, layer3, l, 3).value().has_value());
  l.vp = 1;
  l.tp = 3;
  l.pp = 1;
  l.stage_layers.clear();
  auto bad = layout_slice("w1", {64, 48}, Placement{0, -1, 1, -1}, l, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor 'w1': tp=3 does not divide dim 0"),
            std::string::npos)
      << bad.status().message();
}

// Degrees that would overflow int (size() = tp*cp*dp*pp) or wrap when narrowed are refused
// naming the field, not accepted as another number or left to abort later.
TEST(LayoutJson, OutOfRangeDegreesAreRefusedNamingTheField) {
  auto expect_refused = [](const std::string& json, const std::string& needle) {
    auto l = parse_layout_json(json, "p.json");
    ASSERT_FALSE(l.ok()) << json << " parsed as " << l->text();
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find(needle), std::string::npos) << l.status().message();
  };
  expect_refused(R"({"tp": 4294967297, "pp": 1, "dp": 1, "zero": 0})", "field 'tp'");
  expect_refused(R"({"tp": 1, "pp": 1, "dp": 18446744073709551615, "zero": 0})", "field 'dp'");
  expect_refused(R"({"tp": 65536, "pp": 1, "dp": 32768, "zero": 0})", "tp*cp*dp*pp");
  expect_refused(R"({"tp": 1, "pp": 2, "dp": 1, "zero": 0, "stage_layers": [1, 4294967296]})",
                 "stage_layers");
  expect_refused(R"({"tp": 1, "pp": 1, "dp": 1, "zero": 0,
                     "tensors": {"w": {"layer": 4294967296}}})",
                 "field 'layer'");
  ParallelLayout huge;
  huge.tp = 65536;
  huge.dp = 32768;
  auto slice = layout_slice("w", {8}, std::nullopt, huge, 0);
  ASSERT_FALSE(slice.ok());
  EXPECT_NE(slice.status().message().find("tp*cp*dp*pp"), std::string::npos)
      << slice.status().message();
  EXPECT_TRUE(parse_layout_json(R"({"tp": 1024, "pp": 4, "dp": 4096, "zero": 0})", "p.json").ok());
}

TEST(LayoutJson, ReadsTesseraPlanOutputAndNamesAMissingField) {
  const std::string plan_output =
      R"({"model": {"name": "m"}, "plans": [{"tp": 2, "pp": 1, "dp": 4, "cp": 1, "ep": 1,
          "zero": 1, "stage_layers": [12]}, {"tp": 8, "pp": 1, "dp": 1, "zero": 0}]})";
  auto best = parse_layout_json(plan_output, "plan.json");
  ASSERT_TRUE(best.ok()) << best.status().to_string();
  EXPECT_EQ(best->text(), "tp=2 pp=1 dp=4 zero=1");
  EXPECT_EQ(best->size(), 8);
  EXPECT_EQ(parse_layout_json(plan_output, "plan.json", 1)->tp, 8);
  std::map<std::string, Placement> placements;
  auto with_tensors = parse_layout_json(
      R"({"tp": 1, "pp": 1, "dp": 2, "zero": 0, "tensors": {"emb": {"tp_dim": 1}}})", "p.json", 0,
      &placements);
  ASSERT_TRUE(with_tensors.ok()) << with_tensors.status().to_string();
  ASSERT_EQ(placements.count("emb"), 1u);
  EXPECT_EQ(placements["emb"].tp_dim, 1);
  auto missing = parse_layout_json(R"({"tp": 1, "pp": 1, "zero": 0})", "p.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("p.json: missing field 'dp'"), std::string::npos)
      << missing.status().message();
  auto moe = parse_layout_json(
      R"({"tp": 1, "pp": 1, "dp": 4, "cp": 2, "ep": 2, "zero": 1,
          "tensors": {"experts": {"expert_dim": 0, "zero_dim": 1}}})",
      "p.json", 0, &placements);
  ASSERT_TRUE(moe.ok()) << moe.status().to_string();
  EXPECT_EQ(moe->text(), "tp=1 pp=1 dp=4 zero=1 cp=2 ep=2");
  EXPECT_EQ(moe->size(), 8);
  EXPECT_EQ(placements["experts"].expert_dim, 0);
  auto ep = parse_layout_json(R"({"tp": 1, "pp": 1, "dp": 4, "zero": 0, "ep": 3})", "p.json");
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("p.json: field 'ep' (3) must divide 'dp' (4)"),
            std::string::npos)
      << ep.status().message();
}

// tp=2 cp=2 dp=2 ep=2: rank = tp + 2 * (cp + 2 * dp), ep index = dp % 2.
TEST(LayoutSlice, ContextAndExpertParallelFollowThePlannersGroups) {
  ParallelLayout l;
  l.tp = 2;
  l.cp = 2;
  l.dp = 2;
  l.ep = 2;
  l.zero = 1;
  ASSERT_EQ(l.size(), 8);
  const Placement dense_zero{0, 1, 1, -1};   // tp rows, ZeRO over dp x cp on columns
  const Placement dense{0, -1, 1, -1};       // tp rows; cp and dp ranks hold replicas
  const Placement experts{-1, 1, 1, -1, 0};  // experts by ep, ZeRO over dp/ep x cp
  for (int rank = 0; rank < 8; ++rank) {
    const int tp = rank % 2, cp = (rank / 2) % 2, dp = rank / 4;
    bool replicated = true;
    auto a = layout_slice("a", {8, 4}, dense_zero, l, rank, &replicated).value();
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, (Slice{{4 * tp, cp + 2 * dp}, {4, 1}})) << "rank " << rank;
    EXPECT_FALSE(replicated) << "rank " << rank;
    auto b = layout_slice("b", {8, 4}, dense, l, rank, &replicated).value();
    EXPECT_EQ(*b, (Slice{{4 * tp, 0}, {4, 4}})) << "rank " << rank;
    EXPECT_TRUE(replicated) << "rank " << rank;
    auto e = layout_slice("e", {4, 6}, experts, l, rank, &replicated).value();
    EXPECT_EQ(*e, (Slice{{2 * dp, 3 * cp}, {2, 3}})) << "rank " << rank;
    EXPECT_TRUE(replicated) << "rank " << rank << ": the two tp ranks hold the same experts";
  }
  auto bad = layout_slice("e", {3, 6}, experts, l, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor 'e': ep=2 does not divide dim 0"),
            std::string::npos)
      << bad.status().message();
}

// Under any layout every element of a tensor is held by the same number of ranks, and a slice is
// called replicated exactly when that number is above one.
TEST(LayoutSlice, EveryElementIsHeldEquallyOftenUnderEveryLayout) {
  const std::vector<int64_t> shape = {16, 24};
  const std::vector<Placement> placements = {
      {0, 1, 1, -1}, {1, -1, 1, -1}, {-1, 1, 1, -1, 0}, {1, 0, 1, -1, 0}, {-1, -1, 1, -1}};
  for (int tp : {1, 2}) {
    for (int cp : {1, 2}) {
      for (int dp : {1, 2, 4}) {
        for (int ep : {1, 2, 4}) {
          if (dp % ep != 0) continue;
          ParallelLayout l;
          l.tp = tp, l.cp = cp, l.dp = dp, l.ep = ep, l.zero = 1;
          for (const Placement& p : placements) {
            std::vector<int> held(size_t(shape[0] * shape[1]), 0);
            std::vector<bool> said(size_t(l.size()));
            for (int rank = 0; rank < l.size(); ++rank) {
              bool replicated = false;
              auto s = layout_slice("t", shape, p, l, rank, &replicated);
              ASSERT_TRUE(s.ok()) << l.text() << ": " << s.status().to_string();
              said[size_t(rank)] = replicated;
              for (int64_t i = 0; i < (**s).len[0]; ++i) {
                for (int64_t j = 0; j < (**s).len[1]; ++j) {
                  ++held[size_t(((**s).offset[0] + i) * shape[1] + (**s).offset[1] + j)];
                }
              }
            }
            const int copies = held[0];
            for (int h : held) ASSERT_EQ(h, copies) << l.text() << " expert_dim " << p.expert_dim;
            for (bool r : said) EXPECT_EQ(r, copies > 1) << l.text() << " tp_dim " << p.tp_dim;
          }
        }
      }
    }
  }
}

TEST(Rebind, RefusesAGroupOfAnotherRankOrSize) {
  ScratchDir dir("rebind");
  auto ck = Checkpointer::create(options_for(dir.path()), std::make_shared<SingleRankGroup>());
  ASSERT_TRUE(ck.ok());
  EXPECT_TRUE((*ck)->rebind(std::make_shared<SingleRankGroup>()).ok());
  auto mesh = testing::SocketMesh::create(2).value();
  auto other = mesh.take(1);
  Status s = (*ck)->rebind(other);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 of 2"), std::string::npos) << s.message();
}

// Save under (2,2); move to (1,4) and then (4,1) in memory; every slice is bitwise the state of
// step 10, nothing is read from storage, and the final state saves and gathers whole.
TEST(MemoryReshard, Tp2Dp2ToTp1Dp4ToTp4Dp1InMemoryBitwise) {
  ScratchDir dir("memreshard");
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir.path()), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), Layout{2, 2}, rank, 10));
    int64_t step = 10;
    for (Layout next : {Layout{1, 4}, Layout{4, 1}}) {
      RANK_OK((*ck)->save_async(step));
      RANK_OK((*ck)->wait()->status);
      (*ck)->registry().clear();
      state = ModelState();
      RANK_OK(state.register_in((*ck)->registry(), next, rank, -1));  // zeros
      auto moved = (*ck)->reshard_from_memory();
      RANK_OK(moved);
      RANK_CHECK(moved->step == step, "resharded step " + std::to_string(moved->step));
      RANK_CHECK(moved->bytes_read == 0, "read storage");
      const std::string diff = state.check(next, rank, 10, rank);
      RANK_CHECK(diff.empty(), "under tp=" + std::to_string(next.tp) + ": " + diff);
      ++step;
    }
    // The snapshot in the new layout stands for step 11: restore() uses own memory.
    state.fill(Layout{4, 1}, rank, 3);
    auto restored = (*ck)->restore();
    RANK_OK(restored);
    RANK_CHECK(restored->step == 11 && restored->detail == "own memory", restored->detail);
    RANK_CHECK(state.check(Layout{4, 1}, rank, 10, rank).empty(), "after restore");
    RANK_OK((*ck)->save_async(12));
    RANK_OK((*ck)->wait()->status);
    return 0;
  });
  expect_all_exited_zero(exits);
  // Gathered into one process: every global tensor bitwise the state of step 10.
  auto ck = Checkpointer::create(options_for(dir.path()), std::make_shared<SingleRankGroup>());
  ASSERT_TRUE(ck.ok());
  ModelState whole;
  ASSERT_TRUE(whole.register_in((*ck)->registry(), Layout{1, 1}, 0, -1).ok());
  auto loaded = (*ck)->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 12);
  EXPECT_EQ(whole.check(Layout{1, 1}, 0, 10, -1), "");
}

TEST(MemoryReshard, WithoutASnapshotEveryRankIsTold) {
  ScratchDir dir("memreshard_none");
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir.path()), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), Layout{2, 1}, rank, 1));
    auto moved = (*ck)->reshard_from_memory();
    RANK_CHECK(!moved.ok(), "resharded without a snapshot");
    RANK_CHECK(moved.status().message().find("no snapshot") != std::string::npos,
               moved.status().to_string());
    return 0;
  });
  expect_all_exited_zero(exits);
}

// An elastic restart of rank 2 of 4: the collectives re-form a new communicator; the survivors
// rebind their checkpointers to it and keep their memory; the restarted rank (a new Checkpointer
// with empty memory) gets its state from its buddy's replica.
TEST(Elastic, SurvivorsRebindAndTheRestartedRankRestoresFromItsBuddy) {
  ScratchDir dir("elastic");
  auto reformed = testing::SocketMesh::create(4);
  ASSERT_TRUE(reformed.ok());
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    CheckpointOptions o = options_for(dir.path());
    o.peer_replica = true;
    auto ck = Checkpointer::create(o, group);
    RANK_OK(ck);
    std::unique_ptr<Checkpointer> checkpointer = std::move(ck).value();
    ModelState state;
    RANK_OK(state.register_in(checkpointer->registry(), Layout{2, 2}, rank, 1));
    for (int64_t step : {1, 2}) {
      state.fill(Layout{2, 2}, rank, step);
      RANK_OK(checkpointer->save_async(step));
      RANK_OK(checkpointer->wait()->status);
    }
    // The new generation of the group, which every rank joins.
    std::shared_ptr<RankGroup> next = reformed->take(rank);
    group.reset();
    if (rank == 2) {
      checkpointer.reset();
      auto fresh = Checkpointer::create(o, next);
      RANK_OK(fresh);
      checkpointer = std::move(fresh).value();
      state = ModelState();
      RANK_OK(state.register_in(checkpointer->registry(), Layout{2, 2}, rank, -1));
    } else {
      RANK_OK(checkpointer->rebind(next));
      state.fill(Layout{2, 2}, rank, 3);  // trained on past the last checkpoint
    }
    auto restored = checkpointer->restore();
    RANK_OK(restored);
    RANK_CHECK(restored->step == 2 && restored->from_peer, "restored " + restored->detail);
    const std::string want = rank == 2 ? "memory of rank 3" : "own memory";
    RANK_CHECK(restored->detail == want, "restored from " + restored->detail);
    const std::string diff = state.check(Layout{2, 2}, rank, 2, rank);
    RANK_CHECK(diff.empty(), diff);
    // The re-formed group carries the next save too.
    state.fill(Layout{2, 2}, rank, 4);
    RANK_OK(checkpointer->save_async(4));
    RANK_OK(checkpointer->wait()->status);
    return 0;
  });
  expect_all_exited_zero(exits);
}

// The model of step 10 saved by 4 ranks under (tp=2, dp=2) into `dir`.
void save_step_10_under_tp2_dp2(const std::string& dir) {
  expect_all_exited_zero(run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), Layout{2, 2}, rank, 10));
    RANK_OK((*ck)->save_async(10));
    RANK_OK((*ck)->wait()->status);
    return 0;
  }));
}

// `dir`'s latest step, loaded by the ranks of `layout`, is the model of step 10, bitwise.
void expect_step_10_loads_bitwise(const std::string& dir, Layout layout) {
  expect_all_exited_zero(run_ranks(layout.size(), [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), layout, rank, -1));
    RANK_OK((*ck)->load());
    const std::string diff = state.check(layout, rank, 10, rank);
    RANK_CHECK(diff.empty(), diff);
    return 0;
  }));
}

// The library call behind `tessera ckpt reshard` (the CLI tests cover the command): saved under
// (2,2), rewritten for (4,1), loaded there by 4 ranks bitwise.
TEST(OfflineReshard, WritesACommittedCheckpointLaidOutForTheNewLayout) {
  ScratchDir src("offline_src"), dst("offline_dst");
  save_step_10_under_tp2_dp2(src.path());
  ReshardOptions o;
  o.to = plan_of(Layout{4, 1});
  o.fsync = false;
  auto r = reshard_checkpoint(src.path(), dst.path(), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->world_size, 4);
  EXPECT_GT(r->chunks_read, 0u);
  Manifest m = read_manifest(dst.path(), 10).value();
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.find_tensor("w1")->shards.size(), 4u);
  EXPECT_EQ(m.files.size(), 4u);
  EXPECT_TRUE(verify_checkpoint(dst.path(), m).ok());
  expect_step_10_loads_bitwise(dst.path(), Layout{4, 1});
  // The same step again is refused; nothing else changes.
  auto again = reshard_checkpoint(src.path(), dst.path(), o);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().to_string();
}

// A mixture-of-experts layout and back: saved under (tp=2, dp=2), rewritten for 4 ranks as
// tp=1 cp=2 dp=2 ep=2 with w1 treated as 64 experts (split by ep, its ZeRO shards over
// dp/ep x cp), then back to (tp=2, dp=2) with w1's own placement, and loaded there bitwise.
TEST(OfflineReshard, ContextAndExpertParallelLayoutAndBackIsBitwise) {
  ScratchDir src("moe_src"), mid("moe_mid"), back("moe_back");
  save_step_10_under_tp2_dp2(src.path());
  ReshardOptions o;
  o.to.cp = 2;
  o.to.dp = 2;
  o.to.ep = 2;
  o.to.zero = 1;
  o.fsync = false;
  o.placements["w1"] = Placement{-1, 1, 1, -1, 0};
  auto r = reshard_checkpoint(src.path(), mid.path(), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->world_size, 4);
  Manifest m = read_manifest(mid.path(), 10).value();
  EXPECT_EQ(m.layout, "tp=1 pp=1 dp=2 zero=1 cp=2 ep=2");
  EXPECT_EQ(m.find_tensor("w1")->placement->expert_dim, 0);
  // w1: 2 expert halves x 2 ZeRO shards; adam_m: 4 ZeRO shards over dp x cp; w2: whole.
  EXPECT_EQ(m.find_tensor("w1")->shards.size(), 4u);
  EXPECT_EQ(m.find_tensor("adam_m")->shards.size(), 4u);
  EXPECT_EQ(m.find_tensor("w2")->shards.size(), 1u);
  EXPECT_TRUE(verify_checkpoint(mid.path(), m).ok());

  ReshardOptions home;
  home.to = plan_of(Layout{2, 2});
  home.fsync = false;
  home.placements["w1"] = *testing::model_placement(testing::model_tensors()[0]);
  auto r2 = reshard_checkpoint(mid.path(), back.path(), home);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  expect_step_10_loads_bitwise(back.path(), Layout{2, 2});
}

}  // namespace
}  // namespace tessera::ckpt
