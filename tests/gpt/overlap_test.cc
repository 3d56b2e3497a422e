// The GPT trainer's --overlap (TrainOptions::overlap, examples/trainer/gpt/grad_overlap.h): the dp
// gradient sum through the overlap engine, bucket by bucket as the last micro-batch's backward
// finishes each unit, against the same grid summing with one allreduce after the backward. Over
// forked ranks: the losses and parameters match within the parallel tests' tolerances
// (model_test_support.h), a run repeats itself bitwise, and what --overlap does not cover (ZeRO,
// bf16 on the wire, pp, ep) is refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

constexpr int kSteps = 4;

struct Case {
  const char* config;
  int tp;
  int dp;
  uint64_t bucket_bytes;  // 1: a bucket per unit; 0: the engine's rule (one bucket here)
};

TrainOptions overlap_options(bool overlap, uint64_t bucket_bytes) {
  TrainOptions options = parallel_test_options(2);
  options.overlap = overlap;
  options.overlap_bucket_bytes = bucket_bytes;
  return options;
}

// Which units each part's backward completes (marks ready): its own, except that a tied
// embedding waits for the embedding's backward (the head's writes into it first). Returns the
// number of buckets.
Result<size_t> check_marks(const DeviceEnv& env, const GptConfig& config,
                           const ParallelGroups& groups, const TrainOptions& options) {
  TSR_ASSIGN_OR_RETURN(auto trainer,
                       GptTrainer::create(*env.device, config, *env.kernels, groups, options));
  const GradOverlap* overlap = trainer->overlap();
  if (!overlap)
    return internal_error("no overlap engine on dp " + std::to_string(groups.dp_size()));
  const int layers = int(config.layers);
  auto expect = [&](Part part, int layer, std::vector<int> want, const char* what) -> Status {
    if (overlap->units_completed_by(part, layer) == want) return Status();
    return internal_error(std::string(what) + " completes other units than expected");
  };
  TSR_RETURN_IF_ERROR(expect(Part::kEmbed, 0, {0}, "the embedding"));
  for (int l = 0; l < layers; ++l) TSR_RETURN_IF_ERROR(expect(Part::kBlock, l, {1 + l}, "a block"));
  TSR_RETURN_IF_ERROR(expect(Part::kHead, 0, {layers + 1}, "the head"));
  return overlap->buckets();
}

int overlap_body(int rank, int size, Case c) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path(c.config));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, c.tp, c.dp);
  CHILD_OK(groups.status());
  auto buckets_or = check_marks(*env, *config, *groups, overlap_options(true, c.bucket_bytes));
  CHILD_OK(buckets_or.status());
  const size_t buckets = *buckets_or;
  auto overlapped =
      run_steps(*env, *config, *groups, overlap_options(true, c.bucket_bytes), kSteps);
  CHILD_OK(overlapped.status());
  auto again = run_steps(*env, *config, *groups, overlap_options(true, c.bucket_bytes), kSteps);
  CHILD_OK(again.status());
  auto plain = run_steps(*env, *config, *groups, overlap_options(false, 0), kSteps);
  CHILD_OK(plain.status());

  // Units: the embedding, each block, the head (zero.h); bucket_bytes 1 gives each its own.
  const size_t units = size_t(config->layers) + 2;
  CHILD_CHECK(c.bucket_bytes != 1 || buckets == units, "%zu buckets for %zu units", buckets, units);
  CHILD_CHECK(buckets >= 1, "no buckets");
  CHILD_CHECK(overlapped->losses == again->losses, "a second overlapped run's losses differ");
  CHILD_CHECK(overlapped->master.size() == again->master.size() &&
                  std::memcmp(overlapped->master.data(), again->master.data(),
                              overlapped->master.size() * sizeof(float)) == 0,
              "a second overlapped run's parameters differ");
  for (int s = 0; s < kSteps; ++s) {
    const double a = overlapped->losses[size_t(s)], b = plain->losses[size_t(s)];
    if (rank == 0) std::fprintf(stderr, "step %d loss %.7f (without overlap %.7f)\n", s + 1, a, b);
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b), "step %d loss %.9g, without %.9g", s + 1,
                a, b);
  }
  // The same grid: both hold this rank's tp shard in the same layout.
  CHILD_CHECK(overlapped->master.size() == plain->master.size(), "%zu parameters, without %zu",
              overlapped->master.size(), plain->master.size());
  double worst = 0, sum_sq = 0;
  for (size_t i = 0; i < plain->master.size(); ++i) {
    const double d = std::abs(double(overlapped->master[i]) - double(plain->master[i]));
    CHILD_CHECK(d <= kParamTol, "parameter %zu = %.9g, without overlap %.9g", i,
                double(overlapped->master[i]), double(plain->master[i]));
    worst = std::max(worst, d);
    sum_sq += d * d;
  }
  const double rms = std::sqrt(sum_sq / double(std::max<size_t>(plain->master.size(), 1)));
  CHILD_CHECK(rms <= kParamRmsTol, "parameter differences: rms %.3g", rms);
  std::fprintf(stderr,
               "rank %d tp %d dp %d, %zu buckets: parameters within %.3g of the run without "
               "overlap (rms %.3g)\n",
               rank, c.tp, c.dp, buckets, worst, rms);
  CHILD_OK(world->barrier());
  return 0;
}

