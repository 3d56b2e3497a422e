// Communicator tests: each algorithm forced in turn against a reference computed on the host,
// split and group, operations on streams, header mismatches, abort, and a dead peer. Every test
// runs its ranks as forked processes (support/multiprocess.h) with a deadline.
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support/multiprocess.h"
#include "tessera/hal/hal.h"

namespace tessera::coll {
namespace {

using testing::child_communicator;
using testing::run_ranks;

void expect_all_ok(const std::vector<testing::RankResult>& results, int n) {
  ASSERT_EQ(results.size(), size_t(n));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
}

// Rank r's input element i: small integers, so sums are exact in any order.
int32_t input(int rank, size_t i) {
  return int32_t((rank + 1) * (i % 13 + 1));
}

int allreduce_body(int rank, int n, const char* algo, size_t count, bool in_place) {
  CommOptions options;
  options.algorithms = std::string("allreduce:") + algo;
  auto comm = child_communicator(rank, n, options);
  if (!comm) return 2;
  std::vector<float> send(count), recv(count, -1);
  for (size_t i = 0; i < count; ++i) send[i] = float(input(rank, i));
  float* out = in_place ? send.data() : recv.data();
  CHILD_OK(comm->allreduce(send.data(), out, count, DType::kF32, ReduceOp::kSum));
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += float(input(r, i));
    CHILD_CHECK(out[i] == expected, "%s n=%d count=%zu: element %zu is %g, expected %g", algo, n,
                count, i, double(out[i]), double(expected));
  }
  return 0;
}

class AllreduceAlgo : public ::testing::TestWithParam<std::tuple<const char*, int, const char*>> {};

// The third parameter is TESSERA_SHM_CMA_THRESHOLD: "1" sends every message single-copy, "0"
// every message through the FIFO.
TEST_P(AllreduceAlgo, MatchesReference) {
  const auto [algo, n, threshold] = GetParam();
  setenv("TESSERA_SHM_CMA_THRESHOLD", threshold, 1);
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(300000) + 3}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(algo) + " count " + std::to_string(count) +
                   (in_place ? " in place" : ""));
      expect_all_ok(run_ranks(n,
                              [&, algo = algo](int rank, int size) {
                                return allreduce_body(rank, size, algo, count, in_place);
                              }),
                    n);
    }
  }
  unsetenv("TESSERA_SHM_CMA_THRESHOLD");
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AllreduceAlgo,
    ::testing::Combine(::testing::Values("ring", "recursive_doubling", "halving_doubling", "tree"),
                       ::testing::Values(2, 3, 4), ::testing::Values("1", "0")));

TEST(Communicator, AverageOfHalfFloatsAndMaxOfInts) {
  expect_all_ok(
      run_ranks(
          3,
          [](int rank, int n) {
            auto comm = child_communicator(rank, n);
            if (!comm) return 2;
            std::vector<int64_t> v(1001);
            for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i) * (rank == 1 ? -1 : 1);
            CHILD_OK(comm->allreduce(v.data(), v.data(), v.size(), DType::kI64, ReduceOp::kMax));
            for (size_t i = 0; i < v.size(); ++i) CHILD_CHECK(v[i] == int64_t(i), "max %zu", i);
            std::vector<double> d(77, double(rank) * 3);
            CHILD_OK(comm->allreduce(d.data(), d.data(), d.size(), DType::kF64, ReduceOp::kAvg));
            for (double x : d) CHILD_CHECK(x == 3.0, "avg %g", x);
            return 0;
          }),
      3);
}

