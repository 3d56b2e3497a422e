// The GPT trainer's device memory (examples/trainer/gpt/memory_report.h): the allocator's
// high-water mark (hal::Device::memory_stats) over creation and training steps equals the
// trainer's own accounting (GptTrainer::memory), and the planner's prediction for the same plan
// is computed role by role. Figures and the differences' causes: examples/trainer/gpt/README.md,
// "Memory". No timing is asserted.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "forked_test_support.h"
#include "memory_report.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

// A multi-rank run's communicator may stage collectives through device buffers of its own, which
// the trainer does not account for; at most this many bytes here (seen: 0).
constexpr uint64_t kCollectiveScratchBytes = 64 << 10;

struct Measured {
  GptTrainer::Memory accounted;
  uint64_t setup_peak = 0;  // above the bytes in use before the trainer was created
  uint64_t steps_peak = 0;  // the same, over the training steps alone
  plan::MemoryBreakdown predicted;
  uint64_t largest = 0;  // ZeRO's largest block, padded elements (zero 2's second scratch)
};

// `predict`: ask the planner too (it refuses some plans the trainer runs: zero 3 under pp).
// `layers` > 0 replaces the config's block count (then the planner, which reads the file's, is not
// asked).
Result<Measured> measure(const DeviceEnv& env, const char* file, ParallelGroups groups,
                         const TrainOptions& options, int steps, bool predict = true,
                         int64_t layers = 0) {
  TSR_ASSIGN_OR_RETURN(GptConfig config, load_config(config_path(file)));
  if (layers > 0) config.layers = layers, predict = false;
  TSR_ASSIGN_OR_RETURN(ir::Model model, ir::load_model(config_path(file)));
  const int tp = groups.tp_size(), dp = groups.dp_size(), pp = groups.pp_size();
  const int stage = groups.pp_rank();
  const uint64_t before = env.device->memory_stats().in_use;
  env.device->reset_peak();
  Measured m;
  {
    TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(*env.device, config, *env.kernels,
                                                          std::move(groups), options));
    TSR_RETURN_IF_ERROR(trainer->init(*env.stream));
    m.setup_peak = env.device->memory_stats().peak - before;
    env.device->reset_peak();
    for (int s = 0; s < steps; ++s) TSR_RETURN_IF_ERROR(trainer->step(*env.stream).status());
    m.accounted = trainer->memory();
    m.largest = largest_block(trainer->zero());
    m.steps_peak = env.device->memory_stats().peak - before;
  }
  if (env.device->memory_stats().in_use != before) {
    return internal_error(std::string(file) + ": the trainer's device bytes were not all freed");
  }
  if (predict) {
    TSR_ASSIGN_OR_RETURN(m.predicted,
                         predict_memory(model, plan_shape(options, tp, dp, pp), stage));
  }
  return m;
}

TrainOptions bf16_options(bool recompute) {
  TrainOptions o;
  o.micro_batch = 2;
  o.seq = 16;
  o.micro_batches = 2;
  o.act = DType::kBF16;
  o.recompute = recompute ? Recompute::kFull : Recompute::kNone;
  return o;
}

// The planner's comparison is computed role by role: the bf16 working weights are 2 bytes per
// parameter of the same IR, the trainer's working copy exactly; master + moments are 12 bytes
// per parameter (the trainer's ZeRO shard rounds up to whole elements: within 16 bytes).
::testing::AssertionResult planner_compared(const Measured& m) {
  const MemoryComparison c = compare_memory(m.accounted, m.steps_peak, m.setup_peak, m.predicted);
  if (c.predicted_total <= 0 || m.predicted.activations <= 0)
    return ::testing::AssertionFailure() << "no prediction";
  if (m.predicted.weights != double(m.accounted.params.work))
    return ::testing::AssertionFailure() << "planner weights " << m.predicted.weights
                                         << " B, trainer working copy " << m.accounted.params.work;
  const double state =
      double(m.accounted.params.master + m.accounted.params.m + m.accounted.params.v);
  if (std::abs(m.predicted.optimizer - state) > 16)
    return ::testing::AssertionFailure() << "planner optimizer " << m.predicted.optimizer
                                         << " B, trainer master + m + v " << state;
  if (std::abs(c.difference() - (c.measured_peak - c.predicted_total) / c.predicted_total) > 1e-12)
    return ::testing::AssertionFailure() << "difference " << c.difference();
  return ::testing::AssertionSuccess();
}

