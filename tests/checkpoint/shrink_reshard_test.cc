// Node loss with a smaller restart (--nnodes MIN:MAX): ranks of a 4-rank job die, the survivors
// re-form a smaller group, rebind their checkpointers to it (Checkpointer::rebind_shrunk) and move
// the newest state into the new layout in memory, the lost ranks' parts coming from the replicas
// the survivors hold (peer_replica, buddy = rank + 1). Where a lost rank's buddy died too, every
// survivor is told which old rank's state is gone and storage still serves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "support/device_model.h"
#include "support/model_state.h"
#include "support/rank_check.h"
#include "support/socket_rank_group.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"

namespace tessera::ckpt {
namespace {

using testing::expect_all_exited_zero;
using testing::Layout;
using testing::ModelState;
using testing::run_ranks;
using testing::ScratchDir;
using testing::SocketMesh;

CheckpointOptions replica_options(const std::string& dir) {
  CheckpointOptions o;
  o.dir = dir;
  o.chunk_bytes = 1024;
  o.keep_last = 3;
  o.full_every = 2;  // so the first save after a shrink could be a delta (it must not be)
  o.fsync = false;
  o.peer_replica = true;
  o.replica_stride = 1;  // old rank r's snapshot also lives on old rank r + 1 (mod 4)
  o.persist_priority = PersistPriority::kNormal;
  return o;
}

// The group the survivors re-form after the ranks in `dead` of a 4-rank job are lost: the old
// ranks renumbered in order, and a fresh socket mesh for them (created before the ranks fork).
class Survivors {
 public:
  static Result<Survivors> of(const std::vector<int>& dead) {
    Survivors s;
    s.new_rank_.assign(4, -1);
    for (int o = 0; o < 4; ++o) {
      if (std::find(dead.begin(), dead.end(), o) != dead.end()) continue;
      s.new_rank_[size_t(o)] = static_cast<int>(s.old_ranks_.size());
      s.old_ranks_.push_back(o);
    }
    auto mesh = SocketMesh::create(static_cast<int>(s.old_ranks_.size()));
    if (!mesh.ok()) return mesh.status();
    s.mesh_.emplace(std::move(mesh).value());
    return s;
  }
  bool lost(int old_rank) const { return new_rank_[size_t(old_rank)] < 0; }
  int new_rank(int old_rank) const { return new_rank_[size_t(old_rank)]; }
  const std::vector<int>& old_ranks() const { return old_ranks_; }  // by new rank
  // In a survivor's process: its end of the new group.
  std::shared_ptr<RankGroup> group(int old_rank) { return mesh_->take(new_rank(old_rank)); }

 private:
  std::vector<int> new_rank_, old_ranks_;
  std::optional<SocketMesh> mesh_;
};

// A survivor moves its checkpointer onto the new group (as the new rank `rank`), registers an
// empty `state` in the layout `next` and moves the newest state of the old world into it from
// memory.
Result<LoadResult> move_into(Checkpointer& ck, std::shared_ptr<RankGroup> group,
                             const std::vector<int>& old_ranks, ModelState& state, Layout next,
                             int rank) {
  TSR_RETURN_IF_ERROR(ck.rebind_shrunk(std::move(group), old_ranks));
  ck.registry().clear();
  state = ModelState();
  TSR_RETURN_IF_ERROR(state.register_in(ck.registry(), next, rank, -1));  // zeros
  return ck.reshard_from_memory();
}

// The model of step `step` saved (committed, replicated to the buddies) by 4 ranks under
// `before`; then the ranks in `dead` exit and every survivor runs `after(old_rank, new_rank,
// new_group, checkpointer, state)` in a group of the survivors.
using AfterLoss =
    std::function<int(int, int, std::shared_ptr<RankGroup>, Checkpointer&, ModelState&)>;
std::vector<testing::RankExit> lose_ranks(const std::string& dir, Layout before, int64_t step,
                                          const std::vector<int>& dead, const AfterLoss& after) {
  auto survivors = Survivors::of(dead);
  if (!survivors.ok()) {
    ADD_FAILURE() << "the survivors' group: " << survivors.status().to_string();
    return {};
  }
  return run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(replica_options(dir), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), before, rank, step));
    RANK_OK((*ck)->save_async(step));
    RANK_OK((*ck)->wait()->status);
    if (survivors->lost(rank)) return 0;  // dies: its memory is gone with it
    return after(rank, survivors->new_rank(rank), survivors->group(rank), **ck, state);
  });
}