TEST(Communicator, OtherCollectives) {
  expect_all_ok(
      run_ranks(
          4,
          [](int rank, int n) {
            auto comm = child_communicator(rank, n);
            if (!comm) return 2;
            const size_t count = 1003;
            // broadcast from 2, both algorithms
            std::vector<int32_t> b(count, rank == 2 ? 7 : 0);
            CHILD_OK(comm->broadcast(b.data(), b.data(), count, DType::kI32, 2));
            for (int32_t x : b) CHILD_CHECK(x == 7, "broadcast got %d", x);
            // reduce to 1
            std::vector<int32_t> in(count, rank + 1), out(count, 0);
            CHILD_OK(comm->reduce(in.data(), out.data(), count, DType::kI32, ReduceOp::kSum, 1));
            if (rank == 1) {
              for (int32_t x : out) CHILD_CHECK(x == 10, "reduce got %d", x);
            }
            // allgather
            std::vector<int32_t> mine(count, rank), all(count * size_t(n), -1);
            CHILD_OK(comm->allgather(mine.data(), all.data(), count, DType::kI32));
            for (size_t i = 0; i < all.size(); ++i) {
              CHILD_CHECK(all[i] == int32_t(i / count), "allgather %zu got %d", i, all[i]);
            }
            // reduce_scatter
            std::vector<int32_t> full(count * size_t(n)), part(count, -1);
            for (size_t i = 0; i < full.size(); ++i) full[i] = int32_t(i);
            CHILD_OK(
                comm->reduce_scatter(full.data(), part.data(), count, DType::kI32, ReduceOp::kSum));
            for (size_t i = 0; i < count; ++i) {
              CHILD_CHECK(part[i] == 4 * int32_t(size_t(rank) * count + i), "reduce_scatter %zu",
                          i);
            }
            // alltoall
            std::vector<int32_t> a(size_t(n) * 5), z(size_t(n) * 5, -1);
            for (size_t i = 0; i < a.size(); ++i) a[i] = rank * 100 + int32_t(i / 5);
            CHILD_OK(comm->alltoall(a.data(), z.data(), 5, DType::kI32));
            for (size_t i = 0; i < z.size(); ++i) {
              CHILD_CHECK(z[i] == int32_t(i / 5) * 100 + rank, "alltoall %zu got %d", i, z[i]);
            }
            // send/recv around a ring
            int32_t token = rank, got = -1;
            if (rank % 2 == 0) {
              CHILD_OK(comm->send(&token, 1, DType::kI32, (rank + 1) % n));
              CHILD_OK(comm->recv(&got, 1, DType::kI32, (rank + n - 1) % n));
            } else {
              CHILD_OK(comm->recv(&got, 1, DType::kI32, (rank + n - 1) % n));
              CHILD_OK(comm->send(&token, 1, DType::kI32, (rank + 1) % n));
            }
            CHILD_CHECK(got == (rank + n - 1) % n, "recv got %d", got);
            CHILD_OK(comm->barrier());
            return 0;
          }),
      4);
}

TEST(Communicator, SplitAndGroup) {
  expect_all_ok(
      run_ranks(
          4,
          [](int rank, int n) {
            auto comm = child_communicator(rank, n);
            if (!comm) return 2;
            auto half = comm->split(rank % 2, -rank);
            CHILD_CHECK(half.ok() && half.value(), "split: %s", half.status().to_string().c_str());
            CHILD_CHECK(half.value()->size() == 2, "split size");
            // key -rank reverses the order
            CHILD_CHECK(half.value()->rank() == (rank < 2 ? 1 : 0), "split rank %d",
                        half.value()->rank());
            int32_t v = rank, sum = 0;
            CHILD_OK(half.value()->allreduce(&v, &sum, 1, DType::kI32, ReduceOp::kSum));
            CHILD_CHECK(sum == (rank % 2 == 0 ? 2 : 4), "split sum %d", sum);
            const int members[] = {3, 0};
            auto g = comm->group(members);
            CHILD_CHECK(g.ok(), "group: %s", g.status().to_string().c_str());
            if (rank == 3 || rank == 0) {
              CHILD_CHECK(g.value() && g.value()->rank() == (rank == 3 ? 0 : 1), "group rank");
              CHILD_OK(g.value()->barrier());
            } else {
              CHILD_CHECK(!g.value(), "non-member got a communicator");
            }
            CHILD_OK(comm->barrier());
            return 0;
          }),
      4);
}

