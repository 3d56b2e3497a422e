// The native route (collectives/src/native_route.h): device memory moved by the backend's own
// collective library, here the host backend's reference CCL (TESSERA_HOST_CCL=1) on discrete
// host devices whose pointers the CPU cannot touch. Covered: every operation and dtype of the
// correctness suite for 2 and 3 ranks, stream forms, split and group communicators, a peer
// killed in an operation, an abort on one rank, the timeout, the route choice under auto, the
// library in TESSERA_LOG=info, and native asked of a backend without a usable library. Each rank
// is a forked process that sets its backend environment before loading the backend.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "multi_rank.h"
#include "support/device_rank.h"
#include "support/multiprocess.h"
#include "tessera/common/log.h"
#include "tessera/hal/hal.h"

namespace tessera::coll {
namespace {

using testing::child_communicator;
using testing::run_ranks;

constexpr const char* kLibrary = "tessera host reference CCL";

using testing::expect_all_ok;
using Rank = testing::DeviceRank;

// The backend of one rank: `devices` discrete host devices, the reference CCL on or off.
std::optional<Rank> open_rank(const char* devices = "1:discrete", bool ccl = true) {
  return testing::open_device_rank(
      {{"TESSERA_HOST_DEVICES", devices}, {"TESSERA_HOST_CCL", ccl ? "1" : "0"}});
}

CommOptions native_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(600000)) {
  CommOptions o;
  o.device_path = "native";
  o.timeout = timeout;
  return o;
}

using testing::download;
using testing::upload;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- correctness: the suite's cases with the route forced to native ---------------------------

void expect_correctness_passes(int nranks) {
  testing::SpawnOptions o;
  o.binary = COLL_CORRECTNESS_RANK_BIN;
  o.nranks = nranks;
  o.deadline = std::chrono::milliseconds(240000);
  o.env = {{"TESSERA_COLL_TIMEOUT_MS", "30000"},
           {"TESSERA_HOST_DEVICES", "1:discrete"},
           {"TESSERA_HOST_CCL", "1"},
           {"TESSERA_COLL_DEVICE_PATH", "native"}};
  auto result = testing::spawn_ranks(o);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_FALSE(result->timed_out) << "hung: " << result->summary();
  for (const testing::RankExit& e : result->ranks) {
    EXPECT_TRUE(e.exited && e.code == 0) << result->summary() << " (each rank's report above)";
  }
}

TEST(NativeRoute, EveryCorrectnessCaseIsExactAcrossTwoRanks) {
  expect_correctness_passes(2);
}

TEST(NativeRoute, EveryCorrectnessCaseIsExactAcrossThreeRanks) {
  expect_correctness_passes(3);
}

// ---- the route and its choice -------------------------------------------------------------------

// The operations with a native form take it (reduce composed from allreduce); the v-variants are
// staged and barrier, which has no buffers, stays on the host route. Blocking reduce puts the
// result on the root only and leaves the other ranks' recv untouched.
TEST(NativeRoute, OperationsTakeTheNativeRouteAndReduceIsComposed) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = open_rank();
            CHILD_CHECK(r, "backend");
            auto comm = child_communicator(rank, n, native_options(), &*r->device);
            if (!comm) return 2;
            for (OpKind op :
                 {OpKind::kAllReduce, OpKind::kReduce, OpKind::kBroadcast, OpKind::kAllGather,
                  OpKind::kReduceScatter, OpKind::kAllToAll, OpKind::kSend, OpKind::kRecv}) {
              CHILD_CHECK(comm->route_for(op, true) == "native", "%s takes %s",
                          std::string(op_name(op)).c_str(),
                          std::string(comm->route_for(op, true)).c_str());
            }
            CHILD_CHECK(comm->route_for(OpKind::kAllGatherV, true) == "staged", "allgatherv");
            CHILD_CHECK(comm->route_for(OpKind::kAllToAllV, true) == "staged", "alltoallv");
            CHILD_CHECK(comm->route_for(OpKind::kAllReduce, false) == "host", "host memory");
            const size_t count = 3000;
            auto send = r->device->allocate(count * sizeof(float));
            auto recv = r->device->allocate(count * sizeof(float));
            CHILD_CHECK(send.ok() && recv.ok(), "allocate");
            CHILD_OK(upload(*r, send->data(), std::vector<float>(count, float(rank + 1))));
            CHILD_OK(upload(*r, recv->data(), std::vector<float>(count, -1.0f)));
            CHILD_OK(
                comm->reduce(send->data(), recv->data(), count, DType::kF32, ReduceOp::kSum, 1));
            auto got = download<float>(*r, recv->data(), count);
            CHILD_CHECK(got.ok(), "download");
            const float want = rank == 1 ? 3.0f : -1.0f;
            for (size_t i = 0; i < count; ++i) {
              CHILD_CHECK((*got)[i] == want, "reduce: element %zu is %g, expected %g", i,
                          double((*got)[i]), double(want));
            }
            // allgatherv (staged) between native operations: the ranks stay in step.
            const std::vector<size_t> counts = {5, 9}, displs = {0, 5};
            auto all = r->device->allocate(14 * sizeof(int32_t));
            auto mine = r->device->allocate(9 * sizeof(int32_t));
            CHILD_CHECK(all.ok() && mine.ok(), "allocate");
            CHILD_OK(
                upload(*r, mine->data(), std::vector<int32_t>(counts[size_t(rank)], rank + 7)));
            CHILD_OK(comm->allgatherv(mine->data(), all->data(), counts, displs, DType::kI32));
            auto gathered = download<int32_t>(*r, all->data(), 14);
            CHILD_CHECK(gathered.ok(), "download");
            for (size_t i = 0; i < 14; ++i) {
              CHILD_CHECK((*gathered)[i] == (i < 5 ? 7 : 8), "allgatherv: element %zu is %d", i,
                          (*gathered)[i]);
            }
            CHILD_OK(comm->barrier());
            CHILD_OK(
                comm->allreduce(send->data(), send->data(), count, DType::kF32, ReduceOp::kMax));
            const std::string record = comm->flight_record();
            CHILD_CHECK(contains(record, "route native") && contains(record, "route staged"),
                        "flight record:\n%s", record.c_str());
            return 0;
          }),
      2);
}