// Rank 3 dies; ranks 0-2 move the state of step 7 from (tp=4) into (tp=1, dp=3): the parts of
// rank 3's slices come from rank 0's replica, nothing from storage. The new world then restores
// from its own memory and saves; that checkpoint, gathered whole, is the state of step 7.
TEST(ShrinkReshard, ThreeSurvivorsOfFourAssembleTheNewLayoutFromSnapshotsAndTheLostRanksReplica) {
  ScratchDir dir("shrink3");
  const Layout next{1, 3};
  auto exits =
      lose_ranks(dir.path(), Layout{4, 1}, 7, {3},
                 [&](int old_rank, int rank, std::shared_ptr<RankGroup> group, Checkpointer& ck,
                     ModelState& state) {
                   auto moved = move_into(ck, group, {0, 1, 2}, state, next, rank);
                   RANK_OK(moved);
                   RANK_CHECK(ck.group().size() == 3, "still in the old group");
                   RANK_CHECK(moved->step == 7 && moved->bytes_read == 0,
                              "resharded step " + std::to_string(moved->step));
                   const std::string diff = state.check(next, rank, 7, old_rank);
                   RANK_CHECK(diff.empty(), diff);
                   // The snapshot in the new layout stands for step 7 in the new world.
                   state.fill(next, rank, 9);
                   auto restored = ck.restore();
                   RANK_OK(restored);
                   RANK_CHECK(restored->detail == "own memory", restored->detail);
                   RANK_CHECK(state.check(next, rank, 7, old_rank).empty(), "after restore");
                   RANK_OK(ck.save_async(8));
                   auto saved = ck.wait();
                   RANK_OK(saved);
                   RANK_OK(saved->status);
                   RANK_CHECK(!saved->delta, "the first save of the new world is a delta");
                   return 0;
                 });
  expect_all_exited_zero(exits);
  auto ck = Checkpointer::create(replica_options(dir.path()), std::make_shared<SingleRankGroup>());
  ASSERT_TRUE(ck.ok());
  ModelState whole;
  ASSERT_TRUE(whole.register_in((*ck)->registry(), Layout{1, 1}, 0, -1).ok());
  auto loaded = (*ck)->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 8);
  EXPECT_EQ(whole.check(Layout{1, 1}, 0, 7, -1), "");
}

// A layout of the trainer's own choosing, not a placement rule: after the middle rank dies,
// `w` (split 4 ways by rows before) lives whole on new rank 0, `m` (4 ways by columns before)
// 2 ways by rows on new ranks 1 and 2 only, `bias` everywhere.
struct UnevenState {
  static const std::vector<testing::TensorSpec>& specs() {
    static const std::vector<testing::TensorSpec> s = {
        {"w", hal::DType::kF32, {12, 6}},
        {"m", hal::DType::kF32, {8, 8}},
        {"bias", hal::DType::kBF16, {10}},
    };
    return s;
  }
  // The slice `rank` holds of tensor `i`, or none; `survivors`: the layout after the loss.
  static std::optional<Slice> slice_of(size_t i, int rank, bool survivors) {
    const auto& spec = specs()[i];
    const Slice whole = full_slice(spec.shape);
    if (i == 2) return whole;
    if (!survivors) return split_slice(spec.shape, whole, i == 0 ? 0 : 1, 4, rank).value();
    if (i == 0) return rank == 0 ? std::optional<Slice>(whole) : std::nullopt;
    if (rank == 0) return std::nullopt;
    return split_slice(spec.shape, whole, 0, 2, rank - 1).value();
  }