TEST(Communicator, OnAStream) {
  expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto platform = hal::Platform::create();
                  CHILD_CHECK(platform.ok(), "platform");
                  auto devices = platform.value()->devices("host");
                  CHILD_CHECK(!devices.empty(), "host device");
                  const hal::Device& dev = devices[0];
                  // With its device: on a discrete device its memory is staged through it.
                  auto comm = child_communicator(rank, n, {}, &dev);
                  if (!comm) return 2;
                  auto stream = dev.create_stream();
                  CHILD_CHECK(stream.ok(), "stream");
                  auto buf = dev.allocate(4096 * sizeof(float));
                  CHILD_CHECK(buf.ok(), "alloc");
                  float* data = static_cast<float*>(buf.value().data());
                  // Work queued before the collective must be visible to it: fill on the stream.
                  std::vector<float> host(4096, float(rank + 1));
                  CHILD_OK(stream.value().copy(data, host.data(), host.size() * sizeof(float)));
                  auto work = comm->allreduce(data, data, 4096, DType::kF32, ReduceOp::kSum,
                                              stream.value());
                  CHILD_CHECK(work.ok(), "enqueue: %s", work.status().to_string().c_str());
                  std::vector<float> back(4096, 0);
                  CHILD_OK(stream.value().copy(back.data(), data, back.size() * sizeof(float)));
                  CHILD_OK(work.value().wait(std::chrono::milliseconds(20000)));
                  CHILD_OK(stream.value().synchronize());
                  for (float x : back) CHILD_CHECK(x == 3.0f, "stream allreduce got %g", double(x));
                  return 0;
                }),
      2);
}

// A collective queued behind stream work that does not finish is failed at the communicator's
// timeout, naming the stream, instead of holding its proxy (and every later operation) until the
// stream gets there.
TEST(Communicator, AStreamThatDoesNotReachTheCollectiveFailsItAtTheTimeout) {
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  expect_all_ok(run_ranks(2,
                          [&](int rank, int n) {
                            CommOptions options;
                            options.timeout = std::chrono::milliseconds(1000);
                            auto comm = child_communicator(rank, n, options);
                            if (!comm) return 2;
                            if (rank == 1) {  // takes no part until rank 0 is done
                              pollfd wait{done[0], POLLIN, 0};
                              CHILD_CHECK(poll(&wait, 1, 120000) == 1, "rank 0 never finished");
                              return 0;
                            }
                            auto platform = hal::Platform::create();
                            CHILD_CHECK(platform.ok(), "platform");
                            auto devices = platform.value()->devices("host");
                            CHILD_CHECK(!devices.empty(), "host device");
                            auto stream = devices[0].create_stream();
                            CHILD_CHECK(stream.ok(), "stream");
                            // "Compute" far longer than the timeout ahead of the collective.
                            CHILD_OK(stream.value().busy_wait(uint64_t(30) * 1000 * 1000));
                            std::vector<float> v(1024, 1.0f);
                            auto work = comm->allreduce(v.data(), v.data(), v.size(), DType::kF32,
                                                        ReduceOp::kSum, stream.value());
                            const Status s =
                                work.ok() ? work.value().wait(std::chrono::milliseconds(60000))
                                          : work.status();
                            const char byte = 1;
                            const bool released = write(done[1], &byte, 1) == 1;
                            const bool named = s.message().find("did not reach the operation") !=
                                               std::string::npos;
                            if (!named) std::fprintf(stderr, "rank 0: %s\n", s.to_string().c_str());
                            std::fflush(nullptr);
                            _exit(named && released ? 0 : 1);  // skip the busy stream's teardown
                          }),
                2);
  close(done[0]);
  close(done[1]);
}

TEST(Communicator, MismatchedCountsNameBothRanks) {
  expect_all_ok(run_ranks(2,
                          [](int rank, int n) {
                            CommOptions options;
                            options.timeout = std::chrono::milliseconds(3000);
                            auto comm = child_communicator(rank, n, options);
                            if (!comm) return 2;
                            std::vector<float> v(100 + size_t(rank), 1.0f);
                            const Status s = comm->allreduce(v.data(), v.data(), v.size(),
                                                             DType::kF32, ReduceOp::kSum);
                            CHILD_CHECK(!s.ok(), "mismatch not detected");
                            // The rank that sees the other's header names both; the other is
                            // aborted through shared memory by it.
                            const std::string text = s.message();
                            CHILD_CHECK(text.find("rank 0") != std::string::npos ||
                                            text.find("aborted by rank") != std::string::npos,
                                        "message: %s", text.c_str());
                            CHILD_CHECK(!comm->barrier().ok(), "communicator usable after failure");
                            return 0;
                          }),
                2);
}

