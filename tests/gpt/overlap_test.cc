// The GPT trainer's --overlap (TrainOptions::overlap, examples/trainer/gpt/grad_overlap.h): the dp
// gradient sum through the overlap engine, bucket by bucket as the last micro-batch's backward
// finishes each unit, against the same grid summing with one allreduce after the backward. Over
// forked ranks: the losses and parameters match within the parallel tests' tolerances
// (model_test_support.h), bitwise where every element's sum is the same additions in the same
// order (bf16 on the wire, pp, zero 1 and 2: see Case::bitwise), a run repeats itself bitwise, and
// what --overlap does not cover (zero 3) is refused by name.
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
  const char* config = "tiny-llama.json";  // null: tiny_config(tiny)
  int tp = 1;
  int dp = 2;
  uint64_t bucket_bytes = 0;  // 1: a bucket per unit; 0: the engine's rule (one bucket here)
  int pp = 1;
  DType wire = DType::kF32;  // grad_comm
  int ep = 1;
  int64_t layers = 0;  // > 0: instead of the config's block count
  int zero = 0;
  int64_t micro_batches = 2;
  // Bitwise equal to the run without overlap: where every element's sum is the same additions in
  // the same order (dp 2: one addition, a + b; the bf16 codec casts, sums and casts back as the
  // trainer's bf16 path does; a tied embedding under pp is summed over the embedding group first,
  // as without the option). Else within the parallel tests' tolerances.
  bool bitwise = false;
  Tiny tiny = Tiny::kLlama;
};

TrainOptions overlap_options(bool overlap, const Case& c) {
  TrainOptions options = parallel_test_options(c.micro_batches);
  options.overlap = overlap;
  options.overlap_bucket_bytes = overlap ? c.bucket_bytes : 0;
  options.grad_comm = c.wire;
  options.zero = c.zero;
  return options;
}
TrainOptions overlap_options(bool overlap, uint64_t bucket_bytes) {
  return overlap_options(overlap, Case{nullptr, 1, 2, bucket_bytes});
}

// run_steps (model_test_support.h) and each step's communication seconds (StepResult).
struct CommRun {
  RunOut out;
  std::vector<double> comm, exposed;
};
Result<CommRun> run_comm_steps(const DeviceEnv& env, const GptConfig& config,
                               const ParallelGroups& groups, const TrainOptions& options) {
  TSR_ASSIGN_OR_RETURN(auto trainer,
                       GptTrainer::create(*env.device, config, *env.kernels, groups, options));
  TSR_RETURN_IF_ERROR(trainer->init(*env.stream));
  CommRun run;
  for (int s = 0; s < kSteps; ++s) {
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer->step(*env.stream));
    run.out.losses.push_back(r.loss);
    run.comm.push_back(r.comm_seconds);
    run.exposed.push_back(r.exposed_comm_seconds);
  }
  TSR_ASSIGN_OR_RETURN(run.out.master, trainer->download_master(*env.stream));
  run.out.memory = trainer->memory();
  return run;
}