  std::vector<std::vector<std::byte>> tensors;
  std::string cursor;

  Status register_in(StateRegistry& reg, int rank, bool survivors, int64_t step) {
    tensors.clear();
    tensors.reserve(specs().size());
    for (size_t i = 0; i < specs().size(); ++i) {
      auto slice = slice_of(i, rank, survivors);
      if (!slice) continue;
      const auto& spec = specs()[i];
      tensors.push_back(step >= 0 ? testing::pattern(spec, *slice, step)
                                  : std::vector<std::byte>(size_t(slice->elements()) *
                                                           hal::dtype_size(spec.dtype)));
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(spec.name, spec.dtype, spec.shape, *slice,
                                              tensors.back().data(), /*replicated=*/i == 2));
    }
    cursor = step >= 0 ? ModelState::cursor_of(step) : "";
    return reg.add_blob("cursor", &cursor, /*replicated=*/true);
  }

  std::string check(int rank, bool survivors, int64_t step) const {
    size_t k = 0;
    for (size_t i = 0; i < specs().size(); ++i) {
      auto slice = slice_of(i, rank, survivors);
      if (!slice) continue;
      if (tensors[k++] != testing::pattern(specs()[i], *slice, step)) {
        return std::string("tensor '") + specs()[i].name + "' differs from step " +
               std::to_string(step) + " on rank " + std::to_string(rank);
      }
    }
    return cursor == ModelState::cursor_of(step) ? "" : "cursor blob is '" + cursor + "'";
  }
};

TEST(ShrinkReshard, AfterTheMiddleRankDiesAnUnevenLayoutGetsItsPartsFromTheBuddysReplica) {
  ScratchDir dir("shrink_uneven");
  auto survivors = Survivors::of({1});
  ASSERT_TRUE(survivors.ok());
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(replica_options(dir.path()), group);
    RANK_OK(ck);
    UnevenState state;
    RANK_OK(state.register_in((*ck)->registry(), rank, false, 5));
    RANK_OK((*ck)->save_async(5));
    RANK_OK((*ck)->wait()->status);
    if (survivors->lost(rank)) return 0;  // dies; its slices live on in old rank 2's replica
    const int new_rank = survivors->new_rank(rank);
    RANK_OK((*ck)->rebind_shrunk(survivors->group(rank), survivors->old_ranks()));
    (*ck)->registry().clear();
    UnevenState next;
    RANK_OK(next.register_in((*ck)->registry(), new_rank, true, -1));
    auto moved = (*ck)->reshard_from_memory();
    RANK_OK(moved);
    RANK_CHECK(moved->step == 5, "resharded step " + std::to_string(moved->step));
    const std::string diff = next.check(new_rank, true, 5);
    RANK_CHECK(diff.empty(), diff);
    return 0;
  });
  expect_all_exited_zero(exits);
}

// Step 6 commits (and is replicated); the save of step 7 aborts on every rank, and rank 3 is
// lost. The survivors' newest snapshots are of step 7, but rank 3's state survives only as
// step 6 in rank 0's replica: the survivors go back to step 6, which they also still hold.
TEST(ShrinkReshard, ARankLostDuringASaveCostsThatSaveNotTheMemoryCopy) {
  ScratchDir dir("shrink_midsave");
  auto survivors = Survivors::of({3});
  ASSERT_TRUE(survivors.ok());
  const Layout before{2, 2}, next{1, 3};
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    bool fail_saves = false;
    CheckpointOptions o = replica_options(dir.path());
    if (rank == 0) {
      o.fault_hook = [&](FaultPoint p) {
        return fail_saves && p == FaultPoint::kAfterShards ? unavailable("injected: rank 3 lost")
                                                           : Status();
      };
    }
    auto ck = Checkpointer::create(o, group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), before, rank, 6));
    RANK_OK((*ck)->save_async(6));
    RANK_OK((*ck)->wait()->status);
    state.fill(before, rank, 7);
    fail_saves = true;
    RANK_OK((*ck)->save_async(7));
    auto aborted = (*ck)->wait();
    RANK_OK(aborted);
    RANK_CHECK(!aborted->status.ok(), "the save of step 7 committed");
    if (survivors->lost(rank)) return 0;
    auto moved = move_into(**ck, survivors->group(rank), survivors->old_ranks(), state, next, rank);
    RANK_OK(moved);
    RANK_CHECK(moved->step == 6, "resharded step " + std::to_string(moved->step));
    const std::string diff = state.check(next, rank, 6, rank);
    RANK_CHECK(diff.empty(), diff);
    return 0;
  });
  expect_all_exited_zero(exits);
}