class GptMemory : public ::testing::TestWithParam<const char*> {};

TEST_P(GptMemory, PeakEqualsTheTrainersAccountingAndThePlannerIsCompared) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  for (bool recompute : {false, true}) {
    auto m = measure(*env, GetParam(), {}, bf16_options(recompute), 2);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const MemoryComparison c =
        compare_memory(m->accounted, m->steps_peak, m->setup_peak, m->predicted);
    std::fprintf(stderr, "%s recompute=%d\n%s", GetParam(), int(recompute),
                 memory_report_text(c, 0).c_str());
    // One rank allocates everything once, at creation, and nothing per step: both peaks are the
    // accounting to the byte.
    EXPECT_EQ(m->setup_peak, m->accounted.total()) << "recompute=" << recompute;
    EXPECT_EQ(m->steps_peak, m->accounted.total()) << "recompute=" << recompute;
    EXPECT_TRUE(planner_compared(*m)) << "recompute=" << recompute;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GptMemory,
                         ::testing::Values("tiny-llama.json", "tiny-mixtral.json"),
                         [](const auto& param_info) {
                           return std::strstr(param_info.param, "mixtral") ? "Mixtral" : "Llama";
                         });

// dp=2 ZeRO-1 over forked ranks: each rank's peak over the steps is its accounting (plus what the
// communicator may stage), and the planner's sharded optimizer state is the trainer's shard.
// `overlap`: the same through --overlap (grad_overlap.h: zero 1, and zero 0 with bf16 on the wire,
// whose engine holds the bf16 wire copy the trainer would; zero.h: zero 2/3's reduce-scatters, and
// zero 3's gathers, on a communication stream, with a second gradient scratch of the largest
// block): the peak is still
// the accounting, and the accounting that of the run without the option plus that scratch.
int zero_body(int rank, int size, const char* file, bool overlap = false, int zero = 1,
              DType wire = DType::kF32) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, size);
  CHILD_OK(groups.status());
  TrainOptions options = bf16_options(false);
  options.zero = zero;
  options.grad_comm = wire;
  options.overlap = overlap;
  // The planner's weights are the whole working copy; zero 3 keeps a shard and gather slots: the
  // planner is not asked there.
  const bool predict = zero < 3;
  auto m = measure(*env, file, *groups, options, 2, predict);
  CHILD_OK(m.status());
  const MemoryComparison c =
      compare_memory(m->accounted, m->steps_peak, m->setup_peak, m->predicted);
  if (rank == 0) {
    std::fprintf(stderr, "%s dp=2 zero=%d%s%s\n%s", file, zero,
                 wire == DType::kBF16 ? " bf16 wire" : "", overlap ? " overlap" : "",
                 memory_report_text(c, 0).c_str());
  }
  const uint64_t accounted = m->accounted.total();
  if (overlap) {
    options.overlap = false;
    auto plain = measure(*env, file, *groups, options, 2, false);
    CHILD_OK(plain.status());
    const uint64_t extra = zero >= 2 ? m->largest * sizeof(float) : 0;
    CHILD_CHECK(plain->accounted.total() + extra == accounted,
                "%s: accounted %llu B, without overlap %llu B", file, (unsigned long long)accounted,
                (unsigned long long)plain->accounted.total());
    if (rank == 0) {
      std::fprintf(stderr, "%s: steps peak %llu B with overlap, %llu B without\n", file,
                   (unsigned long long)m->steps_peak, (unsigned long long)plain->steps_peak);
    }
  }
  CHILD_CHECK(m->steps_peak >= accounted && m->steps_peak <= accounted + kCollectiveScratchBytes,
              "%s: steps peak %llu B, accounted %llu B", file, (unsigned long long)m->steps_peak,
              (unsigned long long)accounted);
  if (predict) {
    const ::testing::AssertionResult compared = planner_compared(*m);
    CHILD_CHECK(compared, "%s: %s", file, compared.message());
  }
  return 0;
}

