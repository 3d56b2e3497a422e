// The checkpointer over the collectives: CommRankGroup's allgather and send/recv, and a save under
// (tp=2, dp=2) loaded under (tp=1, dp=4) with every rank coordinating through a Communicator.
#include <gtest/gtest.h>

#include <iterator>
#include <memory>
#include <string>

#include "../collectives/support/multiprocess.h"
#include "support/model_state.h"
#include "support/test_util.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/comm_rank_group.h"

namespace tessera::ckpt {
namespace {

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return 1;
}

void expect_ok(const std::vector<coll::testing::RankResult>& results, int n) {
  ASSERT_EQ(results.size(), size_t(n));
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank;
}

TEST(CommRankGroup, AllgatherAndSendRecvCarryVariableSizedBytes) {
  expect_ok(coll::testing::run_ranks(
                3,
                [](int rank, int n) {
                  auto comm = coll::testing::child_communicator(rank, n);
                  if (!comm) return 2;
                  CommRankGroup group(comm);
                  auto all = group.allgather(std::string(size_t(rank) * 1000, char('a' + rank)));
                  if (!all.ok()) return fail(rank, all.status().to_string());
                  for (int r = 0; r < n; ++r) {
                    if ((*all)[size_t(r)] != std::string(size_t(r) * 1000, char('a' + r))) {
                      return fail(rank, "allgather entry " + std::to_string(r));
                    }
                  }
                  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
                  const std::string mine = "from " + std::to_string(rank);
                  Status sent = rank % 2 == 0 ? group.send(next, mine) : Status();
                  auto got = group.recv(prev);
                  if (rank % 2 == 1) sent = group.send(next, mine);
                  if (!sent.ok() || !got.ok()) return fail(rank, "send/recv");
                  if (*got != "from " + std::to_string(prev)) return fail(rank, "recv got " + *got);
                  return group.barrier().ok() ? 0 : 1;
                }),
            3);
}

// recv_into reuses the caller's string: messages that grow past its capacity, shrink, stay the
// same size and are empty arrive whole, and nothing of an earlier, longer message remains.
TEST(CommRankGroup, RecvIntoOneStringCarriesMessagesThatGrowAndShrink) {
  expect_ok(coll::testing::run_ranks(
                2,
                [](int rank, int n) {
                  auto comm = coll::testing::child_communicator(rank, n);
                  if (!comm) return 2;
                  CommRankGroup group(comm);
                  const size_t sizes[] = {1000, 300000, 300000, 17, 0, 300001};
                  auto message = [](size_t i, size_t bytes) {
                    std::string m(bytes, '\0');
                    for (size_t k = 0; k < bytes; ++k) m[k] = char((k * 131 + i * 7) & 0xff);
                    return m;
                  };
                  std::string into = "stale";
                  for (size_t i = 0; i < std::size(sizes); ++i) {
                    const std::string expected = message(i, sizes[i]);
                    if (rank == 0) {
                      if (!group.send(1, expected).ok()) return fail(rank, "send");
                      continue;
                    }
                    Status got = group.recv_into(0, &into);
                    if (!got.ok()) return fail(rank, got.to_string());
                    if (into != expected) {
                      return fail(rank, "message " + std::to_string(i) + ": " +
                                            std::to_string(into.size()) + " bytes, expected " +
                                            std::to_string(expected.size()) + " or other content");
                    }
                  }
                  return group.barrier().ok() ? 0 : 1;
                }),
            2);
}

// The peer replica through a Communicator: from the third save on, a replica is received into the
// buffer an older one left (Replica::spare, src/impl.h); a rank restarted after four saves gets
// the fourth step's state from its buddy's memory, bitwise.
TEST(CommRankGroup, PeerReplicaReusingItsBufferRestoresTheNewestStepFromTheBuddy) {
  testing::ScratchDir dir("comm_replica");
  const testing::Layout layout{2, 1};
  expect_ok(coll::testing::run_ranks(
                2,
                [&](int rank, int n) {
                  auto comm = coll::testing::child_communicator(rank, n);
                  if (!comm) return 2;
                  auto group = std::make_shared<CommRankGroup>(comm);
                  CheckpointOptions o;
                  o.dir = dir.path();
                  o.chunk_bytes = 1024;
                  o.fsync = false;
                  o.peer_replica = true;
                  auto ck = Checkpointer::create(o, group);
                  if (!ck.ok()) return fail(rank, ck.status().to_string());
                  std::unique_ptr<Checkpointer> checkpointer = std::move(ck).value();
                  testing::ModelState state;
                  if (!state.register_in(checkpointer->registry(), layout, rank, 1).ok()) {
                    return fail(rank, "register");
                  }
                  for (int64_t step = 1; step <= 4; ++step) {
                    state.fill(layout, rank, step);
                    if (!checkpointer->save_async(step).ok()) return fail(rank, "save_async");
                    auto saved = checkpointer->wait();
                    if (!saved.ok() || !saved->status.ok()) return fail(rank, "save");
                  }
                  if (rank == 1) {  // restarted: its memory and its checkpointer are gone
                    checkpointer.reset();
                    auto fresh = Checkpointer::create(o, group);
                    if (!fresh.ok()) return fail(rank, fresh.status().to_string());
                    checkpointer = std::move(fresh).value();
                    state = testing::ModelState();
                    if (!state.register_in(checkpointer->registry(), layout, rank, -1).ok()) {
                      return fail(rank, "register after the restart");
                    }
                  } else {
                    state.fill(layout, rank, 5);  // trained on past the last checkpoint
                  }
                  auto restored = checkpointer->restore();
                  if (!restored.ok()) return fail(rank, restored.status().to_string());
                  if (restored->step != 4 || !restored->from_peer ||
                      (rank == 1 && restored->detail != "memory of rank 0")) {
                    return fail(rank, "restored step " + std::to_string(restored->step) + " from " +
                                          restored->detail);
                  }
                  const std::string diff = state.check(layout, rank, 4, rank);
                  return diff.empty() ? 0 : fail(rank, "after the peer restore: " + diff);
                }),
            2);
}

void phase(const std::string& dir, testing::Layout layout, bool first) {
  expect_ok(coll::testing::run_ranks(
                layout.size(),
                [&](int rank, int n) {
                  auto comm = coll::testing::child_communicator(rank, n);
                  if (!comm) return 2;
                  CheckpointOptions o;
                  o.dir = dir;
                  o.chunk_bytes = 1024;
                  auto ck = Checkpointer::create(o, std::make_shared<CommRankGroup>(comm));
                  if (!ck.ok()) return fail(rank, ck.status().to_string());
                  testing::ModelState state;
                  if (!state.register_in((*ck)->registry(), layout, rank, first ? 10 : -1).ok()) {
                    return fail(rank, "register");
                  }
                  if (!first) {
                    auto loaded = (*ck)->load();
                    if (!loaded.ok()) return fail(rank, loaded.status().to_string());
                    const std::string diff = state.check(layout, rank, 10, rank);
                    if (!diff.empty()) return fail(rank, diff);
                    return 0;
                  }
                  if (!(*ck)->save_async(1).ok()) return fail(rank, "save_async");
                  auto saved = (*ck)->wait();
                  if (!saved.ok() || !saved->status.ok()) return fail(rank, "save");
                  return 0;
                }),
            layout.size());
}

TEST(CommRankGroup, SaveUnderTp2Dp2LoadUnderTp1Dp4) {
  testing::ScratchDir dir("comm_group");
  phase(dir.path(), testing::Layout{2, 2}, true);
  phase(dir.path(), testing::Layout{1, 4}, false);
}

}  // namespace
}  // namespace tessera::ckpt
