// Several ranks as processes over socketpairs: resharding between layouts, a failure on one rank
// aborting the save on all, disk full, SIGKILL at random moments and at each commit point, and
// restoring a restarted rank from its buddy's memory.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "support/model_state.h"
#include "support/rank_check.h"
#include "support/socket_rank_group.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"

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
  // Tests run in parallel: a nice persist thread would wait for the other tests' CPU.
  o.persist_priority = PersistPriority::kNormal;
  return o;
}

// Loads `dir` into one process holding every global tensor whole: the gathered state.
Result<int64_t> load_gathered(const std::string& dir, int64_t expect_content_step) {
  auto ck = Checkpointer::create(options_for(dir), std::make_shared<SingleRankGroup>());
  if (!ck.ok()) return ck.status();
  ModelState state;
  TSR_RETURN_IF_ERROR(state.register_in((*ck)->registry(), Layout{1, 1}, 0, -1));
  TSR_ASSIGN_OR_RETURN(LoadResult r, (*ck)->load());
  const int64_t content = expect_content_step >= 0 ? expect_content_step : r.step;
  std::string diff = state.check(Layout{1, 1}, 0, content, 0);
  if (!diff.empty())
    return data_loss("gathered state of step " + std::to_string(r.step) + ": " + diff);
  return r.step;
}

// One phase of the reshard test: register under `layout`, load what is there (content of step
// 10) unless this is the first phase, check it bitwise, and save it as `save_step`.
void reshard_phase(const std::string& dir, Layout layout, bool first, int64_t save_step) {
  auto exits = run_ranks(layout.size(), [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir), group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), layout, rank, first ? 10 : -1));
    if (!first) {
      auto loaded = (*ck)->load();
      RANK_OK(loaded);
      RANK_CHECK(loaded->step == save_step - 1, "loaded the wrong step");
      const std::string diff = state.check(layout, rank, 10, rank);
      RANK_CHECK(diff.empty(), diff);
      // Only the overlapping chunks are read (column slices of row-major tensors need most
      // chunks; row slices only theirs).
      Manifest m = read_manifest(dir, loaded->step).value();
      size_t total = 0;
      for (const auto& t : m.tensors) {
        for (const auto& s : t.shards) total += s.chunks.size();
      }
      RANK_CHECK(layout.tp == 1 || loaded->chunks_read < total,
                 "read all " + std::to_string(total) + " chunks");
    }
    RANK_OK((*ck)->save_async(save_step));
    auto saved = (*ck)->wait();
    RANK_OK(saved);
    RANK_OK(saved->status);
    return 0;
  });
  expect_all_exited_zero(exits);
}

TEST(Reshard, SavedUnderTp2Dp2LoadsUnderTp1Dp4AndTp4Dp1AndBackBitwise) {
  ScratchDir dir("reshard");
  reshard_phase(dir.path(), Layout{2, 2}, true, 11);
  reshard_phase(dir.path(), Layout{1, 4}, false, 12);
  reshard_phase(dir.path(), Layout{4, 1}, false, 13);
  reshard_phase(dir.path(), Layout{2, 2}, false, 14);
  auto gathered = load_gathered(dir.path(), 10);
  ASSERT_TRUE(gathered.ok()) << gathered.status().to_string();
  EXPECT_EQ(*gathered, 14);
  Manifest m = read_manifest(dir.path(), 14).value();
  EXPECT_EQ(m.world_size, 4);
  // Replicated tensors are written once: w1 has one shard per tp rank under (2,2).
  EXPECT_EQ(m.find_tensor("w1")->shards.size(), 2u);
  EXPECT_EQ(m.find_tensor("adam_m")->shards.size(), 4u);
  EXPECT_EQ(m.find_tensor("bias")->shards.size(), 1u);
}