// Which units each part's backward completes (marks ready): its own, except that a tied
// embedding waits for the embedding's backward (the head's writes into it first); under pp a tied
// embedding's unit is left to mark_deferred() (after the embedding group's sum). Returns the
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
  const StageRange& stage = trainer->model().stage();
  const bool deferred = groups.pp_size() > 1 && config.tied && (stage.first || stage.last);
  if (overlap->deferred_units().size() != (deferred ? 1u : 0u)) {
    return internal_error(std::to_string(overlap->deferred_units().size()) +
                          " deferred units on stage " + std::to_string(groups.pp_rank()));
  }
  // ep: the experts of each MoE block are a unit of the expert_dp engine, marked with the block.
  for (int l = 0; l < layers; ++l) {
    const bool moe = !trainer->model().params().layout().blocks[size_t(l)].experts.empty();
    const size_t want = groups.expert_dp && moe ? 1 : 0;
    if (overlap->expert_units_completed_by(l).size() != want) {
      return internal_error("block " + std::to_string(l) + " completes " +
                            std::to_string(overlap->expert_units_completed_by(l).size()) +
                            " expert units");
    }
  }
  if (groups.pp_size() > 1) {
    // The stage's units, in its layout order: the embedding (first stage, or the last with a
    // tied head), its blocks, the head (last stage).
    int u = stage.first || (stage.last && config.tied) ? 1 : 0;
    if (stage.first) {
      TSR_RETURN_IF_ERROR(
          expect(Part::kEmbed, 0, deferred ? std::vector<int>{} : std::vector{0}, "the embedding"));
    }
    for (int l = stage.first_layer; l < stage.end_layer; ++l)
      TSR_RETURN_IF_ERROR(expect(Part::kBlock, l, {u++}, "a block"));
    if (stage.last) TSR_RETURN_IF_ERROR(expect(Part::kHead, 0, {u}, "the head"));
    return overlap->buckets();
  }
  TSR_RETURN_IF_ERROR(expect(Part::kEmbed, 0, {0}, "the embedding"));
  for (int l = 0; l < layers; ++l) TSR_RETURN_IF_ERROR(expect(Part::kBlock, l, {1 + l}, "a block"));
  TSR_RETURN_IF_ERROR(expect(Part::kHead, 0, {layers + 1}, "the head"));
  return overlap->buckets();
}

