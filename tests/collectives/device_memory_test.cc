// Collectives on device memory (docs/COLLECTIVES.md, "Memory"): the staged route on discrete host
// devices (TESSERA_HOST_DEVICES=N:discrete, pointers the CPU cannot touch), the refusals of wrong
// memory, and stream operations that hold no backend thread (TESSERA_HOST_CALLBACK_THREADS=1).
// Each rank is a forked process that sets its backend environment before loading the backend, so
// these tests mean the same under any ctest environment.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "support/device_rank.h"
#include "support/multiprocess.h"
#include "tessera/hal/hal.h"

namespace tessera::coll {
namespace {

using testing::child_communicator;
using testing::run_ranks;

using testing::expect_all_ok;
using Rank = testing::DeviceRank;

// One rank's backend: host:0 and a stream on it. `devices` is TESSERA_HOST_DEVICES.
std::optional<Rank> open_rank(const char* devices, const char* callback_threads = "0") {
  return testing::open_device_rank(
      {{"TESSERA_HOST_DEVICES", devices}, {"TESSERA_HOST_CALLBACK_THREADS", callback_threads}});
}

using testing::download;
using testing::upload;

float value(int rank, size_t i) {
  return float((rank + 1) * int(i % 11 + 1));
}

// ---- the staged route ---------------------------------------------------------------------------

// Chunks of 4096 bytes (1024 floats): counts below, at and past one chunk and several chunks,
// in place and out of place, allreduce / reduce / broadcast (the pipelined operations).
TEST(DeviceMemory, StagedChunkPipelineIsExactAcrossChunkBoundaries) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = open_rank("1:discrete");
            CHILD_CHECK(r, "backend");
            CommOptions options;
            options.stage_chunk_bytes = 4096;
            auto comm = child_communicator(rank, n, options, &*r->device);
            if (!comm) return 2;
            for (size_t count : {size_t(0), size_t(1), size_t(1023), size_t(1024), size_t(1025),
                                 size_t(3 * 1024 + 5)}) {
              for (bool in_place : {false, true}) {
                std::vector<float> in(count);
                for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
                auto send = r->device->allocate(std::max<size_t>(count, 1) * sizeof(float));
                auto recv = r->device->allocate(std::max<size_t>(count, 1) * sizeof(float));
                CHILD_CHECK(send.ok() && recv.ok(), "allocate");
                void* out = in_place ? send->data() : recv->data();
                // allreduce
                CHILD_OK(upload(*r, send->data(), in));
                CHILD_OK(comm->allreduce(send->data(), out, count, DType::kF32, ReduceOp::kSum));
                auto got = download<float>(*r, out, count);
                CHILD_CHECK(got.ok(), "download");
                for (size_t i = 0; i < count; ++i) {
                  CHILD_CHECK((*got)[i] == value(0, i) + value(1, i),
                              "allreduce x %zu%s: element %zu is %g", count,
                              in_place ? " in place" : "", i, double((*got)[i]));
                }
                // reduce to rank 1
                CHILD_OK(upload(*r, send->data(), in));
                CHILD_OK(comm->reduce(send->data(), out, count, DType::kF32, ReduceOp::kMax, 1));
                if (rank == 1) {
                  got = download<float>(*r, out, count);
                  CHILD_CHECK(got.ok(), "download");
                  for (size_t i = 0; i < count; ++i) {
                    CHILD_CHECK((*got)[i] == value(1, i), "reduce x %zu: element %zu is %g", count,
                                i, double((*got)[i]));
                  }
                }
                // broadcast from rank 0
                CHILD_OK(upload(*r, send->data(), in));
                CHILD_OK(comm->broadcast(send->data(), out, count, DType::kF32, 0));
                got = download<float>(*r, out, count);
                CHILD_CHECK(got.ok(), "download");
                for (size_t i = 0; i < count; ++i) {
                  CHILD_CHECK((*got)[i] == value(0, i), "broadcast x %zu: element %zu is %g", count,
                              i, double((*got)[i]));
                }
              }
            }
            const std::string record = comm->flight_record();
            CHILD_CHECK(record.find("route staged") != std::string::npos,
                        "no staged operation in the flight record:\n%s", record.c_str());
            return 0;
          }),
      2);
}