// Ranks 2 and 3 die: rank 3's state is in rank 0's replica, but rank 2's copy died with rank 3.
// Both survivors are told that old rank 2's state is lost; saving is refused until they recover;
// loading from storage into the 2-rank layout recovers, and the job saves again.
TEST(ShrinkReshard, TwoAdjacentLostRanksNameTheLostStateOnEverySurvivorAndStorageServes) {
  ScratchDir dir("shrink_lost");
  const Layout next{2, 1};
  auto exits = lose_ranks(
      dir.path(), Layout{4, 1}, 7, {2, 3},
      [&](int, int rank, std::shared_ptr<RankGroup> group, Checkpointer& ck, ModelState& state) {
        auto moved = move_into(ck, group, {0, 1}, state, next, rank);
        RANK_CHECK(!moved.ok(), "resharded without old rank 2's state");
        const Status& s = moved.status();
        RANK_CHECK(s.code() == StatusCode::kDataLoss, s.to_string());
        RANK_CHECK(s.message().find("old rank(s) 2 at step 7 is in no survivor's memory") !=
                       std::string::npos,
                   s.to_string());
        RANK_CHECK(
            s.message().find("old rank 2: no survivor holds its replica") != std::string::npos,
            s.to_string());
        auto refused = ck.save_async(8);
        RANK_CHECK(!refused.ok() && refused.status().code() == StatusCode::kFailedPrecondition,
                   "saved before recovering: " + refused.status().to_string());
        auto loaded = ck.load();
        RANK_OK(loaded);
        RANK_CHECK(loaded->step == 7 && loaded->bytes_read > 0, "loaded from storage?");
        const std::string diff = state.check(next, rank, 7, -1);
        RANK_CHECK(diff.empty(), diff);
        RANK_OK(ck.save_async(8));
        RANK_OK(ck.wait()->status);
        return 0;
      });
  expect_all_exited_zero(exits);
}

// Survivor 1 restarted (a fresh Checkpointer, no memory): the survivors share no snapshot step,
// and every one of them is told which rank holds which steps.
TEST(ShrinkReshard, SurvivorsWithoutACommonStepAreToldEveryRanksSteps) {
  ScratchDir dir("shrink_steps");
  auto survivors = Survivors::of({3});
  ASSERT_TRUE(survivors.ok());
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto created = Checkpointer::create(replica_options(dir.path()), group);
    RANK_OK(created);
    std::unique_ptr<Checkpointer> ck = std::move(created).value();
    ModelState state;
    RANK_OK(state.register_in(ck->registry(), Layout{4, 1}, rank, 7));
    RANK_OK(ck->save_async(7));
    RANK_OK(ck->wait()->status);
    if (survivors->lost(rank)) return 0;
    if (rank == 1) {
      ck.reset();
      auto fresh = Checkpointer::create(replica_options(dir.path()), group);
      RANK_OK(fresh);
      ck = std::move(fresh).value();
    }
    auto moved =
        move_into(*ck, survivors->group(rank), survivors->old_ranks(), state, Layout{1, 3}, rank);
    RANK_CHECK(!moved.ok(), "resharded without a common step");
    const std::string& m = moved.status().message();
    RANK_CHECK(moved.status().code() == StatusCode::kFailedPrecondition &&
                   m.find("rank 0 (old rank 0) holds step(s) 7") != std::string::npos &&
                   m.find("rank 1 (old rank 1) holds no snapshot") != std::string::npos,
               moved.status().to_string());
    return 0;
  });
  expect_all_exited_zero(exits);
}