// auto takes the library when the device offers it and stages otherwise.
TEST(NativeRoute, AutoTakesTheLibraryOnlyWhenTheBackendOffersIt) {
  for (bool ccl : {true, false}) {
    expect_all_ok(run_ranks(2,
                            [ccl](int rank, int n) {
                              auto r = open_rank("1:discrete", ccl);
                              CHILD_CHECK(r, "backend");
                              auto comm = child_communicator(rank, n, {}, &*r->device);
                              if (!comm) return 2;
                              const std::string_view want = ccl ? "native" : "staged";
                              CHILD_CHECK(
                                  comm->route_for(OpKind::kAllReduce, true) == want,
                                  "ccl %d: allreduce takes %s", int(ccl),
                                  std::string(comm->route_for(OpKind::kAllReduce, true)).c_str());
                              return 0;
                            }),
                  2);
  }
}

// TESSERA_COLL_DEVICE_PATH=staged keeps device memory off the library even when it is there.
TEST(NativeRoute, StagedPathIsHonouredWithTheLibraryOn) {
  expect_all_ok(run_ranks(2,
                          [](int rank, int n) {
                            auto r = open_rank();
                            CHILD_CHECK(r, "backend");
                            setenv("TESSERA_COLL_DEVICE_PATH", "staged", 1);
                            auto comm = child_communicator(rank, n, {}, &*r->device);
                            if (!comm) return 2;
                            CHILD_CHECK(
                                comm->route_for(OpKind::kAllReduce, true) == "staged",
                                "allreduce takes %s",
                                std::string(comm->route_for(OpKind::kAllReduce, true)).c_str());
                            return 0;
                          }),
                2);
}

// TESSERA_LOG=info names the library once per communicator.
TEST(NativeRoute, InfoLogNamesTheLibraryOncePerCommunicator) {
  expect_all_ok(run_ranks(2,
                          [](int rank, int n) {
                            auto r = open_rank();
                            CHILD_CHECK(r, "backend");
                            const std::string path =
                                ::testing::TempDir() + "/native_log." + std::to_string(getpid());
                            std::fflush(stderr);
                            const int saved = dup(2);
                            FILE* file = std::fopen(path.c_str(), "w");
                            CHILD_CHECK(file != nullptr && saved >= 0, "log file");
                            dup2(fileno(file), 2);
                            log::configure(log::Level::kInfo, "coll");
                            auto comm = child_communicator(rank, n, native_options(), &*r->device);
                            std::shared_ptr<Communicator> sub;
                            if (comm) {
                              auto split = comm->split(0, rank);
                              if (split.ok()) sub = *split;
                            }
                            log::configure(log::Level::kWarn, "");
                            std::fflush(stderr);
                            dup2(saved, 2);
                            std::fclose(file);
                            std::ifstream in(path);
                            std::stringstream text;
                            text << in.rdbuf();
                            std::remove(path.c_str());
                            CHILD_CHECK(comm && sub, "create or split failed:\n%s",
                                        text.str().c_str());
                            const std::string needle = std::string("native route: ") + kLibrary;
                            size_t found = 0;
                            for (size_t at = text.str().find(needle); at != std::string::npos;
                                 at = text.str().find(needle, at + 1)) {
                              ++found;
                            }
                            // The world and the split communicator: one line each.
                            CHILD_CHECK(found == 2, "'%s' logged %zu times:\n%s", needle.c_str(),
                                        found, text.str().c_str());
                            return 0;
                          }),
                2);
}