// The padded elements of the plan's largest block part (zero 2 --overlap's second scratch).
uint64_t run_zero_largest(const DeviceEnv& env, const GptConfig& config,
                          const ParallelGroups& groups, const TrainOptions& options) {
  auto trainer = GptTrainer::create(*env.device, config, *env.kernels, groups, options);
  if (!trainer.ok()) return 0;
  return largest_block((*trainer)->zero());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int overlap_body(int rank, int size, Case c) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config =
      c.config ? load_config(config_path(c.config)) : Result<GptConfig>(tiny_config(c.tiny));
  CHILD_OK(config.status());
  if (c.layers > 0) config->layers = c.layers;
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, c.tp, c.dp, c.pp, c.ep);
  CHILD_OK(groups.status());
  // zero 2/3: no GradSync (ZeroEngine's collectives on its communication stream, zero.h).
  size_t buckets = 0;
  if (c.zero < 2) {
    auto buckets_or = check_marks(*env, *config, *groups, overlap_options(true, c));
    CHILD_OK(buckets_or.status());
    buckets = *buckets_or;
    CHILD_CHECK(buckets >= 1, "no buckets");
  }
  auto overlapped = run_comm_steps(*env, *config, *groups, overlap_options(true, c));
  CHILD_OK(overlapped.status());
  auto again = run_comm_steps(*env, *config, *groups, overlap_options(true, c));
  CHILD_OK(again.status());
  auto plain_run = run_comm_steps(*env, *config, *groups, overlap_options(false, c));
  CHILD_OK(plain_run.status());
  const RunOut& plain = plain_run->out;

  // Units: the embedding, each block, the head (zero.h); bucket_bytes 1 gives each its own.
  const size_t units = size_t(config->layers) + 2;
  CHILD_CHECK(c.pp > 1 || c.ep > 1 || c.zero >= 2 || c.bucket_bytes != 1 || buckets == units,
              "%zu buckets for %zu units", buckets, units);
  CHILD_CHECK(overlapped->out.losses == again->out.losses,
              "a second overlapped run's losses differ");
  CHILD_CHECK(same_bits(overlapped->out.master, again->out.master),
              "a second overlapped run's parameters differ");
  // The engine's counters reach the step's result (no timing asserted: only that they are there).
  for (int s = 0; s < kSteps; ++s) {
    CHILD_CHECK(overlapped->comm[size_t(s)] > 0 && overlapped->exposed[size_t(s)] >= 0,
                "step %d: comm %.3g s, exposed %.3g s", s + 1, overlapped->comm[size_t(s)],
                overlapped->exposed[size_t(s)]);
    CHILD_CHECK(plain_run->comm[size_t(s)] == 0, "comm seconds without overlap");
  }
  // The engine's bf16 wire copy is accounted where the trainer's was; zero 2's second gradient
  // scratch (the largest block, f32) is the only other difference.
  CHILD_CHECK(overlapped->out.memory.trainer == plain.memory.trainer,
              "trainer bytes %llu, without overlap %llu",
              (unsigned long long)overlapped->out.memory.trainer,
              (unsigned long long)plain.memory.trainer);
  const uint64_t extra =
      c.zero >= 2 ? overlapped->out.memory.params.grad - plain.memory.params.grad : 0;
  if (c.zero >= 2) {
    CHILD_CHECK(plain.memory.params.grad + extra == overlapped->out.memory.params.grad &&
                    extra == run_zero_largest(*env, *config, *groups, overlap_options(false, c)) *
                                 sizeof(float),
                "zero 2 grad bytes %llu, without overlap %llu",
                (unsigned long long)overlapped->out.memory.params.grad,
                (unsigned long long)plain.memory.params.grad);
  }
  CHILD_CHECK(overlapped->out.memory.total() == plain.memory.total() + extra,
              "accounted %llu B, without overlap %llu B",
              (unsigned long long)overlapped->out.memory.total(),
              (unsigned long long)plain.memory.total());
  const std::string loss = loss_beyond(overlapped->out.losses, plain.losses,
                                       c.bitwise ? 0 : kLossTol, "without overlap", rank == 0);
  CHILD_CHECK(loss.empty(), "%s", loss.c_str());
  // The same grid: both hold this rank's tp shard (this stage's) in the same layout.
  CHILD_CHECK(overlapped->out.master.size() == plain.master.size(), "%zu parameters, without %zu",
              overlapped->out.master.size(), plain.master.size());
  if (c.bitwise) {
    CHILD_CHECK(same_bits(overlapped->out.master, plain.master),
                "parameters differ from the run without overlap");
  }
  double worst = 0, sum_sq = 0;
  for (size_t i = 0; i < plain.master.size(); ++i) {
    const double d = std::abs(double(overlapped->out.master[i]) - double(plain.master[i]));
    CHILD_CHECK(d <= kParamTol, "parameter %zu = %.9g, without overlap %.9g", i,
                double(overlapped->out.master[i]), double(plain.master[i]));
    worst = std::max(worst, d);
    sum_sq += d * d;
  }
  const double rms = std::sqrt(sum_sq / double(std::max<size_t>(plain.master.size(), 1)));
  CHILD_CHECK(rms <= kParamRmsTol, "parameter differences: rms %.3g", rms);
  if (c.wire == DType::kBF16) {
    // Negative control: f32 on the wire trains differently, so the bitwise match above shows
    // the engine's bf16 codec ran, not an f32 sum.
    Case f32 = c;
    f32.wire = DType::kF32;
    auto wide = run_comm_steps(*env, *config, *groups, overlap_options(true, f32));
    CHILD_OK(wide.status());
    CHILD_CHECK(!same_bits(wide->out.master, overlapped->out.master),
                "f32 and bf16 on the wire gave the same parameters");
  }
  std::fprintf(stderr,
               "rank %d tp %d dp %d pp %d zero %d wire %s, %zu buckets: parameters within %.3g of "
               "the run without overlap (rms %.3g); comm %.3f ms, exposed %.3f ms (medians)\n",
               rank, c.tp, c.dp, c.pp, c.zero, c.wire == DType::kBF16 ? "bf16" : "f32", buckets,
               worst, rms, median(overlapped->comm) * 1e3, median(overlapped->exposed) * 1e3);
  CHILD_OK(world->barrier());
  return 0;
}

void expect_overlap_matches_plain(Case c) {
  expect_grid_ranks_pass(c, overlap_body, std::chrono::milliseconds(240000));
}