TEST_P(GptMemory, ZeroOneOverTwoRanksPeaksAtItsShardedAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file); },
      std::chrono::milliseconds(60000));
}

TEST_P(GptMemory, OverlapZeroOneOverTwoRanksPeaksAtItsAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file, true); },
      std::chrono::milliseconds(60000));
}
// zero 2 still saves against zero 1 where the two scratch parts are smaller than the rest of the
// gradient: figures in the README ("Overlap"); the peak is asserted, not the saving.
TEST_P(GptMemory, OverlapZeroTwoOverTwoRanksPeaksAtItsAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file, true, 2); },
      std::chrono::milliseconds(60000));
}
// With 8 blocks (tiny-llama's are its largest parts) zero 2 through its communication stream
// still holds less than zero 1, and zero 3 less than zero 2: each rank's steps peak, at zero 1, 2
// and 3, without and with --overlap.
int zero_two_saves_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, size);
  CHILD_OK(groups.status());
  // zero 1; zero 2 without and with --overlap; zero 3 without and with --overlap.
  const int zero[5] = {1, 2, 2, 3, 3};
  const bool overlap[5] = {false, false, true, false, true};
  uint64_t peak[5] = {}, grad[5] = {};
  for (int i = 0; i < 5; ++i) {
    TrainOptions options = bf16_options(false);
    options.zero = zero[i];
    options.overlap = overlap[i];
    auto m = measure(*env, "tiny-llama.json", *groups, options, 2, false, 8);
    CHILD_OK(m.status());
    peak[i] = m->steps_peak;
    grad[i] = m->accounted.params.grad;
    const uint64_t accounted = m->accounted.total();
    CHILD_CHECK(peak[i] >= accounted && peak[i] <= accounted + kCollectiveScratchBytes,
                "case %d: steps peak %llu B, accounted %llu B", i, (unsigned long long)peak[i],
                (unsigned long long)accounted);
  }
  if (rank == 0) {
    std::fprintf(stderr, "tiny-llama, 8 blocks, dp 2: steps peak (grad bytes):");
    for (int i = 0; i < 5; ++i) {
      std::fprintf(stderr, " zero %d%s %llu (%llu)", zero[i], overlap[i] ? " --overlap" : "",
                   (unsigned long long)peak[i], (unsigned long long)grad[i]);
    }
    std::fprintf(stderr, "\n");
  }
  CHILD_CHECK(peak[2] < peak[0] && grad[2] < grad[0], "zero 2 --overlap saves nothing on zero 1");
  CHILD_CHECK(peak[4] < peak[2], "zero 3 --overlap saves nothing on zero 2 --overlap");
  CHILD_CHECK(peak[1] <= peak[2] && peak[3] <= peak[4], "--overlap holds less than without");
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptMemoryOverlap, ZeroTwoThroughItsStreamStillSavesWithEightBlocks) {
  expect_ranks_pass(2, zero_two_saves_body, std::chrono::milliseconds(120000));
}

TEST_P(GptMemory, OverlapZeroThreeOverTwoRanksPeaksAtItsAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file, true, 3); },
      std::chrono::milliseconds(60000));
}
TEST_P(GptMemory, OverlapBf16WireOverTwoRanksPeaksAtItsAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file, true, 0, DType::kBF16); },
      std::chrono::milliseconds(60000));
}