// A rank passing host memory and a rank passing device memory run the same chunk operations, so
// their sequence numbers stay in step.
TEST(DeviceMemory, HostMemoryOnOneRankAndDeviceMemoryOnTheOtherAgree) {
  expect_all_ok(run_ranks(2,
                          [](int rank, int n) {
                            auto r = open_rank("1:discrete");
                            CHILD_CHECK(r, "backend");
                            CommOptions options;
                            options.stage_chunk_bytes = 4096;
                            auto comm = child_communicator(rank, n, options, &*r->device);
                            if (!comm) return 2;
                            const size_t count = 5000;
                            std::vector<float> in(count);
                            for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
                            std::vector<float> result;
                            if (rank == 0) {
                              result = in;
                              CHILD_OK(comm->allreduce(result.data(), result.data(), count,
                                                       DType::kF32, ReduceOp::kSum));
                            } else {
                              auto buf = r->device->allocate(count * sizeof(float));
                              CHILD_CHECK(buf.ok(), "allocate");
                              CHILD_OK(upload(*r, buf->data(), in));
                              CHILD_OK(comm->allreduce(buf->data(), buf->data(), count, DType::kF32,
                                                       ReduceOp::kSum));
                              auto got = download<float>(*r, buf->data(), count);
                              CHILD_CHECK(got.ok(), "download");
                              result = *got;
                            }
                            for (size_t i = 0; i < count; ++i) {
                              CHILD_CHECK(result[i] == value(0, i) + value(1, i),
                                          "element %zu is %g", i, double(result[i]));
                            }
                            return 0;
                          }),
                2);
}

// TESSERA_COLL_DEVICE_PATH=staged stages memory the CPU could address too (the route is forced).
TEST(DeviceMemory, StagingCanBeForcedOnAddressableDeviceMemory) {
  expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto r = open_rank("1");
                  CHILD_CHECK(r, "backend");
                  CommOptions options;
                  options.device_path = "staged";
                  auto comm = child_communicator(rank, n, options, &*r->device);
                  if (!comm) return 2;
                  std::vector<int32_t> in(3000, rank + 1);
                  auto buf = r->device->allocate(in.size() * sizeof(int32_t));
                  CHILD_CHECK(buf.ok(), "allocate");
                  CHILD_OK(upload(*r, buf->data(), in));
                  std::vector<int32_t> all(in.size() * 2, -1);
                  auto gathered = r->device->allocate(all.size() * sizeof(int32_t));
                  CHILD_CHECK(gathered.ok(), "allocate");
                  CHILD_OK(comm->allgather(buf->data(), gathered->data(), in.size(), DType::kI32));
                  auto got = download<int32_t>(*r, gathered->data(), all.size());
                  CHILD_CHECK(got.ok(), "download");
                  for (size_t i = 0; i < all.size(); ++i) {
                    CHILD_CHECK((*got)[i] == int32_t(i / in.size()) + 1, "element %zu is %d", i,
                                (*got)[i]);
                  }
                  const std::string record = comm->flight_record();
                  CHILD_CHECK(
                      record.find("allgather i32 x 3000 peer -1 algo ") != std::string::npos &&
                          record.find("route staged") != std::string::npos,
                      "flight record:\n%s", record.c_str());
                  return 0;
                }),
      2);
}

// ---- refusals -------------------------------------------------------------------------------

// Runs `body` as one rank with the given backend environment and options, and checks that the
// status it returns is INVALID_ARGUMENT (or `code`) with `expected` in its message.
void expect_refused(const char* devices, CommOptions options,
                    std::function<Status(const Rank&, Communicator&)> body,
                    const std::string& expected, StatusCode code = StatusCode::kInvalidArgument) {
  expect_all_ok(run_ranks(1,
                          [&](int rank, int n) {
                            auto r = open_rank(devices);
                            CHILD_CHECK(r, "backend");
                            auto comm = child_communicator(rank, n, options, &*r->device);
                            if (!comm) return 2;
                            const Status s = body(*r, *comm);
                            CHILD_CHECK(
                                s.code() == code && s.message().find(expected) != std::string::npos,
                                "expected '%s', got %s", expected.c_str(), s.to_string().c_str());
                            return 0;
                          }),
                1);
}

TEST(DeviceMemory, MemoryOfAnotherDeviceIsRefusedNamingBoth) {
  expect_refused(
      "2:discrete", {},
      [](const Rank& r, Communicator& comm) -> Status {
        TSR_ASSIGN_OR_RETURN(hal::Device other, r.platform->device("host", 1));
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer mine, r.device->allocate(4096));
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer theirs, other.allocate(4096));
        return comm.allreduce(mine.data(), theirs.data(), 1024, DType::kF32, ReduceOp::kSum);
      },
      "allreduce: recv is device memory of host:1, but this communicator runs on host:0");
}