TEST(GptOverlap, DataParallelTwoMatchesAllreduceDenseBucketPerUnit) {
  expect_overlap_matches_plain({.bucket_bytes = 1});
}
// Tied embeddings: the embedding's unit is marked after the embedding's backward, not the head's.
TEST(GptOverlap, DataParallelTwoMatchesAllreduceMoeTiedBucketPerUnit) {
  expect_overlap_matches_plain({.config = "tiny-mixtral.json", .bucket_bytes = 1});
}
TEST(GptOverlap, DataParallelTwoMatchesAllreduceDenseDefaultBuckets) {
  expect_overlap_matches_plain({});
}
// The engine's communicator is split from dp; the tp collectives stay on the compute stream.
TEST(GptOverlap, TwoByTwoGridMatchesAllreduceDense) {
  expect_overlap_matches_plain({.tp = 2, .bucket_bytes = 1});
}

// bf16 on the wire: the engine's bf16 codec against the trainer's cast + bf16 allreduce.
TEST(GptOverlap, Bf16WireBitwiseLikeTheTrainersBf16Dense) {
  expect_overlap_matches_plain({.bucket_bytes = 1, .wire = DType::kBF16, .bitwise = true});
}
TEST(GptOverlap, Bf16WireBitwiseLikeTheTrainersBf16MoeTiedDefaultBuckets) {
  expect_overlap_matches_plain(
      {.config = "tiny-mixtral.json", .wire = DType::kBF16, .bitwise = true});
}
TEST(GptOverlap, Bf16WireBitwiseLikeTheTrainersBf16TwoByTwoGrid) {
  expect_overlap_matches_plain({.tp = 2, .bucket_bytes = 1, .wire = DType::kBF16, .bitwise = true});
}

// pp 2 x dp 2: each stage's engine on its own dp group, units marked at the last of 3 backwards
// under 1F1B (warm-up, steady state and cool-down backwards).
TEST(GptOverlap, TwoStagesByDataParallelTwoBitwiseLikeAllreduceDense) {
  expect_overlap_matches_plain({.bucket_bytes = 1, .pp = 2, .micro_batches = 3, .bitwise = true});
}
// A tied embedding on the first and last stage: summed over the embedding group, then marked.
TEST(GptOverlap, TwoStagesByDataParallelTwoBitwiseLikeAllreduceTied) {
  expect_overlap_matches_plain({.config = nullptr,
                                .bucket_bytes = 1,
                                .pp = 2,
                                .micro_batches = 3,
                                .bitwise = true,
                                .tiny = Tiny::kGpt2});
}
TEST(GptOverlap, TwoStagesByDataParallelTwoBf16WireTiedDefaultBuckets) {
  expect_overlap_matches_plain({.config = nullptr,
                                .pp = 2,
                                .wire = DType::kBF16,
                                .micro_batches = 3,
                                .bitwise = true,
                                .tiny = Tiny::kGpt2});
}

// zero 1: the engine sums the whole (padded) gradient, ZeroEngine updates the slices.
TEST(GptOverlap, ZeroOneBitwiseLikeZeroOneDenseBucketPerUnit) {
  expect_overlap_matches_plain({.bucket_bytes = 1, .zero = 1, .bitwise = true});
}
TEST(GptOverlap, ZeroOneBitwiseLikeZeroOneMoeTiedDefaultBuckets) {
  expect_overlap_matches_plain({.config = "tiny-mixtral.json", .zero = 1, .bitwise = true});
}
TEST(GptOverlap, ZeroOneBitwiseLikeZeroOneTwoStagesByDataParallelTwo) {
  expect_overlap_matches_plain(
      {.bucket_bytes = 1, .pp = 2, .zero = 1, .micro_batches = 3, .bitwise = true});
}