TEST(Abort, AFailedSaveOnOneRankAbortsItOnAllAndTrainingContinues) {
  ScratchDir dir("abort");
  auto exits = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    bool armed = false;
    CheckpointOptions o = options_for(dir.path());
    o.fault_hook = [&](FaultPoint point) {
      if (armed && rank == 2 && point == FaultPoint::kMidShard) {
        return resource_exhausted("disk on fire");
      }
      return Status();
    };
    auto ck = Checkpointer::create(o, group);
    RANK_OK(ck);
    ModelState state;
    RANK_OK(state.register_in((*ck)->registry(), Layout{2, 2}, rank, 1));
    RANK_OK((*ck)->save_async(1));
    RANK_OK((*ck)->wait()->status);
    armed = true;
    state.fill(Layout{2, 2}, rank, 2);
    RANK_OK((*ck)->save_async(2));
    SaveResult failed = (*ck)->wait().value();
    RANK_CHECK(!failed.status.ok(), "step 2 committed despite rank 2's failure");
    RANK_CHECK(failed.status.message().find("rank 2: ") != std::string::npos &&
                   failed.status.message().find("disk on fire") != std::string::npos,
               "the error does not name rank 2: " + failed.status.message());
    RANK_CHECK(read_latest(dir.path()).value() == 1, "latest moved");
    RANK_OK(group->barrier());
    RANK_CHECK(!std::filesystem::exists(dir / "step-2.tmp"), "step-2.tmp left behind");
    armed = false;
    state.fill(Layout{2, 2}, rank, 3);
    RANK_OK((*ck)->save_async(3));
    RANK_OK((*ck)->wait()->status);
    return 0;
  });
  expect_all_exited_zero(exits);
  EXPECT_EQ(read_latest(dir.path()).value(), 3);
  auto gathered = load_gathered(dir.path(), 3);
  EXPECT_TRUE(gathered.ok()) << gathered.status().to_string();
}

TEST(DiskFull, ASaveThatRunsOutOfSpaceFailsOnEveryRankAndLeavesThePreviousOne) {
  ScratchDir scratch("diskfull");
  const std::string dir = scratch / "tmpfs";
  std::filesystem::create_directories(dir);
  std::fflush(nullptr);
  pid_t supervisor = ::fork();
  if (supervisor == 0) {
    // A private mount namespace, so the tmpfs disappears with this process.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
      std::fprintf(stderr, "cannot mount a tmpfs: %s\n", std::strerror(errno));
      ::_exit(77);
    }
    testing::TensorSpec spec{"x", hal::DType::kF32, {2, 1 << 16}};  // 256 KiB per rank
    auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
      CheckpointOptions o = options_for(dir);
      o.chunk_bytes = 64 << 10;
      o.keep_last = 1;
      auto ck = Checkpointer::create(o, group);
      RANK_OK(ck);
      Slice slice = split_slice(spec.shape, full_slice(spec.shape), 0, 2, rank).value();
      auto data = testing::pattern(spec, slice, 1);
      RANK_OK((*ck)->registry().add_host_tensor("x", spec.dtype, spec.shape, slice, data.data()));
      RANK_OK((*ck)->save_async(1));
      RANK_OK((*ck)->wait()->status);
      auto next = testing::pattern(spec, slice, 2);
      std::memcpy(data.data(), next.data(), next.size());
      RANK_OK((*ck)->save_async(2));
      SaveResult r = (*ck)->wait().value();
      RANK_CHECK(!r.status.ok(), "step 2 fit on a full disk?");
      RANK_CHECK(r.status.message().find("No space left on device") != std::string::npos,
                 "not ENOSPC: " + r.status.to_string());
      RANK_OK(group->barrier());
      RANK_CHECK(!std::filesystem::exists(dir + "/step-2.tmp"), "step-2.tmp left behind");
      RANK_CHECK(read_latest(dir).value() == 1, "latest moved");
      // Training continues: the previous checkpoint loads, bitwise.
      auto loaded = (*ck)->load();
      RANK_OK(loaded);
      RANK_CHECK(data == testing::pattern(spec, slice, 1), "step 1 differs after the failure");
      return 0;
    });
    int code = 0;
    for (const auto& e : exits) code |= e.code != 0;
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(supervisor, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "mounting a tmpfs is not permitted here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A rank that saves steps base+1, base+2, ... until it is killed or its group breaks.
int saving_rank(const std::string& dir, int64_t base, int rank, std::shared_ptr<RankGroup> group,
                std::function<Status(FaultPoint)> hook = {}, int keep_last = 2) {
  CheckpointOptions o = options_for(dir);
  o.fault_hook = std::move(hook);
  o.keep_last = keep_last;
  auto ck = Checkpointer::create(o, group);
  RANK_OK(ck);
  ModelState state;
  RANK_OK(state.register_in((*ck)->registry(), Layout{2, 1}, rank, base + 1));
  for (int64_t step = base + 1; step <= base + 40; ++step) {
    state.fill(Layout{2, 1}, rank, step);
    RANK_OK((*ck)->save_async(step));
    auto r = (*ck)->wait();
    if (!r->status.ok()) return 3;  // a peer died
  }
  return 0;
}

TEST(Kill, SigkillOfOneOrAllRanksAtRandomMomentsNeverBreaksTheLastCommittedCheckpoint) {
  const uint64_t seed = testing::test_seed("Kill.SigkillAtRandomMoments");
  std::mt19937_64 rng(seed);
  ScratchDir dir("kill");
  int64_t last_loaded = -1;
  int committed_this_trial = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const bool all = rng() % 2;
    const int victim = static_cast<int>(rng() % 2);
    const int delay_us = static_cast<int>(rng() % 40000);
    const int64_t base = trial * 1000;
    run_ranks(
        2,
        [&](int rank, std::shared_ptr<RankGroup> group) {
          return saving_rank(dir.path(), base, rank, group);
        },
        30,
        [&](const std::vector<pid_t>& pids) {
          ::usleep(delay_us);
          for (int r = 0; r < 2; ++r) {
            if (all || r == victim) ::kill(pids[r], SIGKILL);
          }
        });
    auto latest = read_latest(dir.path());
    if (!latest.ok() && last_loaded < 0) continue;  // killed before the first commit
    auto loaded = load_gathered(dir.path(), -1);
    ASSERT_TRUE(loaded.ok()) << "trial " << trial << " (seed " << seed
                             << "): " << loaded.status().to_string();
    EXPECT_GE(*loaded, last_loaded) << "trial " << trial;
    last_loaded = *loaded;
    if (*loaded > base) ++committed_this_trial;
  }
  std::printf("50 trials: in %d the killed job had committed a step of its own\n",
              committed_this_trial);
}