TEST(DeviceMemory, MemoryDeviceRefusesHostMemory) {
  CommOptions options;
  options.memory = "device";
  expect_refused(
      "1:discrete", options,
      [](const Rank& r, Communicator& comm) -> Status {
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buf, r.device->allocate(4096));
        std::vector<float> host(1024);
        return comm.broadcast(host.data(), buf.data(), 1024, DType::kF32, 0);
      },
      "is host memory, but this communicator expects device memory of host:0 (memory=device)");
}

TEST(DeviceMemory, MemoryHostRefusesDeviceMemoryTheCpuCannotAddress) {
  CommOptions options;
  options.memory = "host";
  expect_refused(
      "1:discrete", options,
      [](const Rank& r, Communicator& comm) -> Status {
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buf, r.device->allocate(4096));
        return comm.allgather(buf.data(), buf.data(), 1024, DType::kF32);
      },
      "allgather: send is device memory of host:0 that the CPU cannot address, but this "
      "communicator expects host memory (memory=host)");
}

TEST(DeviceMemory, HostAndDeviceMemoryInOneCallAreRefused) {
  expect_refused(
      "1:discrete", {},
      [](const Rank& r, Communicator& comm) -> Status {
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buf, r.device->allocate(4096));
        std::vector<float> host(1024);
        return comm.allreduce(host.data(), buf.data(), 1024, DType::kF32, ReduceOp::kSum);
      },
      "allreduce: send is host memory but recv is device memory");
}

TEST(DeviceMemory, ABufferRunningPastItsAllocationIsRefused) {
  expect_refused(
      "1:discrete", {},
      [](const Rank& r, Communicator& comm) -> Status {
        TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buf, r.device->allocate(4096));
        char* at = static_cast<char*>(buf.data()) + 8;
        return comm.allreduce(at, at, 1024, DType::kF32, ReduceOp::kSum);
      },
      "allreduce: send: 4096 bytes at offset 8 run past the end of its 4096-byte allocation on "
      "host:0");
}

TEST(DeviceMemory, StreamFormOfACommunicatorWithoutDeviceRefusesMemoryItCannotStage) {
  expect_all_ok(run_ranks(1,
                          [](int rank, int n) {
                            auto r = open_rank("1:discrete");
                            CHILD_CHECK(r, "backend");
                            auto comm = child_communicator(rank, n);  // no device
                            if (!comm) return 2;
                            auto buf = r->device->allocate(4096);
                            CHILD_CHECK(buf.ok(), "allocate");
                            auto work = comm->allreduce(buf->data(), buf->data(), 1024, DType::kF32,
                                                        ReduceOp::kSum, *r->stream);
                            CHILD_CHECK(!work.ok() && work.status().message().find(
                                                          "without a device to stage it") !=
                                                          std::string::npos,
                                        "got %s", work.status().to_string().c_str());
                            return 0;
                          }),
                1);
}