// The survivors must agree on who they were: different lists fail on every survivor, naming them.
TEST(ShrinkReshard, SurvivorsPassingDifferentOldRankListsAreAllRefused) {
  ScratchDir dir("shrink_lists");
  auto exits = lose_ranks(
      dir.path(), Layout{4, 1}, 7, {3},
      [&](int, int rank, std::shared_ptr<RankGroup> group, Checkpointer& ck, ModelState&) {
        const std::vector<int> list =
            rank == 1 ? std::vector<int>{3, 1, 2} : std::vector<int>{0, 1, 2};
        Status s = ck.rebind_shrunk(group, list);
        RANK_CHECK(s.code() == StatusCode::kInvalidArgument, s.to_string());
        RANK_CHECK(s.message().find("rank 1: passed old_rank_of [3,1,2]") != std::string::npos ||
                       s.message().find("passed [3, 1, 2]") != std::string::npos,
                   s.to_string());
        RANK_CHECK(ck.group().size() == 4, "rebound although refused");
        return 0;
      });
  expect_all_exited_zero(exits);
}

TEST(ShrinkReshard, RefusesAGroupThatIsNotSmallerOrAListThatDoesNotFit) {
  ScratchDir dir("shrink_args");
  auto ck = Checkpointer::create(replica_options(dir.path()), std::make_shared<SingleRankGroup>());
  ASSERT_TRUE(ck.ok());
  Status same = (*ck)->rebind_shrunk(std::make_shared<SingleRankGroup>(), {0});
  EXPECT_EQ(same.code(), StatusCode::kInvalidArgument) << same.to_string();
  EXPECT_NE(same.message().find("not fewer than the 1 of the old one"), std::string::npos)
      << same.message();
  EXPECT_EQ((*ck)->rebind_shrunk(nullptr, {}).code(), StatusCode::kInvalidArgument);
}

// Device tensors on a discrete host device (a CPU access faults): rank 1 of (tp=2, dp=2) dies and
// its device state reaches the new (dp=3) layout through old rank 2's replica in host memory.
TEST(ShrinkReshardDevice, DeviceTensorsOfALostRankComeBackFromItsBuddysReplica) {
  ScratchDir dir("shrink_device");
  auto survivors = Survivors::of({1});
  ASSERT_TRUE(survivors.ok());
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    // Each forked rank opens its own platform (backend threads do not survive fork).
    auto platform = testing::discrete_platform(1);
    RANK_OK(platform);
    const hal::Device& device = (*platform)->devices()[0];
    CheckpointOptions o = replica_options(dir.path());
    o.device = device;
    auto ck = Checkpointer::create(o, group);
    RANK_OK(ck);
    auto model = testing::DeviceModel::create(device);
    RANK_OK(model);
    RANK_OK((*model)->register_in((*ck)->registry(), Layout{2, 2}, rank, 4));
    RANK_OK((*ck)->save_async(4));
    RANK_OK((*ck)->wait()->status);
    if (survivors->lost(rank)) return 0;
    const int new_rank = survivors->new_rank(rank);
    RANK_OK((*ck)->rebind_shrunk(survivors->group(rank), survivors->old_ranks()));
    (*ck)->registry().clear();
    auto next = testing::DeviceModel::create(device);
    RANK_OK(next);
    RANK_OK((*next)->register_in((*ck)->registry(), Layout{1, 3}, new_rank, -1));
    auto moved = (*ck)->reshard_from_memory();
    RANK_OK(moved);
    RANK_CHECK(moved->step == 4, "resharded step " + std::to_string(moved->step));
    const std::string diff = (*next)->check(Layout{1, 3}, new_rank, 4, rank);
    RANK_CHECK(diff.empty(), "after the shrink: " + diff);
    return 0;
  });
  expect_all_exited_zero(exits);
}

}  // namespace
}  // namespace tessera::ckpt
