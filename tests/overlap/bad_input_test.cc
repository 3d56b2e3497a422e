// Bad input gets a clear error naming the parameter, never a hang: overlapping, unaligned and
// duplicate registrations, a gradient marked twice, finish() before every gradient is marked
// (on one rank while the other is complete), ranks that registered different parameters.
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(BadInput, RegistrationsThatOverlapAreUnalignedOrDuplicateAreRefusedByName) {
  testing::expect_all_ok(
      run_ranks(
          1,
          [](int rank, int n) {
            auto r = Rank::make(rank, n);
            if (!r) return 2;
            auto sync_or = GradSync::create(r->comm, *r->device);
            CHILD_OK(sync_or.status());
            auto& sync = *sync_or.value();
            std::vector<float> grads(1024);
            CHILD_OK(sync.add_parameter("embed", nullptr, grads.data(), 512, DType::kF32).status());
            Status s =
                sync.add_parameter("head", nullptr, grads.data() + 500, 100, DType::kF32).status();
            CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'head'") &&
                            mentions(s, "'embed'"),
                        "overlap: %s", s.to_string().c_str());
            char* bytes = reinterpret_cast<char*>(grads.data() + 600);
            s = sync.add_parameter("odd", nullptr, bytes + 1, 10, DType::kF32).status();
            CHILD_CHECK(s.code() == StatusCode::kInvalidArgument && mentions(s, "'odd'") &&
                            mentions(s, "aligned"),
                        "unaligned: %s", s.to_string().c_str());
            s = sync.add_parameter("embed", nullptr, grads.data() + 700, 10, DType::kF32).status();
            CHILD_CHECK(s.code() == StatusCode::kAlreadyExists, "duplicate: %s",
                        s.to_string().c_str());
            s = sync.add_parameter("empty", nullptr, grads.data() + 800, 0, DType::kF32).status();
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
            s = sync.add_parameter("late", nullptr, grads.data() + 900, 10, DType::kF32).status();
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
                  std::vector<float> a(64, 1.0f), b(64, 2.0f);
                  CHILD_OK(sync.add_parameter("a", nullptr, a.data(), 64, DType::kF32).status());
                  CHILD_OK(sync.add_parameter("b", nullptr, b.data(), 64, DType::kF32).status());
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
                  std::vector<std::vector<float>> g(3, std::vector<float>(64, 1.0f));
                  for (int p = 0; p < 3; ++p) {
                    CHILD_OK(sync.add_parameter("layer" + std::to_string(p), nullptr,
                                                g[size_t(p)].data(), 64, DType::kF32)
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
      run_ranks(2,
                [&](int rank, int n) {
                  auto r = Rank::make(rank, n);
                  if (!r) return 2;
                  GradSyncOptions options;
                  options.timeout = std::chrono::milliseconds(500);
                  auto sync_or = GradSync::create(r->comm, *r->device, options);
                  CHILD_OK(sync_or.status());
                  auto& sync = *sync_or.value();
                  std::vector<float> g(1024, 1.0f);
                  CHILD_OK(sync.add_parameter("w", nullptr, g.data(), 1024, DType::kF32).status());
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
                  CHILD_CHECK(s.code() == StatusCode::kDeadlineExceeded &&
                                  mentions(s, "bucket 0") && mentions(s, "'w'"),
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
      run_ranks(
          2,
          [](int rank, int n) {
            auto r = Rank::make(rank, n);
            if (!r) return 2;
            auto sync_or = GradSync::create(r->comm, *r->device);
            CHILD_OK(sync_or.status());
            auto& sync = *sync_or.value();
            std::vector<float> g(256);
            CHILD_OK(sync.add_parameter("w", nullptr, g.data(), 100, DType::kF32).status());
            if (rank == 1) {
              CHILD_OK(
                  sync.add_parameter("extra", nullptr, g.data() + 128, 8, DType::kF32).status());
            }
            const Status s = sync.mark_ready(0, r->compute);
            CHILD_CHECK(s.code() == StatusCode::kFailedPrecondition &&
                            mentions(s, rank == 0 ? "rank 1" : "rank 0"),
                        "mismatch: %s", s.to_string().c_str());
            return 0;
          }),
      2);
}

}  // namespace
}  // namespace tessera::overlap
