// ZeRO-2/3 under pipeline parallelism (examples/trainer/gpt/zero.h, pipeline.h): on a pp 2 x dp 2
// grid every stage shards its own units over its dp pair. Each rank (a forked process with its
// own discrete host device) trains a few steps as its stage and then, alone, the 1-rank reference
// with the same global batch: the losses and the stage's gathered master weights match within the
// f32 tolerances of model_test_parallel.cc, a run repeats itself bitwise, zero 3 is bitwise zero 2
// (gathering is exact), and each stage holds less at zero 2 and 3 than at zero 1.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

// Tolerances: model_test_support.h (here the dp sum and ZeRO-2/3's per-micro-batch reduction).
constexpr int kSteps = 3;
constexpr int kDp = 2, kPp = 2;
constexpr int64_t kMicroBatches = 3;  // per step and dp rank: warm-up, steady 1F1B, cool-down

unsigned long long ull(uint64_t v) {
  return (unsigned long long)v;
}

struct Case {
  int zero = 2;
  int64_t layers = 0;      // 0: the config's (2, one block per stage)
  bool recompute = false;  // full recomputation inside each stage
};

// No clipping: the trainer refuses it under pp (the norm is per stage).
TrainOptions options_for(int zero, int64_t micro_batches, bool recompute = false) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.zero = zero;
  options.recompute = recompute ? Recompute::kFull : Recompute::kNone;
  options.adamw.clip_norm = 0;
  return options;
}

// The stage's master weights (stage_layout order) against the 1-rank run's, found by name.
int check_stage_weights(int rank, const GptConfig& config, int stage, const RunOut& parallel,
                        const RunOut& reference) {
  auto range = stage_range(config.layers, stage, kPp);
  CHILD_OK(range.status());
  auto full = make_layout(config, 0, 1);
  CHILD_OK(full.status());
  const ParamLayout local = stage_layout(*full, *range);
  CHILD_CHECK(local.total == parallel.master.size(), "stage %d holds %zu weights, layout %llu",
              stage, parallel.master.size(), ull(local.total));
  std::map<std::string, const ParamSpec*> by_name;
  for (const ParamSpec& spec : full->specs) by_name[spec.name] = &spec;
  double worst = 0, sum_sq = 0;
  for (const ParamSpec& spec : local.specs) {
    const ParamSpec& whole = *by_name.at(spec.name);
    for (uint64_t j = 0; j < spec.local_count(); ++j) {
      const double got = parallel.master[spec.offset + j];
      const double want = reference.master[whole.offset + j];
      const double diff = std::abs(got - want);
      worst = std::max(worst, diff);
      sum_sq += diff * diff;
      CHILD_CHECK(diff <= kParamTol, "rank %d: %s[%llu] = %.9g, 1 rank %.9g", rank,
                  spec.name.c_str(), ull(j), got, want);
    }
  }
  const double rms = std::sqrt(sum_sq / double(std::max<size_t>(parallel.master.size(), 1)));
  std::fprintf(stderr,
               "rank %d (stage %d): %zu parameters within %.3g of the 1-rank run (rms %.3g)\n",
               rank, stage, parallel.master.size(), worst, rms);
  CHILD_CHECK(rms <= kParamRmsTol, "rank %d: parameter differences: rms %.3g", rank, rms);
  return 0;
}

int grid_body(int rank, int size, Case c) {
  const int zero = c.zero;
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  if (c.layers > 0) config->layers = c.layers;
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups_or = make_groups(world, 1, kDp, kPp);
  CHILD_OK(groups_or.status());
  const ParallelGroups groups = *groups_or;
  const int stage = groups.pp_rank();
  const TrainOptions options = options_for(zero, kMicroBatches, c.recompute);
  auto sharded = run_steps(*env, *config, groups, options, kSteps);
  CHILD_OK(sharded.status());
  CHILD_CHECK(sharded->zero.level == zero, "rank %d: zero plan level %d", rank,
              sharded->zero.level);
  if (rank == 0 && zero == 3) {
    std::fprintf(stderr, "%lld blocks, zero=3: %d gather slot(s)\n", (long long)config->layers,
                 sharded->zero.slots);
  }
  auto again = run_steps(*env, *config, groups, options, kSteps);
  CHILD_OK(again.status());
  CHILD_CHECK(again->losses == sharded->losses, "rank %d zero=%d: a repeated run's losses differ",
              rank, zero);
  CHILD_CHECK(same_bits(again->master, sharded->master),
              "rank %d zero=%d: a repeated run's weights differ", rank, zero);
  if (zero == 3) {
    auto two = run_steps(*env, *config, groups, options_for(2, kMicroBatches, c.recompute), kSteps);
    CHILD_OK(two.status());
    CHILD_CHECK(two->losses == sharded->losses && same_bits(two->master, sharded->master),
                "rank %d: zero=3 differs from zero=2 under pp", rank);
  }
  auto reference = run_steps(*env, *config, {}, options_for(0, kMicroBatches * kDp), kSteps);
  CHILD_OK(reference.status());
  for (int s = 0; s < kSteps; ++s) {
    const double a = sharded->losses[size_t(s)], b = reference->losses[size_t(s)];
    if (rank == 0) {
      std::fprintf(stderr, "zero=%d step %d loss %.7f (1 rank %.7f)\n", zero, s + 1, a, b);
    }
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b),
                "rank %d zero=%d step %d loss %.9g, 1 rank %.9g", rank, zero, s + 1, a, b);
  }
  if (check_stage_weights(rank, *config, stage, *sharded, *reference) != 0) return 1;
  CHILD_OK(world->barrier());
  return 0;
}