// ep 2 over dp 2: every rank holds other experts (no expert sum), the rest through the engine.
TEST(GptOverlap, ExpertParallelTwoOverDataParallelTwoBitwiseMoe) {
  expect_overlap_matches_plain(
      {.config = "tiny-mixtral.json", .bucket_bytes = 1, .ep = 2, .bitwise = true});
}
// ep 2 over dp 4: the experts sum over expert_dp (2 ranks) through a second engine, the rest over
// dp 4 (a 4-rank sum: the ring's order depends on where an element falls in the buffer, which
// differs between one buffer and a bucket per unit, so within the tolerances, not bitwise).
TEST(GptOverlap, ExpertParallelTwoOverDataParallelFourMatchesMoe) {
  expect_overlap_matches_plain(
      {.config = "tiny-mixtral.json", .dp = 4, .bucket_bytes = 1, .ep = 2});
}
TEST(GptOverlap, ExpertParallelTwoOverDataParallelFourBf16WireMoeDefaultBuckets) {
  expect_overlap_matches_plain(
      {.config = "tiny-mixtral.json", .dp = 4, .wire = DType::kBF16, .ep = 2});
}

// zero 2: ZeroEngine's reduce-scatters on a communication stream (zero.h, "Overlap"), two
// gradient scratch buffers alternating; the same collectives in the same order.
TEST(GptOverlap, ZeroTwoBitwiseLikeZeroTwoDense) {
  expect_overlap_matches_plain({.zero = 2, .bitwise = true});
}
// The tied embedding's unit is reduced twice per micro-batch (with the head, with the embedding).
TEST(GptOverlap, ZeroTwoBitwiseLikeZeroTwoMoeTied) {
  expect_overlap_matches_plain({.config = "tiny-mixtral.json", .zero = 2, .bitwise = true});
}
TEST(GptOverlap, ZeroTwoBitwiseLikeZeroTwoTwoByTwoGrid) {
  expect_overlap_matches_plain({.tp = 2, .zero = 2, .bitwise = true});
}
TEST(GptOverlap, ZeroTwoBitwiseLikeZeroTwoTwoStagesByDataParallelTwo) {
  expect_overlap_matches_plain({.pp = 2, .zero = 2, .micro_batches = 3, .bitwise = true});
}

// zero 3: the gathers (and the prefetch into the second slot) on the communication stream too,
// the compute stream waiting for a part's slot before its forward, replay or backward. With 8
// blocks the plan has two gather slots (zero.h), with tiny-llama's 2 one.
TEST(GptOverlap, ZeroThreeBitwiseLikeZeroThreeDenseEightBlocks) {
  expect_overlap_matches_plain({.layers = 8, .zero = 3, .bitwise = true});
}
TEST(GptOverlap, ZeroThreeBitwiseLikeZeroThreeDense) {
  expect_overlap_matches_plain({.zero = 3, .bitwise = true});
}
// The tied embedding is in two parts (the head's and the embedding's).
TEST(GptOverlap, ZeroThreeBitwiseLikeZeroThreeMoeTied) {
  expect_overlap_matches_plain({.config = "tiny-mixtral.json", .zero = 3, .bitwise = true});
}
TEST(GptOverlap, ZeroThreeBitwiseLikeZeroThreeTwoByTwoGridEightBlocks) {
  expect_overlap_matches_plain({.tp = 2, .layers = 8, .zero = 3, .bitwise = true});
}
TEST(GptOverlap, ZeroThreeBitwiseLikeZeroThreeTwoStagesByDataParallelTwoEightBlocks) {
  expect_overlap_matches_plain(
      {.pp = 2, .layers = 8, .zero = 3, .micro_batches = 3, .bitwise = true});
}

// What the option refuses is what the plain path refuses: zero with bf16 on the wire.
TEST(GptOverlap, RefusesWhatThePlainPathRefuses) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  TrainOptions bf16 = overlap_options(true, 0);
  bf16.zero = 1;
  bf16.grad_comm = DType::kBF16;
  auto refused = GptTrainer::create(*env->device, config, *env->kernels, {}, bf16);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().to_string().find("zero=1 needs grad_comm f32"), std::string::npos)
      << refused.status().to_string();
  // Every level is accepted (dp 1 here: nothing to overlap).
  for (int level : {0, 1, 2, 3}) {
    TrainOptions ok = overlap_options(true, 0);
    ok.zero = level;
    EXPECT_TRUE(GptTrainer::create(*env->device, config, *env->kernels, {}, ok).ok()) << level;
  }
}

}  // namespace
}  // namespace tessera::gpt::testing
