// Bad input gets a clear error naming the parameter, never a hang: overlapping, unaligned and
// duplicate registrations, a gradient marked twice, finish() before every gradient is marked
// (on one rank while the other is complete), ranks that registered different parameters, and
// buffers that are not memory of the engine's device (host memory on a discrete device, another
// device's memory, a range past the end of its allocation), for GradSync and CollectiveMatmul.
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tessera/overlap/collective_matmul.h"

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// TESSERA_BUCKET_MB sizes the buckets when the options do not: a value that is not a finite,
// positive number of MiB fails create() naming it (it used to be a warning and the default).
TEST(BadInput, AMalformedBucketSizeVariableFailsCreateNamingIt) {
  testing::expect_all_ok(
      run_ranks(1,
                [](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  for (const char* bad : {"inf", "abc", "nan", "-4", "0", "1e9", ""}) {
                    setenv("TESSERA_BUCKET_MB", bad, 1);
                    Status s = GradSync::create(r->comm, *r->device).status();
                    CHILD_CHECK(s.code() == StatusCode::kInvalidArgument &&
                                    mentions(s, std::string("TESSERA_BUCKET_MB='") + bad + "'"),
                                "%s: %s", bad, s.to_string().c_str());
                  }
                  setenv("TESSERA_BUCKET_MB", "0.5", 1);
                  auto sync = GradSync::create(r->comm, *r->device);
                  CHILD_OK(sync.status());
                  unsetenv("TESSERA_BUCKET_MB");
                  auto fallback = default_bucket_bytes(*r->comm);
                  CHILD_OK(fallback.status());
                  CHILD_CHECK(*fallback >= (size_t(1) << 20), "alpha-beta rule: %zu", *fallback);
                  CHILD_DONE(r);
                }),
      1);
}

TEST(BadInput, RegistrationsThatOverlapAreUnalignedOrDuplicateAreRefusedByName) {
  testing::expect_all_ok(
      run_ranks(1,
                [](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  auto sync_or = GradSync::create(r->comm, *r->device);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  auto grads_or = testing::device_array<float>(*r->device, 1024);
                  CHILD_OK(grads_or.status());
                  float* grads =
                      static_cast<float*>(grads_or.value().data());  // never dereferenced
                  CHILD_OK(sync.add_parameter("embed", nullptr, grads, 512, DType::kF32).status());
                  Status s =
                      sync.add_parameter("head", nullptr, grads + 500, 100, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'head'") &&
                                  mentions(s, "'embed'"),
                              "overlap: %s", s.to_string().c_str());
                  char* bytes = reinterpret_cast<char*>(grads + 600);
                  s = sync.add_parameter("odd", nullptr, bytes + 1, 10, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'odd'") &&
                                  mentions(s, "aligned"),
                              "unaligned: %s", s.to_string().c_str());
                  s = sync.add_parameter("embed", nullptr, grads + 700, 10, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kAlreadyExists, "duplicate: %s",
                              s.to_string().c_str());
                  s = sync.add_parameter("empty", nullptr, grads + 800, 0, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'empty'"),
                              "count 0: %s", s.to_string().c_str());
                  GradSyncOptions zero;
                  zero.mode = SyncMode::kShardedOptimizer;
                  zero.codec.kind = CodecKind::kTopK;
                  s = GradSync::create(r->comm, *r->device, zero).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "topk"),
                              "codec with ZeRO: %s", s.to_string().c_str());
                  // After the first mark the layout is fixed.
                  CHILD_OK(sync.mark_ready(0, r->compute));
                  s = sync.add_parameter("late", nullptr, grads + 900, 10, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kFailedPrecondition && mentions(s, "'late'"),
                              "late: %s", s.to_string().c_str());
                  CHILD_OK(sync.finish().status());
                  return 0;
                }),
      1);
}