// Ranks that disagree on what a call means fail naming both sides instead of returning
// different results: another reduction operator, another broadcast root, another algorithm.
TEST(Communicator, RanksDisagreeingOnOperatorRootOrAlgorithmAreNamed) {
  struct Case {
    const char* name;
    const char* expect;  // in the message of the rank that saw the other's header
  };
  for (const Case& c :
       {Case{"operator", "sum"}, Case{"root", "root "}, Case{"algorithm", "tree"}}) {
    const std::string which = c.name, expect = c.expect;
    expect_all_ok(
        run_ranks(2,
                  [&](int rank, int n) {
                    CommOptions options;
                    options.timeout = std::chrono::milliseconds(10000);
                    if (which == "algorithm")
                      options.algorithms = rank == 0 ? "allreduce:ring" : "allreduce:tree";
                    auto comm = child_communicator(rank, n, options);
                    if (!comm) return 2;
                    std::vector<float> v(64, float(rank + 1));
                    Status s;
                    if (which == "operator") {
                      s = comm->allreduce(v.data(), v.data(), v.size(), DType::kF32,
                                          rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
                    } else if (which == "root") {
                      // Two roots only send: the disagreement shows at the next receive, the
                      // barrier's.
                      s = comm->broadcast(v.data(), v.data(), v.size(), DType::kF32, /*root=*/rank);
                      if (s.ok()) s = comm->barrier();
                    } else {
                      s = comm->allreduce(v.data(), v.data(), v.size(), DType::kF32,
                                          ReduceOp::kSum);
                    }
                    CHILD_CHECK(!s.ok(), "%s: the disagreement was not detected", which.c_str());
                    const std::string text = s.message();
                    CHILD_CHECK(text.find(expect) != std::string::npos ||
                                    text.find("aborted by rank") != std::string::npos,
                                "%s: %s", which.c_str(), text.c_str());
                    return 0;
                  }),
        2);
  }
}

// With pidfds (Linux >= 5.3), and without them as on CentOS 7 or Kylin V10's 4.19 kernel
// (TESSERA_COLL_NO_PIDFD=1: kill(pid, 0) and the start time in /proc).
class DeadPeer : public ::testing::TestWithParam<bool> {};

TEST_P(DeadPeer, IsNamedWithinTimeout) {
  const bool pidfd = GetParam();
  const auto results = run_ranks(3, [pidfd](int rank, int n) {
    if (!pidfd) setenv("TESSERA_COLL_NO_PIDFD", "1", 1);
    CommOptions options;
    options.timeout = std::chrono::milliseconds(5000);
    auto comm = child_communicator(rank, n, options);
    if (!comm) return 2;
    std::vector<float> v(1 << 20, 1.0f);
    // Rank 2 dies right after its part of the first allreduce. The others may still be inside
    // that first call (a slower rank is aborted by the one that saw the death first), so the
    // failure may come from it or from any later call; either way it must name rank 2 quickly.
    const auto start = std::chrono::steady_clock::now();
    Status s = comm->allreduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    if (rank == 2) {
      if (!s.ok()) return 3;
      raise(SIGKILL);
    }
    for (int i = 0; i < 100 && s.ok(); ++i) {
      s = comm->allreduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    }
    const auto took = std::chrono::steady_clock::now() - start;
    CHILD_CHECK(!s.ok(), "no error after the peer died");
    CHILD_CHECK(s.message().find("rank 2") != std::string::npos, "message: %s",
                s.message().c_str());
    CHILD_CHECK(took < std::chrono::milliseconds(5000), "took too long");
    return 0;
  });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 0);
  EXPECT_EQ(results[2].signal, SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Liveness, DeadPeer, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "Pidfd" : "ProcWithoutPidfd");
                         });

TEST(Communicator, AbortUnblocksAndLaterCallsFail) {
  expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto comm = child_communicator(rank, n);
                  if (!comm) return 2;
                  if (rank == 0) {
                    comm->abort("test abort");
                    CHILD_CHECK(comm->barrier().code() == StatusCode::kAborted, "after abort");
                  } else {
                    // Waits for rank 0, which never comes: the posted abort releases it.
                    const Status s = comm->barrier();
                    CHILD_CHECK(!s.ok() && s.message().find("test abort") != std::string::npos,
                                "barrier: %s", s.to_string().c_str());
                  }
                  CHILD_CHECK(
                      comm->flight_record().find("barrier") != std::string::npos || rank == 0,
                      "flight record: %s", comm->flight_record().c_str());
                  return 0;
                }),
      2);
}