void expect_overlap_matches_plain(Case c) {
  expect_ranks_pass(
      c.tp * c.dp, [c](int rank, int size) { return overlap_body(rank, size, c); },
      std::chrono::milliseconds(240000));
}

TEST(GptOverlap, DataParallelTwoMatchesAllreduceDenseBucketPerUnit) {
  expect_overlap_matches_plain({"tiny-llama.json", 1, 2, 1});
}
// Tied embeddings: the embedding's unit is marked after the embedding's backward, not the head's.
TEST(GptOverlap, DataParallelTwoMatchesAllreduceMoeTiedBucketPerUnit) {
  expect_overlap_matches_plain({"tiny-mixtral.json", 1, 2, 1});
}
TEST(GptOverlap, DataParallelTwoMatchesAllreduceDenseDefaultBuckets) {
  expect_overlap_matches_plain({"tiny-llama.json", 1, 2, 0});
}
// The engine's communicator is split from dp; the tp collectives stay on the compute stream.
TEST(GptOverlap, TwoByTwoGridMatchesAllreduceDense) {
  expect_overlap_matches_plain({"tiny-llama.json", 2, 2, 1});
}

void expect_refused(const Result<std::unique_ptr<GptTrainer>>& trainer, const std::string& what) {
  ASSERT_FALSE(trainer.ok()) << what;
  const std::string message = trainer.status().to_string();
  EXPECT_NE(message.find("overlap with " + what), std::string::npos) << message;
}

TEST(GptOverlap, RefusesZeroAndBf16Wire) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  TrainOptions zero = overlap_options(true, 0);
  zero.zero = 1;
  expect_refused(GptTrainer::create(*env->device, config, *env->kernels, {}, zero), "zero=1");
  TrainOptions bf16 = overlap_options(true, 0);
  bf16.grad_comm = DType::kBF16;
  expect_refused(GptTrainer::create(*env->device, config, *env->kernels, {}, bf16),
                 "grad_comm bf16");
}

int refuse_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  TrainOptions options = overlap_options(true, 0);
  options.adamw.clip_norm = 0;  // pp's own condition
  auto check = [&](const GptConfig& config, const ParallelGroups& groups,
                   const std::string& what) -> int {
    auto trainer = GptTrainer::create(*env->device, config, *env->kernels, groups, options);
    CHILD_CHECK(!trainer.ok(), "overlap with %s was accepted", what.c_str());
    const std::string message = trainer.status().to_string();
    CHILD_CHECK(message.find("overlap with " + what) != std::string::npos, "%s", message.c_str());
    return 0;
  };
  auto pp = make_groups(world, 1, 1, 2);
  CHILD_OK(pp.status());
  if (check(tiny_config(Tiny::kLlama), *pp, "pipeline parallelism pp 2") != 0) return 1;
  auto ep = make_groups(world, 1, 2, 1, 2);
  CHILD_OK(ep.status());
  if (check(tiny_config(Tiny::kMixtral), *ep, "expert parallelism ep 2") != 0) return 1;
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptOverlap, RefusesPipelineAndExpertParallelism) {
  expect_ranks_pass(2, refuse_body, std::chrono::milliseconds(120000));
}

}  // namespace
}  // namespace tessera::gpt::testing