TEST(BadInput, AGradientMarkedTwiceInAStepIsNamedAndTheStepStillCompletes) {
  testing::expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  auto sync_or = GradSync::create(r->comm, *r->device);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  auto a_or = testing::device_array<float>(*r->device, 64);
                  auto b_or = testing::device_array<float>(*r->device, 64);
                  CHILD_OK(a_or.status());
                  CHILD_OK(b_or.status());
                  void* a_dev = a_or.value().data();
                  void* b_dev = b_or.value().data();
                  CHILD_OK(testing::to_device(r->compute, a_dev, std::vector<float>(64, 1.0f)));
                  CHILD_OK(testing::to_device(r->compute, b_dev, std::vector<float>(64, 2.0f)));
                  CHILD_OK(sync.add_parameter("a", nullptr, a_dev, 64, DType::kF32).status());
                  CHILD_OK(sync.add_parameter("b", nullptr, b_dev, 64, DType::kF32).status());
                  CHILD_OK(sync.mark_ready(1, r->compute));
                  const Status s = sync.mark_ready(1, r->compute);
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'b'") &&
                                  mentions(s, "already marked"),
                              "double mark: %s", s.to_string().c_str());
                  const Status u = sync.mark_unused(1);
                  CHILD_CHECK(u.code() == StatusCode::kInvalidArgument, "unused after ready: %s",
                              u.to_string().c_str());
                  CHILD_CHECK(sync.mark_ready(7, r->compute).code() == StatusCode::kOutOfRange,
                              "index out of range accepted");
                  CHILD_OK(sync.mark_ready(0, r->compute));
                  CHILD_OK(sync.finish().status());
                  std::vector<float> a, b;
                  CHILD_OK(testing::from_device(r->compute, a, a_dev, 64));
                  CHILD_OK(testing::from_device(r->compute, b, b_dev, 64));
                  CHILD_CHECK(a[0] == 1.0f && b[0] == 2.0f, "values %g %g", double(a[0]),
                              double(b[0]));
                  CHILD_DONE(r);
                }),
      2);
}

TEST(BadInput, FinishBeforeEveryGradientIsMarkedFailsOnEveryRankWithoutWaitingForTheTimeout) {
  testing::expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  coll::CommOptions comm_options;
                  comm_options.timeout = std::chrono::milliseconds(60000);
                  auto r = Rank::make(rank, n, comm_options);
                  if (!r) return 2;
                  GradSyncOptions options;
                  options.bucket_bytes = 256;
                  auto sync_or = GradSync::create(r->comm, *r->device, options);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  auto g_or = testing::device_array<float>(*r->device, 3 * 64);
                  CHILD_OK(g_or.status());
                  float* g = static_cast<float*>(g_or.value().data());
                  for (int p = 0; p < 3; ++p) {
                    CHILD_OK(sync.add_parameter("layer" + std::to_string(p), nullptr, g + 64 * p,
                                                64, DType::kF32)
                                 .status());
                  }
                  const auto start = std::chrono::steady_clock::now();
                  // Rank 1 forgot layer1 (and rank 0 marks everything). Rank 0 learns of the
                  // abort at its next call into the engine: a mark (launching a bucket) or
                  // finish(), whichever comes after rank 1's finish().
                  Status s = sync.mark_ready(2, r->compute);
                  if (s.ok() && rank == 0) s = sync.mark_ready(1, r->compute);
                  if (s.ok()) s = sync.mark_ready(0, r->compute);
                  if (s.ok()) s = sync.finish().status();
                  const auto took = std::chrono::steady_clock::now() - start;
                  CHILD_CHECK(!s.ok(), "the step succeeded");
                  if (rank == 1) {
                    CHILD_CHECK(
                        s.code() == StatusCode::kFailedPrecondition && mentions(s, "'layer1'"),
                        "rank 1: %s", s.to_string().c_str());
                  } else {
                    CHILD_CHECK(mentions(s, "aborted by rank 1") && mentions(s, "'layer1'"),
                                "rank 0: %s", s.to_string().c_str());
                  }
                  // Well under the communicator's 60 s timeout: the failure was propagated.
                  CHILD_CHECK(took < std::chrono::seconds(30), "took too long");
                  CHILD_CHECK(!sync.finish().ok(), "usable after the failure");
                  return 0;
                }),
      2);
}