// A refused call aborts the communicator, so the rank that entered the operation fails at once
// (its timeout is far beyond the test's deadline) with the refusing rank's reason.
TEST(DeviceMemory, ARefusedCallFailsThePeersAtOnce) {
  expect_all_ok(run_ranks(
                    2,
                    [](int rank, int n) {
                      auto r = open_rank("2:discrete");
                      CHILD_CHECK(r, "backend");
                      CommOptions options;
                      options.timeout = std::chrono::milliseconds(600000);
                      auto comm = child_communicator(rank, n, options, &*r->device);
                      if (!comm) return 2;
                      auto other = r->platform->device("host", 1);
                      CHILD_CHECK(other.ok(), "host:1");
                      auto mine = r->device->allocate(4096);
                      auto theirs = other->allocate(4096);
                      CHILD_CHECK(mine.ok() && theirs.ok(), "allocate");
                      void* send = rank == 0 ? theirs->data() : mine->data();
                      const Status s =
                          comm->allreduce(send, mine->data(), 1024, DType::kF32, ReduceOp::kSum);
                      CHILD_CHECK(!s.ok() && s.message().find("send is device memory of host:1") !=
                                                 std::string::npos,
                                  "got %s", s.to_string().c_str());
                      return 0;
                    },
                    testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
                2);
}

// Options are checked at creation, before any exchange (every rank reads the same environment).
// (TESSERA_COLL_DEVICE_PATH=native on a backend without a collective library is refused too, naming
// the backend; the host backend has one, so that case is tested where the native route is.)
TEST(DeviceMemory, CreationRefusesBadMemoryOptions) {
  expect_all_ok(
      run_ranks(
          1,
          [](int rank, int n) {
            auto r = open_rank("1:discrete");
            CHILD_CHECK(r, "backend");
            LaunchInfo info;
            auto check = [&](CommOptions options, const char* expected) {
              auto store =
                  connect_tcp_store("127.0.0.1", std::atoi(std::getenv("TESSERA_TEST_STORE_PORT")),
                                    std::chrono::milliseconds(10000));
              if (!store.ok()) return false;
              auto comm = Communicator::create(
                  Bootstrap::from_parts(info, std::move(store.value())), *r->device, options);
              if (comm.ok() || comm.status().message().find(expected) == std::string::npos) {
                std::fprintf(stderr, "expected '%s', got %s\n", expected,
                             comm.ok() ? "OK" : comm.status().to_string().c_str());
                return false;
              }
              return true;
            };
            CommOptions bad_memory;
            bad_memory.memory = "gpu";
            CHILD_CHECK(check(bad_memory, "memory 'gpu': expected auto, host or device"), "memory");
            CommOptions bad_path;
            bad_path.device_path = "fast";
            CHILD_CHECK(check(bad_path, "device path 'fast': expected auto, native or staged"),
                        "path");
            return 0;
          }),
      1);
}

// ---- streams ------------------------------------------------------------------------------------

// Two communicators, two streams, one callback thread for the whole process: rank 0 queues A then
// B, rank 1 queues B then A (A held back by stream work), and each operation needs both ranks. A
// callback that blocked until its operation finished would hold the one thread on each rank
// (rank 0 in A, rank 1 in B) and neither could finish; with host signals nothing holds it.
TEST(StreamOperations, TwoCommunicatorsOnTwoStreamsWithOneCallbackThreadDoNotDeadlock) {
  expect_all_ok(
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = open_rank("1:discrete", "1");
            CHILD_CHECK(r, "backend");
            CommOptions options;
            options.timeout = std::chrono::milliseconds(600000);
            LaunchInfo info;
            info.rank = info.local_rank = rank;
            info.size = info.local_size = n;
            auto store =
                connect_tcp_store("127.0.0.1", std::atoi(std::getenv("TESSERA_TEST_STORE_PORT")),
                                  std::chrono::milliseconds(10000));
            CHILD_CHECK(store.ok(), "store");
            auto bootstrap = Bootstrap::from_parts(info, std::move(store.value()));
            auto a = Communicator::create(bootstrap, *r->device, options);
            CHILD_CHECK(a.ok(), "%s", a.status().to_string().c_str());
            auto b = Communicator::create(bootstrap, *r->device, options);
            CHILD_CHECK(b.ok(), "%s", b.status().to_string().c_str());
            auto s1 = r->device->create_stream();
            auto s2 = r->device->create_stream();
            CHILD_CHECK(s1.ok() && s2.ok(), "streams");
            const size_t count = 2048;
            auto buf_a = r->device->allocate(count * sizeof(float));
            auto buf_b = r->device->allocate(count * sizeof(float));
            CHILD_CHECK(buf_a.ok() && buf_b.ok(), "allocate");
            std::vector<float> ones(count, float(rank + 1));
            CHILD_OK(upload(*r, buf_a->data(), ones));
            CHILD_OK(upload(*r, buf_b->data(), ones));
            std::vector<Work> works;
            for (int round = 0; round < 3; ++round) {
              auto queue_a = [&]() -> Status {
                if (rank == 1) TSR_RETURN_IF_ERROR(s1->busy_wait(100 * 1000));
                TSR_ASSIGN_OR_RETURN(Work w, (*a)->allreduce(buf_a->data(), buf_a->data(), count,
                                                             DType::kF32, ReduceOp::kSum, *s1));
                works.push_back(w);
                return Status();
              };
              auto queue_b = [&]() -> Status {
                TSR_ASSIGN_OR_RETURN(Work w, (*b)->allreduce(buf_b->data(), buf_b->data(), count,
                                                             DType::kF32, ReduceOp::kSum, *s2));
                works.push_back(w);
                return Status();
              };
              if (rank == 0) {
                CHILD_OK(queue_a());
                CHILD_OK(queue_b());
              } else {
                CHILD_OK(queue_b());
                CHILD_OK(queue_a());
              }
            }
            for (const Work& w : works) CHILD_OK(w.wait(std::chrono::milliseconds(60000)));
            CHILD_OK(s1->synchronize());
            CHILD_OK(s2->synchronize());
            for (void* p : {buf_a->data(), buf_b->data()}) {
              auto got = download<float>(*r, p, count);
              CHILD_CHECK(got.ok(), "download");
              // 1 + 2 = 3, then three rounds of doubling the sum... each round sums both ranks'
              // equal values: 3, 6, 12.
              for (float x : *got) CHILD_CHECK(x == 12.0f, "got %g, expected 12", double(x));
            }
            return 0;
          },
          testing::MultiprocessOptions{std::chrono::milliseconds(60000), {}}),
      2);
}