class KillAtPointTest : public ::testing::TestWithParam<std::tuple<FaultPoint, bool>> {};

TEST_P(KillAtPointTest, TheLastCommittedCheckpointSurvives) {
  // Copies, not structured bindings: lambdas capture these (clang 14 cannot capture a binding).
  const FaultPoint point = std::get<0>(GetParam());
  const bool all = std::get<1>(GetParam());
  const bool shard_point = point == FaultPoint::kMidShard || point == FaultPoint::kAfterShards;
  const int victim = shard_point ? 1 : 0;  // rank 0 alone reaches the commit points
  // The second save is killed; garbage collection first deletes something at the second save.
  const int kill_at = point == FaultPoint::kDuringGc ? 1 : 2;
  ScratchDir dir("killpoint");
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    int reached = 0;
    return saving_rank(
        dir.path(), 0, rank, group,
        [&, rank](FaultPoint at) {
          if (at == point && (all || rank == victim) && ++reached == kill_at) {
            ::kill(::getpid(), SIGKILL);
          }
          return Status();
        },
        /*keep_last=*/1);
  });
  EXPECT_EQ(exits[victim].signal, SIGKILL) << "the fault point was never reached";
  auto loaded = load_gathered(dir.path(), -1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  // GC runs after `latest` names the new step; every earlier point leaves step 1.
  EXPECT_EQ(*loaded, point == FaultPoint::kDuringGc ? 2 : 1);
}

INSTANTIATE_TEST_SUITE_P(Points, KillAtPointTest,
                         ::testing::Values(std::make_tuple(FaultPoint::kMidShard, false),
                                           std::make_tuple(FaultPoint::kMidShard, true),
                                           std::make_tuple(FaultPoint::kAfterShards, false),
                                           std::make_tuple(FaultPoint::kAfterShards, true),
                                           std::make_tuple(FaultPoint::kAfterManifest, false),
                                           std::make_tuple(FaultPoint::kDuringLatest, false),
                                           std::make_tuple(FaultPoint::kDuringGc, false)),
                         [](const auto& p) {
                           std::string name(fault_point_name(std::get<0>(p.param)));
                           std::erase(name, '-');
                           return name + (std::get<1>(p.param) ? "AllRanks" : "OneRank");
                         });