// ---- refusals -----------------------------------------------------------------------------------

// native on a backend whose library is off is refused at creation, naming the backend, the
// library and how to turn it on.
TEST(NativeRoute, NativeWithoutAUsableLibraryIsRefusedByName) {
  expect_all_ok(
      run_ranks(1,
                [](int rank, int n) {
                  auto r = open_rank("1:discrete", /*ccl=*/false);
                  CHILD_CHECK(r, "backend");
                  LaunchInfo info;
                  auto store = connect_tcp_store("127.0.0.1",
                                                 std::atoi(std::getenv("TESSERA_TEST_STORE_PORT")),
                                                 std::chrono::milliseconds(10000));
                  CHILD_CHECK(store.ok(), "store");
                  auto comm =
                      Communicator::create(Bootstrap::from_parts(info, std::move(store.value())),
                                           *r->device, native_options());
                  CHILD_CHECK(!comm.ok(), "created");
                  const std::string m = comm.status().message();
                  CHILD_CHECK(comm.status().code() == StatusCode::kFailedPrecondition &&
                                  contains(m, "device path native") && contains(m, "host:0") &&
                                  contains(m, "backend host") && contains(m, kLibrary) &&
                                  contains(m, "TESSERA_HOST_CCL=1"),
                              "got %s", comm.status().to_string().c_str());
                  return 0;
                }),
      1);
}

// ---- streams ------------------------------------------------------------------------------------

// Operations queued behind stream work: each starts when the stream reaches it, another stream
// that waits on Work::event() sees the result, and every form (reduce composed) is exact.
TEST(NativeRoute, StreamFormsRunInStreamOrderAndTheirEventsOrderOtherStreams) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = open_rank("1:discrete");
            CHILD_CHECK(r, "backend");
            auto comm = child_communicator(rank, n, native_options(), &*r->device);
            if (!comm) return 2;
            const size_t count = 4096;
            auto a = r->device->allocate(count * sizeof(int32_t));
            auto b = r->device->allocate(2 * count * sizeof(int32_t));
            auto c = r->device->allocate(count * sizeof(int32_t));
            CHILD_CHECK(a.ok() && b.ok() && c.ok(), "allocate");
            CHILD_OK(upload(*r, a->data(), std::vector<int32_t>(count, rank + 1)));
            const hal::Stream& s = *r->stream;
            std::vector<Work> works;
            auto keep = [&](Result<Work> w) -> Status {
              TSR_RETURN_IF_ERROR(w.status());
              works.push_back(*w);
              return Status();
            };
            // The stream is busy first: the operations wait for it, in order.
            CHILD_OK(s.busy_wait(50 * 1000));
            CHILD_OK(keep(comm->allreduce(a->data(), a->data(), count, DType::kI32, ReduceOp::kSum,
                                          s)));                                            // 3
            CHILD_OK(keep(comm->allgather(a->data(), b->data(), count, DType::kI32, s)));  // 3 3
            CHILD_OK(keep(comm->reduce_scatter(b->data(), c->data(), count, DType::kI32,
                                               ReduceOp::kSum, s)));  // 6
            CHILD_OK(keep(comm->reduce(c->data(), a->data(), count, DType::kI32, ReduceOp::kSum, 0,
                                       s)));  // root 0: 12, rank 1: a unchanged (3)
            CHILD_OK(keep(comm->broadcast(a->data(), a->data(), count, DType::kI32, 0, s)));  // 12
            if (rank == 0) {
              CHILD_OK(keep(comm->send(a->data(), count, DType::kI32, 1, s)));
            } else {
              CHILD_OK(keep(comm->recv(c->data(), count, DType::kI32, 0, s)));  // 12
            }
            // In place (the library has no in-place alltoall: the route copies the input first).
            CHILD_OK(keep(comm->alltoall(b->data(), b->data(), count, DType::kI32, s)));
            // Another stream ordered after the last operation reads the result.
            auto other = r->device->create_stream();
            CHILD_CHECK(other.ok(), "stream");
            CHILD_OK(other->wait(works.back().event()));
            auto pinned = r->device->allocate_host(count * sizeof(int32_t));
            CHILD_CHECK(pinned.ok(), "pinned");
            CHILD_OK(other->copy(pinned->data(), a->data(), count * sizeof(int32_t)));
            CHILD_OK(other->synchronize());
            for (int32_t x : pinned->as<int32_t>()) CHILD_CHECK(x == 12, "a holds %d", x);
            for (const Work& w : works) CHILD_OK(w.wait(std::chrono::milliseconds(60000)));
            for (const Work& w : works) CHILD_CHECK(w.done(), "a Work is not done");
            if (rank == 1) {
              auto got = download<int32_t>(*r, c->data(), count);
              CHILD_CHECK(got.ok(), "download");
              for (int32_t x : *got) CHILD_CHECK(x == 12, "recv got %d", x);
            }
            auto blocks = download<int32_t>(*r, b->data(), 2 * count);
            CHILD_CHECK(blocks.ok(), "download");
            for (int32_t x : *blocks) CHILD_CHECK(x == 3, "alltoall left %d", x);
            const std::string record = comm->flight_record();
            CHILD_CHECK(contains(record, "route native"), "flight record:\n%s", record.c_str());
            return 0;
          },
          testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
      2);
}