// Pipeline stages (1F1B, pipeline.h) over forked ranks, tiny-llama (MoE is not yet pipelined):
// pp 2, pp 3 (a middle stage), and pp 2 x dp 2 at zero 1, 2 and 3. The schedule's buffers (kept
// inputs, received gradient) are in the accounting, as many as pipeline.h states: each rank's
// steps peak is its accounting to the byte, plus at most the communicator's staging under dp.
// The planner has no term for those buffers.
struct PipelineCase {
  int pp = 2, dp = 1, zero = 0;
  int64_t layers = 0;  // > 0: instead of the config's 2 blocks (no planner comparison then)
};

int pipeline_body(int rank, int size, PipelineCase p) {
  const char* file = "tiny-llama.json";
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, p.dp, p.pp);
  CHILD_OK(groups.status());
  const int stage = groups->pp_rank();
  TrainOptions options = bf16_options(false);
  options.zero = p.zero;
  options.adamw.clip_norm = 0;  // refused under pp (the norm is per stage)
  // The planner refuses zero 3 under pp ("weights would be gathered per micro-batch per stage").
  const bool predict = p.zero < 3 && p.layers == 0;
  auto m = measure(*env, file, *groups, options, 2, predict, p.layers);
  CHILD_OK(m.status());
  const MemoryComparison c =
      compare_memory(m->accounted, m->steps_peak, m->setup_peak, m->predicted);
  if (groups->dp_rank() == 0) {
    std::fprintf(stderr, "%s pp %d x dp %d zero=%d, stage %d\n%s", file, p.pp, p.dp, p.zero, stage,
                 memory_report_text(c, rank).c_str());
  }
  // pp - s kept inputs after the first stage, a received gradient before the last, act [T, h]
  // each, and the f64 loss sums.
  auto config = load_config(config_path(file));
  CHILD_OK(config.status());
  const uint64_t buffer = uint64_t(options.micro_batch * options.seq * config->hidden) * 2;
  const uint64_t buffers = uint64_t(stage > 0 ? p.pp - stage : 0) + (stage < p.pp - 1 ? 1 : 0);
  CHILD_CHECK(m->accounted.pipeline == buffers * buffer + 2 * sizeof(double),
              "stage %d of %d: pipeline bytes %llu, want %llu buffers of %llu + 16", stage, p.pp,
              (unsigned long long)m->accounted.pipeline, (unsigned long long)buffers,
              (unsigned long long)buffer);
  const uint64_t accounted = m->accounted.total();
  const uint64_t staging = p.dp > 1 ? kCollectiveScratchBytes : 0;
  CHILD_CHECK(m->steps_peak >= accounted && m->steps_peak <= accounted + staging,
              "stage %d: steps peak %llu B, accounted %llu B", stage,
              (unsigned long long)m->steps_peak, (unsigned long long)accounted);
  if (predict) {
    const ::testing::AssertionResult compared = planner_compared(*m);
    CHILD_CHECK(compared, "stage %d: %s", stage, compared.message());
  }
  CHILD_OK(world->barrier());
  return 0;
}

void expect_pipeline_peaks(PipelineCase p) {
  expect_ranks_pass(
      p.pp * p.dp, [p](int rank, int size) { return pipeline_body(rank, size, p); },
      std::chrono::milliseconds(120000));
}

TEST(GptMemoryPipeline, TwoStagesPeakAtTheirAccounting) {
  expect_pipeline_peaks({2, 1, 0});
}
// The middle stage keeps two inputs and receives a gradient; the first stage warms up twice.
TEST(GptMemoryPipeline, ThreeStagesPeakAtTheirAccounting) {
  expect_pipeline_peaks({3, 1, 0, 3});
}
TEST(GptMemoryPipeline, TwoStagesByDataParallelTwoPeakAtTheirShardedAccounting) {
  for (int zero = 1; zero <= 3; ++zero) expect_pipeline_peaks({2, 2, zero});
}

}  // namespace
}  // namespace tessera::gpt::testing