// Work::event() completes after the operation: another stream that waits on it sees the result.
TEST(StreamOperations, WorkEventOrdersOtherStreamsAfterTheOperation) {
  expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto r = open_rank("1:discrete", "1");
                  CHILD_CHECK(r, "backend");
                  auto comm = child_communicator(rank, n, {}, &*r->device);
                  if (!comm) return 2;
                  const size_t count = 10000;
                  auto buf = r->device->allocate(count * sizeof(int32_t));
                  CHILD_CHECK(buf.ok(), "allocate");
                  CHILD_OK(upload(*r, buf->data(), std::vector<int32_t>(count, rank)));
                  CHILD_OK(r->stream->busy_wait(50 * 1000));
                  auto work =
                      comm->broadcast(buf->data(), buf->data(), count, DType::kI32, 1, *r->stream);
                  CHILD_CHECK(work.ok(), "%s", work.status().to_string().c_str());
                  auto other = r->device->create_stream();
                  CHILD_CHECK(other.ok(), "stream");
                  CHILD_OK(other->wait(work->event()));
                  auto pinned = r->device->allocate_host(count * sizeof(int32_t));
                  CHILD_CHECK(pinned.ok(), "pinned");
                  CHILD_OK(other->copy(pinned->data(), buf->data(), count * sizeof(int32_t)));
                  CHILD_OK(other->synchronize());
                  for (int32_t x : pinned->as<int32_t>()) {
                    CHILD_CHECK(x == 1, "got %d before the broadcast finished", x);
                  }
                  CHILD_OK(work->wait(std::chrono::milliseconds(60000)));
                  return 0;
                }),
      2);
}

// A communicator destroyed with an operation still waiting for its stream fails the operation
// and releases the stream: later work on it runs, nothing waits forever.
TEST(StreamOperations, DestroyingTheCommunicatorReleasesTheStream) {
  // Rank 1 never joins the operation but stays alive until rank 0 is done (a byte on `done`, or
  // 60 s): had it exited, rank 0's liveness check could end the operation first ("rank 1 died",
  // seen under ThreadSanitizer) and the destruction would not be what released the stream.
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  expect_all_ok(run_ranks(2,
                          [&done](int rank, int n) {
                            auto r = open_rank("1:discrete", "1");
                            CHILD_CHECK(r, "backend");
                            auto comm = child_communicator(rank, n, {}, &*r->device);
                            if (!comm) return 2;
                            if (rank == 1) {
                              pollfd wait_for_rank0{done[0], POLLIN, 0};
                              (void)poll(&wait_for_rank0, 1, 60 * 1000);
                              return 0;
                            }
                            struct Release {  // tells rank 1 on every way out
                              int fd;
                              ~Release() { (void)!write(fd, "x", 1); }
                            } release{done[1]};
                            auto buf = r->device->allocate(4096);
                            CHILD_CHECK(buf.ok(), "allocate");
                            CHILD_OK(r->stream->busy_wait(300 * 1000));
                            auto work = comm->allreduce(buf->data(), buf->data(), 1024, DType::kF32,
                                                        ReduceOp::kSum, *r->stream);
                            CHILD_CHECK(work.ok(), "%s", work.status().to_string().c_str());
                            comm.reset();
                            const Status s = work->wait(std::chrono::milliseconds(30000));
                            CHILD_CHECK(s.code() == StatusCode::kAborted,
                                        "the pending operation ended with %s",
                                        s.to_string().c_str());
                            CHILD_OK(upload(*r, buf->data(), std::vector<float>(1024, 5.0f)));
                            auto got = download<float>(*r, buf->data(), 1024);
                            CHILD_CHECK(got.ok() && (*got)[0] == 5.0f, "stream work after it");
                            return 0;
                          }),
                2);
  close(done[0]);
  close(done[1]);
}

}  // namespace
}  // namespace tessera::coll