// ---- sub-communicators --------------------------------------------------------------------------

// split and group make their own library communicators from their members: {0, 2} and {1} of
// three ranks, then a group of all three in reverse order, each exact on device memory.
TEST(NativeRoute, SplitAndGroupCommunicatorsHaveTheirOwn) {
  expect_all_ok(
      run_ranks(
          3,
          [](int rank, int n) {
            auto r = open_rank();
            CHILD_CHECK(r, "backend");
            auto comm = child_communicator(rank, n, native_options(), &*r->device);
            if (!comm) return 2;
            auto sub = comm->split(rank == 1 ? 1 : 0, rank);
            CHILD_CHECK(sub.ok() && *sub, "split: %s", sub.status().to_string().c_str());
            const int sub_size = rank == 1 ? 1 : 2;
            CHILD_CHECK((*sub)->size() == sub_size, "split size %d", (*sub)->size());
            CHILD_CHECK((*sub)->route_for(OpKind::kAllReduce, true) == "native", "split route");
            const size_t count = 5000;
            auto buf = r->device->allocate(count * sizeof(float));
            CHILD_CHECK(buf.ok(), "allocate");
            CHILD_OK(upload(*r, buf->data(), std::vector<float>(count, float(rank + 1))));
            CHILD_OK(
                (*sub)->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum));
            auto got = download<float>(*r, buf->data(), count);
            CHILD_CHECK(got.ok(), "download");
            const float want = rank == 1 ? 2.0f : 4.0f;  // {1+3} or {2}
            for (float x : *got)
              CHILD_CHECK(x == want, "split allreduce: %g, expected %g", double(x), double(want));
            const int order[] = {2, 1, 0};
            auto group = comm->group(order);
            CHILD_CHECK(group.ok() && *group, "group: %s", group.status().to_string().c_str());
            CHILD_CHECK((*group)->rank() == 2 - rank, "group rank %d", (*group)->rank());
            // Broadcast from group rank 0 (world rank 2).
            CHILD_OK(upload(*r, buf->data(), std::vector<float>(count, float(rank * 10))));
            CHILD_OK((*group)->broadcast(buf->data(), buf->data(), count, DType::kF32, 0));
            got = download<float>(*r, buf->data(), count);
            CHILD_CHECK(got.ok(), "download");
            for (float x : *got) CHILD_CHECK(x == 20.0f, "group broadcast: %g", double(x));
            // The parent still works after its children.
            CHILD_OK(comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum));
            got = download<float>(*r, buf->data(), count);
            CHILD_CHECK(got.ok() && (*got)[0] == 60.0f, "world allreduce");
            return 0;
          },
          testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
      3);
}

// ---- faults -------------------------------------------------------------------------------------