void expect_grid_matches_one_rank(Case c) {
  expect_ranks_pass(
      kDp * kPp, [c](int rank, int size) { return grid_body(rank, size, c); },
      std::chrono::milliseconds(240000));
}

TEST(GptPipelineZero, ZeroTwoTwoStagesByDataParallelTwoMatchesOneRankDense) {
  expect_grid_matches_one_rank({2});
}
// One block per stage: one gather slot, which the stage's two parts and the interleaved
// micro-batches' forwards, replays and backwards take in turn.
TEST(GptPipelineZero, ZeroThreeTwoStagesByDataParallelTwoMatchesOneRankDense) {
  expect_grid_matches_one_rank({3});
}
// Four blocks per stage: two gather slots (prefetch), and each block gathered again for its
// recomputation.
TEST(GptPipelineZero, ZeroThreeWithPrefetchAndRecomputationMatchesOneRankDense) {
  expect_grid_matches_one_rank({3, 8, true});
}

// bf16, 4 x 32 tokens, 8 blocks (4 per stage: with 1 block per stage the part in flight, a block,
// outweighs what sharding the stage saves). Each stage's bytes at zero 1, 2, 3 (no steps: every
// buffer is allocated at creation); the gradient falls at zero 2, the working copy at zero 3.
int memory_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  config->layers = 8;
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, kDp, kPp);
  CHILD_OK(groups.status());
  std::vector<GptTrainer::Memory> memory;
  for (int zero = 1; zero <= 3; ++zero) {
    TrainOptions options = options_for(zero, 2);
    options.act = DType::kBF16;
    options.micro_batch = 4;
    options.seq = 32;
    auto trainer = GptTrainer::create(*env->device, *config, *env->kernels, *groups, options);
    CHILD_OK(trainer.status());
    const GptTrainer::Memory& m = memory.emplace_back((*trainer)->memory());
    const ZeroPlan& plan = (*trainer)->zero();
    std::fprintf(stderr,
                 "rank %d (stage %d) pp %d x dp %d zero=%d: master %llu, grad %llu, work %llu, "
                 "pipeline %llu; total %llu bytes%s\n",
                 rank, groups->pp_rank(), kPp, kDp, zero, ull(m.params.master), ull(m.params.grad),
                 ull(m.params.work), ull(m.pipeline), ull(m.total()),
                 zero == 3 ? (plan.slots == 2 ? " (2 gather slots)" : " (1 gather slot)") : "");
    const uint64_t shard = plan.shard(), padded = plan.shards.padded;
    CHILD_CHECK(m.params.master == shard * 4, "rank %d zero=%d master %llu, shard %llu", rank, zero,
                ull(m.params.master), ull(shard));
    if (zero >= 2) {
      CHILD_CHECK(m.params.grad == (shard + plan.largest) * 4,
                  "rank %d zero=%d gradient %llu bytes, want (shard + largest part) x 4 = %llu",
                  rank, zero, ull(m.params.grad), ull((shard + plan.largest) * 4));
    }
    if (zero == 3) {
      CHILD_CHECK(m.params.work == (shard + uint64_t(plan.slots) * plan.largest) * 2,
                  "rank %d zero=3 working copy %llu bytes", rank, ull(m.params.work));
    } else {
      CHILD_CHECK(m.params.work == padded * 2, "rank %d zero=%d working copy %llu, padded %llu",
                  rank, zero, ull(m.params.work), ull(padded));
    }
  }
  CHILD_CHECK(memory[1].params.grad < memory[0].params.grad,
              "rank %d: zero 2 gradient %llu >= %llu", rank, ull(memory[1].params.grad),
              ull(memory[0].params.grad));
  CHILD_CHECK(memory[2].params.work < memory[1].params.work,
              "rank %d: zero 3 working copy %llu >= %llu", rank, ull(memory[2].params.work),
              ull(memory[1].params.work));
  for (size_t i = 1; i < memory.size(); ++i) {
    CHILD_CHECK(memory[i].total() < memory[i - 1].total(), "rank %d: zero=%zu holds %llu >= %llu",
                rank, i + 1, ull(memory[i].total()), ull(memory[i - 1].total()));
  }
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptPipelineZero, EachStageHoldsLessWithEachLevelTwoStagesByDataParallelTwo) {
  expect_ranks_pass(kDp * kPp, memory_body, std::chrono::milliseconds(120000));
}

}  // namespace
}  // namespace tessera::gpt::testing