TEST(BadInput, APeerThatNeverSynchronisesTimesOutNamingTheBucket) {
  // Rank 1 stays alive, without synchronising, until rank 0 has seen its timeout: a pipe, not a
  // sleep, so a slow machine cannot turn the timeout into rank 1's exit.
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  testing::expect_all_ok(
      run_ranks(
          2,
          [&](int rank, int n) {
            auto r = Rank::make(rank, n);
            if (!r) return 2;
            GradSyncOptions options;
            options.timeout = std::chrono::milliseconds(500);
            auto sync_or = GradSync::create(r->comm, *r->device, options);
            CHILD_OK(sync_or.status());
            auto& sync = *sync_or.value();
            auto g = testing::device_array<float>(*r->device, 1024);
            CHILD_OK(g.status());
            CHILD_OK(
                sync.add_parameter("w", nullptr, g.value().data(), 1024, DType::kF32).status());
            CHILD_CHECK(sync.buckets().size() == 1, "one bucket");
            if (rank == 1) {
              // Registered (the layout check passed) but never takes part in a step.
              pollfd wait{done[0], POLLIN, 0};
              CHILD_CHECK(poll(&wait, 1, 120000) == 1, "rank 0 never finished");
              return 0;
            }
            const auto start = std::chrono::steady_clock::now();
            CHILD_OK(sync.mark_ready(0, r->compute));
            const Status s = sync.finish().status();
            const auto took = std::chrono::steady_clock::now() - start;
            const char byte = 1;
            CHILD_CHECK(write(done[1], &byte, 1) == 1, "release rank 1");
            CHILD_CHECK(s.code() == StatusCode::kDeadlineExceeded && mentions(s, "bucket 0") &&
                            mentions(s, "'w'"),
                        "timeout: %s", s.to_string().c_str());
            CHILD_CHECK(took < std::chrono::seconds(20), "took too long");
            return 0;
          }),
      2);
  close(done[0]);
  close(done[1]);
}

TEST(BadInput, RanksThatRegisteredDifferentParametersAreNamed) {
  testing::expect_all_ok(
      run_ranks(2,
                [](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  auto sync_or = GradSync::create(r->comm, *r->device);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  auto g_or = testing::device_array<float>(*r->device, 256);
                  CHILD_OK(g_or.status());
                  float* g = static_cast<float*>(g_or.value().data());
                  CHILD_OK(sync.add_parameter("w", nullptr, g, 100, DType::kF32).status());
                  if (rank == 1) {
                    CHILD_OK(
                        sync.add_parameter("extra", nullptr, g + 128, 8, DType::kF32).status());
                  }
                  const Status s = sync.mark_ready(0, r->compute);
                  CHILD_CHECK(s.code() == StatusCode::kFailedPrecondition &&
                                  mentions(s, rank == 0 ? "rank 1" : "rank 0"),
                              "mismatch: %s", s.to_string().c_str());
                  return 0;
                }),
      2);
}

