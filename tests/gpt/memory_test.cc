// The GPT trainer's device memory (examples/trainer/gpt/memory_report.h): the allocator's
// high-water mark (hal::Device::memory_stats) over creation and training steps equals the
// trainer's own accounting (GptTrainer::memory), and the planner's prediction for the same plan
// is computed role by role. Figures and the differences' causes: examples/trainer/gpt/README.md,
// "Memory". No timing is asserted.
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
int zero_body(int rank, int size, const char* file) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, size);
  CHILD_OK(groups.status());
  TrainOptions options = bf16_options(false);
  options.zero = 1;
  auto m = measure(*env, file, *groups, options, 2);
  CHILD_OK(m.status());
  const MemoryComparison c =
      compare_memory(m->accounted, m->steps_peak, m->setup_peak, m->predicted);
  if (rank == 0) std::fprintf(stderr, "%s dp=2 zero=1\n%s", file, memory_report_text(c, 0).c_str());
  const uint64_t accounted = m->accounted.total();
  CHILD_CHECK(m->steps_peak >= accounted && m->steps_peak <= accounted + kCollectiveScratchBytes,
              "%s: steps peak %llu B, accounted %llu B", file, (unsigned long long)m->steps_peak,
              (unsigned long long)accounted);
  const ::testing::AssertionResult compared = planner_compared(*m);
  CHILD_CHECK(compared, "%s: %s", file, compared.message());
  return 0;
}

TEST_P(GptMemory, ZeroOneOverTwoRanksPeaksAtItsShardedAccounting) {
  const char* file = GetParam();
  expect_ranks_pass(
      2, [file](int rank, int size) { return zero_body(rank, size, file); },
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
