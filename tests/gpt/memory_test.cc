// The GPT trainer's device memory (examples/trainer/gpt/memory_report.h): the allocator's
// high-water mark (hal::Device::memory_stats) over creation and training steps equals the
// trainer's own accounting (GptTrainer::memory), and the planner's prediction for the same plan
// is computed role by role. Figures and the differences' causes: examples/trainer/gpt/README.md,
// "Memory". No timing is asserted.
#include <cmath>
#include <cstring>

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

Result<Measured> measure(const DeviceEnv& env, const char* file, ParallelGroups groups,
                         const TrainOptions& options, int steps) {
  TSR_ASSIGN_OR_RETURN(GptConfig config, load_config(config_path(file)));
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
  TSR_ASSIGN_OR_RETURN(m.predicted, predict_memory(model, plan_shape(options, tp, dp, pp), stage));
  return m;
}

TrainOptions bf16_options(bool recompute) {
  TrainOptions o;
  o.micro_batch = 2;
  o.seq = 16;
  o.micro_batches = 2;
  o.act = DType::kBF16;
  o.recompute = recompute;
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
  const auto results = coll::testing::run_ranks(
      2, [file](int rank, int size) { return zero_body(rank, size, file); });
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank;
}

}  // namespace
}  // namespace tessera::gpt::testing
