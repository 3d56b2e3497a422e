// Two engines on two communicators of the same ranks stepping at once, queued in opposite orders
// on the two ranks, with every stream callback of a process on one shared thread
// (TESSERA_HOST_CALLBACK_THREADS=1, set by the test whatever the environment). An engine that ran
// its collectives inside stream callbacks would deadlock here: rank 0's only callback thread would
// sit in engine A's allreduce waiting for rank 1, whose only callback thread sits in engine B's
// waiting for rank 0 (and fail at the engines' timeout). Through the communicator's stream API
// each collective holds no callback thread, and both engines finish with the right sums.
#include <gtest/gtest.h>

#include <cstdlib>

#include "support.h"

namespace tessera::overlap {
namespace {

using testing::Rank;
using testing::run_ranks;

constexpr size_t kCount = 4096;
constexpr int kSteps = 3;

int two_engines_body(int rank, int n) {
  setenv("TESSERA_HOST_CALLBACK_THREADS", "1", 1);  // before the child's platform loads the backend
  auto r = Rank::make(rank, n);
  if (!r) return 2;
  auto second = r->comm->split(0, rank);
  CHILD_OK(second.status());
  GradSyncOptions options;
  options.timeout = std::chrono::milliseconds(20000);  // a deadlock fails well before the deadline
  options.reduction = Reduction::kSum;
  std::shared_ptr<coll::Communicator> comms[2] = {r->comm, second.value()};
  std::unique_ptr<GradSync> engines[2];
  hal::DeviceBuffer grads[2];
  hal::Stream computes[2];
  for (int e = 0; e < 2; ++e) {
    auto sync = GradSync::create(comms[e], *r->device, options);
    CHILD_OK(sync.status());
    engines[e] = std::move(sync.value());
    auto g = testing::device_array<float>(*r->device, kCount);
    CHILD_OK(g.status());
    grads[e] = std::move(g.value());
    auto s = r->device->create_stream();
    CHILD_OK(s.status());
    computes[e] = std::move(s.value());
    CHILD_OK(
        engines[e]->add_parameter("w", nullptr, grads[e].data(), kCount, DType::kF32).status());
    CHILD_CHECK(engines[e]->buckets().size() == 1, "one bucket per engine");
  }
  for (int step = 0; step < kSteps; ++step) {
    for (int e = 0; e < 2; ++e) {
      CHILD_OK(testing::to_device(r->compute, grads[e].data(),
                                  std::vector<float>(kCount, float((rank + 1) * (e + 1) + step))));
    }
    // Rank 0 starts A's bucket first, rank 1 B's; the other one's gradient becomes ready a
    // little later (its compute stream is busy), so each rank's second collective queues
    // behind its first.
    const int first = rank % 2;
    CHILD_OK(engines[first]->mark_ready(0, computes[first]));
    CHILD_OK(computes[1 - first].busy_wait(20000));
    CHILD_OK(engines[1 - first]->mark_ready(0, computes[1 - first]));
    for (int e : {first, 1 - first}) {
      auto stats = engines[e]->finish();
      CHILD_OK(stats.status());
    }
    for (int e = 0; e < 2; ++e) {
      std::vector<float> got;
      CHILD_OK(testing::from_device(r->compute, got, grads[e].data(), kCount));
      float expect = 0;
      for (int q = 0; q < n; ++q) expect += float((q + 1) * (e + 1) + step);
      for (size_t i = 0; i < kCount; i += 511) {
        CHILD_CHECK(got[i] == expect, "step %d engine %d [%zu]: %g, expected %g", step, e, i,
                    double(got[i]), double(expect));
      }
    }
  }
  CHILD_OK(second.value()->barrier());
  CHILD_DONE(r);
}

TEST(Concurrency, TwoEnginesOnTwoCommunicatorsStepInOppositeOrdersOnOneCallbackThread) {
  testing::expect_all_ok(run_ranks(2, two_engines_body), 2);
}

}  // namespace
}  // namespace tessera::overlap