// Memory the engine cannot hand to its device is refused at registration, naming the parameter
// and what the pointer is. The child runs two discrete host devices whatever the environment
// (the backend reads TESSERA_HOST_DEVICES when the child's platform loads it).
TEST(BadInput, BuffersThatAreNotMemoryOfTheEnginesDeviceAreRefusedByName) {
  testing::expect_all_ok(
      run_ranks(1,
                [](int rank, int n) {
                  setenv("TESSERA_HOST_DEVICES", "2:discrete", 1);
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  CHILD_CHECK(!r->device->has(TSR_CAP_HOST_ACCESSIBLE), "host:0 is not discrete");
                  auto other = r->platform->device("host", 1);
                  CHILD_OK(other.status());
                  GradSyncOptions options;
                  options.mode = SyncMode::kShardedOptimizer;
                  auto sync_or = GradSync::create(r->comm, *r->device, options);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  auto mine = testing::device_array<float>(*r->device, 64);
                  auto theirs = testing::device_array<float>(other.value(), 64);
                  auto pinned = r->device->allocate_host(64 * sizeof(float));
                  CHILD_OK(mine.status());
                  CHILD_OK(theirs.status());
                  CHILD_OK(pinned.status());
                  float* grad = static_cast<float*>(mine.value().data());
                  float* data = grad + 32;
                  std::vector<float> host(64);
                  Status s = sync.add_parameter("cpu", data, host.data(), 16, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'cpu'") &&
                                  mentions(s, "gradient") && mentions(s, "host:0") &&
                                  mentions(s, "not host-accessible"),
                              "host memory: %s", s.to_string().c_str());
                  s = sync.add_parameter("pinned", data, static_cast<float*>(pinned.value().data()),
                                         16, DType::kF32)
                          .status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'pinned'") &&
                                  mentions(s, "pinned host memory"),
                              "pinned memory: %s", s.to_string().c_str());
                  s = sync.add_parameter("peer", data, static_cast<float*>(theirs.value().data()),
                                         16, DType::kF32)
                          .status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'peer'") &&
                                  mentions(s, "host:1") && mentions(s, "host:0"),
                              "another device: %s", s.to_string().c_str());
                  s = sync.add_parameter("long", data, grad, 48, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'long'") &&
                                  mentions(s, "past the end"),
                              "past the end: %s", s.to_string().c_str());
                  s = sync.add_parameter("data", host.data(), grad, 16, DType::kF32).status();
                  CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'data'") &&
                                  mentions(s, "parameter buffer"),
                              "host parameter: %s", s.to_string().c_str());
                  CHILD_OK(sync.add_parameter("ok", data, grad, 16, DType::kF32).status());
                  // CollectiveMatmul names the argument.
                  if (r->device->backend()->api().gemm_async != nullptr) {
                    auto cm = overlap::CollectiveMatmul::create(r->comm, *r->device);
                    CHILD_OK(cm.status());
                    s = cm.value()->allgather_matmul(grad, 2, 2, host.data(), 2, grad + 8,
                                                     grad + 16, r->compute);
                    CHILD_CHECK(s.code() == StatusCode::kInvalidArgument &&
                                    mentions(s, "allgather_matmul: w") && mentions(s, "host:0"),
                                "matmul host w: %s", s.to_string().c_str());
                    s = cm.value()->matmul_reduce_scatter(
                        grad, 2, 2, grad + 8, 2, static_cast<float*>(theirs.value().data()),
                        r->compute);
                    CHILD_CHECK(s.code() == StatusCode::kInvalidArgument &&
                                    mentions(s, "matmul_reduce_scatter: y_shard") &&
                                    mentions(s, "host:1"),
                                "matmul other device: %s", s.to_string().c_str());
                  }
                  return 0;
                }),
      1);
  // Where device memory is host-accessible (the plain host device), host memory is accepted.
  testing::expect_all_ok(
      run_ranks(
          1,
          [](int rank, int n) {
            setenv("TESSERA_HOST_DEVICES", "1", 1);
            auto r = Rank::make(rank, n);
            if (!r) return 2;
            auto sync = GradSync::create(r->comm, *r->device);
            CHILD_OK(sync.status());
            std::vector<float> host(16);
            CHILD_OK(
                sync.value()->add_parameter("cpu", nullptr, host.data(), 16, DType::kF32).status());
            return 0;
          }),
      1);
}

}  // namespace
}  // namespace tessera::overlap