// Rank 1 queues its allreduce behind long stream work and is killed: the survivors, in the same
// allreduce (blocking on rank 0, on a stream on rank 2), fail naming rank 1 and the operation well
// within their 10-minute timeout, and the communicator refuses what follows.
TEST(NativeRoute, APeerKilledInAnOperationFailsTheSurvivorsNamingIt) {
  const auto results = run_ranks(
      3,
      [](int rank, int n) {
        auto r = open_rank();
        CHILD_CHECK(r, "backend");
        auto comm = child_communicator(rank, n, native_options(), &*r->device);
        if (!comm) return 2;
        const size_t count = 1 << 16;
        auto buf = r->device->allocate(count * sizeof(float));
        CHILD_CHECK(buf.ok(), "allocate");
        CHILD_OK(comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum));
        if (rank == 1) {
          CHILD_OK(r->stream->busy_wait(30 * 1000 * 1000));
          auto work = comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum,
                                      *r->stream);
          CHILD_CHECK(work.ok(), "%s", work.status().to_string().c_str());
          raise(SIGKILL);
        }
        Status s;
        if (rank == 0) {
          s = comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum);
        } else {
          auto work = comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum,
                                      *r->stream);
          CHILD_CHECK(work.ok(), "%s", work.status().to_string().c_str());
          s = work->wait();
        }
        CHILD_CHECK(
            !s.ok() && contains(s.message(), "rank 1") && contains(s.message(), "allreduce"),
            "survivor got %s", s.to_string().c_str());
        const Status after =
            comm->allreduce(buf->data(), buf->data(), count, DType::kF32, ReduceOp::kSum);
        CHILD_CHECK(after.code() == StatusCode::kAborted, "after the failure: %s",
                    after.to_string().c_str());
        return 0;
      },
      testing::MultiprocessOptions{std::chrono::milliseconds(120000), {}});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_EQ(results[2].exit_code, 0);
}

// Communicator::abort on rank 0 fails rank 1's pending native allreduce (blocking) and its
// stream operation, with rank 0's reason, long before the timeout.
TEST(NativeRoute, AnAbortOnOneRankFailsTheOthers) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = open_rank();
            CHILD_CHECK(r, "backend");
            auto comm = child_communicator(rank, n, native_options(), &*r->device);
            if (!comm) return 2;
            auto buf = r->device->allocate(4096);
            CHILD_CHECK(buf.ok(), "allocate");
            if (rank == 0) {
              // Rank 1 waits in a stream operation and a blocking one; neither can complete.
              comm->abort("rank 0 gives up (test)");
              const Status s =
                  comm->allreduce(buf->data(), buf->data(), 1024, DType::kF32, ReduceOp::kSum);
              CHILD_CHECK(s.code() == StatusCode::kAborted, "after abort: %s",
                          s.to_string().c_str());
              return 0;
            }
            auto work = comm->broadcast(buf->data(), buf->data(), 1024, DType::kF32, 0, *r->stream);
            CHILD_CHECK(work.ok(), "%s", work.status().to_string().c_str());
            const Status blocking =
                comm->allreduce(buf->data(), buf->data(), 1024, DType::kF32, ReduceOp::kSum);
            const Status queued = work->wait(std::chrono::milliseconds(60000));
            for (const Status* s : {&blocking, &queued}) {
              CHILD_CHECK(!s->ok() && contains(s->message(), "rank 0"),
                          "rank 1 got %s (blocking %s, queued %s)", s->to_string().c_str(),
                          blocking.to_string().c_str(), queued.to_string().c_str());
            }
            return 0;
          },
          testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
      2);
}

// A rank alone in an operation fails at the communicator's timeout naming the operation, the
// route and itself, aborts the library's communicator (the flight record shows the operation),
// and its peer, which never joined, finds the communicator aborted.
TEST(NativeRoute, TheTimeoutFailsTheOperationNamingRankAndOperation) {
  // Rank 1 stays alive (a peer that exited would be reported as such) until rank 0 is done.
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  expect_all_ok(run_ranks(
                    2,
                    [&done](int rank, int n) {
                      auto r = open_rank();
                      CHILD_CHECK(r, "backend");
                      auto comm = child_communicator(
                          rank, n, native_options(std::chrono::milliseconds(500)), &*r->device);
                      if (!comm) return 2;
                      auto buf = r->device->allocate(4096);
                      CHILD_CHECK(buf.ok(), "allocate");
                      if (rank == 1) {
                        close(done[1]);
                        char byte;
                        CHILD_CHECK(read(done[0], &byte, 1) == 1, "rank 0 did not finish");
                        return 0;
                      }
                      const Status s = comm->allgather(buf->data(), buf->data(), 256, DType::kF32);
                      CHILD_CHECK(
                          s.code() == StatusCode::kDeadlineExceeded &&
                              contains(s.message(), "allgather #0 (native route, " +
                                                        std::string(kLibrary) + ") on rank 0"),
                          "got %s", s.to_string().c_str());
                      const std::string record = comm->flight_record();
                      CHILD_CHECK(contains(record, "allgather") && contains(record, "route native"),
                                  "flight record:\n%s", record.c_str());
                      CHILD_CHECK(write(done[1], "x", 1) == 1, "release rank 1");
                      return 0;
                    },
                    testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
                2);
  close(done[0]);
  close(done[1]);
}

}  // namespace
}  // namespace tessera::coll