TEST(PeerReplica, ARestartedRankGetsItsStateFromItsBuddysMemory) {
  ScratchDir dir("replica");
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
    if (rank == 2) {
      // Rank 2 fails and restarts: its memory and its checkpointer are gone.
      checkpointer.reset();
      auto fresh = Checkpointer::create(o, group);
      RANK_OK(fresh);
      checkpointer = std::move(fresh).value();
      state = ModelState();
      RANK_OK(state.register_in(checkpointer->registry(), Layout{2, 2}, rank, -1));
    } else {
      state.fill(Layout{2, 2}, rank, 3);  // trained on past the last checkpoint
    }
    auto peer = checkpointer->restore();
    RANK_OK(peer);
    RANK_CHECK(peer->step == 2 && peer->from_peer, "restored " + peer->detail);
    RANK_CHECK(rank != 2 || peer->detail == "memory of rank 3", "rank 2 from " + peer->detail);
    std::string diff = state.check(Layout{2, 2}, rank, 2, rank);
    RANK_CHECK(diff.empty(), "after the peer restore: " + diff);
    state.fill(Layout{2, 2}, rank, 3);
    auto storage = checkpointer->load();
    RANK_OK(storage);
    diff = state.check(Layout{2, 2}, rank, 2, rank);
    RANK_CHECK(diff.empty(), "after the storage restore: " + diff);
    std::printf("rank %d: restore from %s %.6f s, from storage %.6f s\n", rank,
                peer->detail.c_str(), peer->seconds, storage->seconds);
    return 0;
  });
  expect_all_exited_zero(exits);
}

// Blob contents are raw bytes (RNG states): every byte value, through the peer replica (which used
// to put them in JSON strings: nlohmann's dump threw on the first invalid UTF-8 byte and killed
// every rank after its first save), back from the buddy's memory and from storage, bitwise.
TEST(PeerReplica, ABinaryBlobSavesRestoresFromTheBuddyAndLoadsBitwise) {
  ScratchDir dir("binaryblob");
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    CheckpointOptions o = options_for(dir.path());
    o.peer_replica = true;
    auto ck = Checkpointer::create(o, group);
    RANK_OK(ck);
    std::unique_ptr<Checkpointer> checkpointer = std::move(ck).value();
    std::vector<float> w(16, float(rank));
    std::string blob = all_bytes + char(rank);
    RANK_OK(checkpointer->registry().add_host_tensor("w" + std::to_string(rank), hal::DType::kF32,
                                                     {16}, full_slice({16}), w.data()));
    RANK_OK(checkpointer->registry().add_blob("rng", &blob));
    RANK_OK(checkpointer->save_async(1));
    RANK_OK(checkpointer->wait()->status);
    if (rank == 1) {  // restarts with empty memory: its state is in rank 0's replica
      checkpointer.reset();
      auto fresh = Checkpointer::create(o, group);
      RANK_OK(fresh);
      checkpointer = std::move(fresh).value();
      std::fill(w.begin(), w.end(), -1.0f);
      blob.clear();
      RANK_OK(checkpointer->registry().add_host_tensor("w1", hal::DType::kF32, {16},
                                                       full_slice({16}), w.data()));
      RANK_OK(checkpointer->registry().add_blob("rng", &blob));
    } else {
      blob = "trained on";
    }
    auto restored = checkpointer->restore();
    RANK_OK(restored);
    RANK_CHECK(restored->from_peer, "restored from " + restored->detail);
    RANK_CHECK(rank != 1 || restored->detail == "memory of rank 0", "from " + restored->detail);
    RANK_CHECK(blob == all_bytes + char(rank), "the blob after the peer restore differs");
    RANK_CHECK(w == std::vector<float>(16, float(rank)), "the tensor after the peer restore");
    blob.clear();
    RANK_OK(checkpointer->load());
    RANK_CHECK(blob == all_bytes + char(rank), "the blob after the storage load differs");
    return 0;
  });
  expect_all_exited_zero(exits);
}

// One tensor, two placements: the manifest records one, so the save is refused naming the rank.
TEST(Agreement, RanksRegisteringDifferentPlacementsForATensorAbortTheSave) {
  ScratchDir dir("placements");
  auto exits = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    auto ck = Checkpointer::create(options_for(dir.path()), group);
    RANK_OK(ck);
    std::vector<float> w(8 * 4);
    RANK_OK((*ck)->registry().add_host_tensor("w", hal::DType::kF32, {8, 4},
                                              Slice{{rank * 4, 0}, {4, 4}}, w.data()));
    RANK_OK((*ck)->registry().set_placement("w", Placement{.tp_dim = rank == 0 ? 0 : 1}));
    RANK_OK((*ck)->save_async(1));
    Status s = (*ck)->wait()->status;
    RANK_CHECK(!s.ok(), "the save succeeded");
    RANK_CHECK(s.message().find("tensor 'w': rank 1") != std::string::npos, s.to_string());
    return 0;
  });
  expect_all_exited_zero(exits);
}

}  // namespace
}  // namespace tessera::ckpt