// Every variable the communicator reads refuses a malformed, negative or out-of-range value by
// name instead of running with a default, a wrapped int or an absurd segment (one rank: each is
// read before the shared-memory segment exists).
TEST(Communicator, MalformedEnvironmentValuesFailCreateNamingTheVariable) {
  const std::pair<const char*, const char*> cases[] = {
      {"TESSERA_COLL_TIMEOUT_MS", "-5"},
      {"TESSERA_COLL_TIMEOUT_MS", "1e3"},
      {"TESSERA_COLL_TIMEOUT_MS", "99999999999999"},
      {"TESSERA_COLL_STAGE_CHUNK", "0"},
      {"TESSERA_COLL_STAGE_CHUNK", "2T"},
      {"TESSERA_SHM_CHUNK", "1G"},
      {"TESSERA_SHM_SLOTS", "4294967298"},
      {"TESSERA_SHM_SLOTS", "1"},
      {"TESSERA_COLL_STREAM_CALLBACKS", "2"},
  };
  for (const auto& [name, value] : cases) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    expect_all_ok(
        run_ranks(1,
                  [name = name, value = value](int rank, int n) {
                    setenv(name, value, 1);
                    LaunchInfo info;
                    info.rank = rank;
                    info.size = n;
                    info.local_size = n;
                    auto store = connect_tcp_store(
                        "127.0.0.1", std::atoi(std::getenv("TESSERA_TEST_STORE_PORT")),
                        std::chrono::milliseconds(10000));
                    CHILD_OK(store.status());
                    auto comm =
                        Communicator::create(Bootstrap::from_parts(info, std::move(store.value())));
                    const std::string named = std::string(name) + "='" + value + "'";
                    CHILD_CHECK(comm.status().code() == StatusCode::kInvalidArgument &&
                                    comm.status().message().find(named) != std::string::npos,
                                "%s", comm.status().to_string().c_str());
                    return 0;
                  }),
        1);
  }
}

}  // namespace
}  // namespace tessera::coll

namespace tessera::coll {
namespace {

// Not a test: a quick allreduce bandwidth probe for tuning (run with
// --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bandwidth*'). Prints, asserts nothing
// about time. The real benchmark is `tessera bench coll` / bench/coll_vs_mpi.sh.
TEST(Communicator, DISABLED_Bandwidth) {
  const int n = std::getenv("N") ? std::atoi(std::getenv("N")) : 2;
  run_ranks(n, [](int rank, int size) {
    cpu_set_t one;  // bound to a core each, as mpirun and tessera launch do
    CPU_ZERO(&one);
    CPU_SET(rank % int(std::thread::hardware_concurrency()), &one);
    sched_setaffinity(0, sizeof one, &one);
    auto comm = child_communicator(rank, size);
    if (!comm) return 2;
    for (size_t bytes : {size_t(8), size_t(1) << 20, size_t(64) << 20}) {
      const size_t count = bytes / 4 ? bytes / 4 : 1;
      std::vector<float> a(count, 1.0f), b(count);
      const int iters = bytes >= (size_t(16) << 20) ? 20 : (bytes > 1000 ? 200 : 20000);
      for (int i = 0; i < 5; ++i) {
        (void)comm->allreduce(a.data(), b.data(), count, DType::kF32, ReduceOp::kSum);
      }
      (void)comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        (void)comm->allreduce(a.data(), b.data(), count, DType::kF32, ReduceOp::kSum);
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          iters;
      const double busbw = double(bytes) / us / 1e3 * 2 * (size - 1) / size;
      if (rank == 0) {
        std::printf("%zu bytes: %.2f us, busbw %.2f GB/s (%s)\n", bytes, us, busbw,
                    std::string(comm->algorithm_for(OpKind::kAllReduce, bytes)).c_str());
        std::fflush(stdout);
      }
    }
    return 0;
  });
}

}  // namespace
}  // namespace tessera::coll
