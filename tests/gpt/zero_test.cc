// ZeRO-1/2/3 of the GPT trainer (examples/trainer/gpt/zero.h) over forked ranks against a 1-rank
// run: the losses and the gathered master weights match within the f32 tolerances of the
// parallel tests (model_test_parallel.cc), a run repeats itself bitwise, and the bytes each rank
// holds are those zero.h states — master, m, v 1/dp (up to per-unit padding) from zero 1, the
// gradient shard plus one part's scratch from zero 2, the working-copy shard plus its gather
// slots at zero 3 — and fall level by level. What ZeRO cannot shard is refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

// Tolerances: model_test_support.h (here the dp sum of gradients, ZeRO-2/3's per-micro-batch
// reduction, the norm summed per shard).
constexpr int kSteps = 4;

struct Case {
  const char* config;
  int zero;
  int tp;
  int dp;
  bool recompute = false;
  int64_t micro_batches = 2;  // per rank and step (the 1-rank run takes dp times as many)
};

TrainOptions zero_options(int zero, int64_t micro_batches, bool recompute) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.zero = zero;
  options.recompute = recompute ? Recompute::kFull : Recompute::kNone;
  return options;
}

unsigned long long ull(uint64_t v) {
  return (unsigned long long)v;
}

// The bytes zero.h states for `plan`; `esize`: the activation dtype's.
int check_zero_bytes(int rank, const ZeroPlan& plan, const Params::Bytes& mine, uint64_t total,
                     int dp, size_t esize) {
  const uint64_t shard = plan.shard(), padded = plan.shards.padded;
  const uint64_t units = plan.shards.units.size();
  CHILD_CHECK(shard * uint64_t(dp) >= total && shard * uint64_t(dp) < total + units * uint64_t(dp),
              "shard %llu x dp %d for %llu parameters in %llu units", ull(shard), dp, ull(total),
              ull(units));
  for (uint64_t bytes : {mine.master, mine.m, mine.v}) {
    CHILD_CHECK(bytes == shard * 4, "optimizer-state buffer of %llu bytes, want %llu", ull(bytes),
                ull(shard * 4));
  }
  const uint64_t grad = plan.level >= 2 ? (shard + plan.largest) * 4 : padded * 4;
  CHILD_CHECK(mine.grad == grad, "zero=%d gradient bytes %llu, want %llu", plan.level,
              ull(mine.grad), ull(grad));
  if (plan.level >= 2) {
    CHILD_CHECK(mine.grad < padded * 4, "zero=%d gradient bytes %llu, zero 1 holds %llu",
                plan.level, ull(mine.grad), ull(padded * 4));
  }
  const uint64_t work =
      (plan.level >= 3 ? shard + uint64_t(plan.slots) * plan.largest : padded) * esize;
  CHILD_CHECK(mine.work == work, "zero=%d working-copy bytes %llu, want %llu", plan.level,
              ull(mine.work), ull(work));
  if (plan.level >= 3) {
    CHILD_CHECK(mine.work < padded * esize, "zero=3 working-copy bytes %llu, zero 2 holds %llu",
                ull(mine.work), ull(padded * esize));
  }
  return 0;
}

int zero_body(int rank, int size, Case c) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path(c.config));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, c.tp, c.dp);
  CHILD_OK(groups.status());
  const TrainOptions options = zero_options(c.zero, c.micro_batches, c.recompute);
  auto sharded = run_steps(*env, *config, *groups, options, kSteps);
  CHILD_OK(sharded.status());
  auto again = run_steps(*env, *config, *groups, options, kSteps);
  CHILD_OK(again.status());
  // The 1-rank run accumulates dp times as many micro-batches: the same samples (trainer.h).
  auto reference =
      run_steps(*env, *config, {}, zero_options(0, c.micro_batches * c.dp, false), kSteps);
  CHILD_OK(reference.status());
  if (c.zero == 3) {
    // Gathering is exact and the gradients are those of zero 2: bitwise zero 2's steps.
    auto two =
        run_steps(*env, *config, *groups, zero_options(2, c.micro_batches, c.recompute), kSteps);
    CHILD_OK(two.status());
    CHILD_CHECK(
        two->losses == sharded->losses && std::memcmp(two->master.data(), sharded->master.data(),
                                                      two->master.size() * sizeof(float)) == 0,
        "zero=3 differs from zero=2");
  }

  CHILD_CHECK(sharded->losses == again->losses, "zero=%d: a second run's losses differ", c.zero);
  CHILD_CHECK(sharded->master.size() == again->master.size() &&
                  std::memcmp(sharded->master.data(), again->master.data(),
                              sharded->master.size() * sizeof(float)) == 0,
              "zero=%d: a second run's parameters differ", c.zero);
  for (int s = 0; s < kSteps; ++s) {
    const double a = sharded->losses[size_t(s)], b = reference->losses[size_t(s)];
    if (rank == 0)
      std::fprintf(stderr, "zero=%d step %d loss %.7f (1 rank %.7f)\n", c.zero, s + 1, a, b);
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b), "step %d loss %.9g, 1 rank %.9g", s + 1,
                a, b);
  }
  const int tp_rank = groups->tp_rank();
  auto diff =
      diff_from_one_rank(*config, tp_rank, c.tp, sharded->master, reference->master, kParamTol);
  CHILD_OK(diff.status());
  CHILD_CHECK(diff->first_beyond.empty(), "%s", diff->first_beyond.c_str());
  CHILD_CHECK(diff->rms <= kParamRmsTol, "parameter differences: rms %.3g", diff->rms);

  const uint64_t total = sharded->master.size();
  if (check_zero_bytes(rank, sharded->zero, sharded->memory.params, total, c.dp, sizeof(float)) !=
      0) {
    return 1;
  }
  std::fprintf(stderr,
               "rank %d zero=%d tp %d dp %d: parameters within %.3g of the 1-rank run (rms %.3g); "
               "grad %llu, work %llu bytes (1 rank %llu, %llu)\n",
               rank, c.zero, c.tp, c.dp, diff->worst, diff->rms, ull(sharded->memory.params.grad),
               ull(sharded->memory.params.work), ull(reference->memory.params.grad),
               ull(reference->memory.params.work));
  CHILD_OK(world->barrier());
  return 0;
}

void expect_zero_matches_one_rank(Case c) {
  expect_ranks_pass(
      c.tp * c.dp, [c](int rank, int size) { return zero_body(rank, size, c); },
      std::chrono::milliseconds(240000));
}

TEST(GptZero, ZeroOneDataParallelTwoMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 1, 1, 2});
}
TEST(GptZero, ZeroTwoDataParallelTwoMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 2, 1, 2});
}
TEST(GptZero, ZeroTwoDataParallelTwoMatchesOneRankMoe) {
  expect_zero_matches_one_rank({"tiny-mixtral.json", 2, 1, 2});
}
TEST(GptZero, ZeroTwoDataParallelFourMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 2, 1, 4});
}
TEST(GptZero, ZeroThreeDataParallelTwoMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 3, 1, 2});
}
// Tied embeddings: the head's part holds the embedding's unit too (zero.h).
TEST(GptZero, ZeroThreeDataParallelTwoMatchesOneRankMoeTied) {
  expect_zero_matches_one_rank({"tiny-mixtral.json", 3, 1, 2});
}
// dp 4: two gather slots (prefetch); recomputation gathers each block again before its rerun.
TEST(GptZero, ZeroThreeDataParallelFourWithRecomputationMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 3, 1, 4, true});
}
// One micro-batch per rank: with two, one embedding element of this grid lands 1.3e-4 from the
// 1-rank run (rms 2e-7): a near-zero gradient summed in another order (per micro-batch, then
// over dp) flips AdamW's normalised update; accumulation is covered by the dp cases above.
TEST(GptZero, ZeroThreeTwoByTwoGridMatchesOneRankDense) {
  expect_zero_matches_one_rank({"tiny-llama.json", 3, 2, 2, false, 1});
}
TEST(GptZero, ZeroThreeTwoByTwoGridMatchesOneRankMoeTied) {
  expect_zero_matches_one_rank({"tiny-mixtral.json", 3, 2, 2});
}

// On one rank every collective is a copy and the per-micro-batch reduction adds to zero: with one
// micro-batch, zero 3 takes bitwise the steps of zero 0 (untied: a tied embedding's gradient is
// summed in another order, zero.h).
TEST(GptZero, ZeroThreeOnOneRankIsBitwiseZeroZero) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  auto config = load_config(config_path("tiny-llama.json"));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto plain = run_steps(*env, *config, {}, zero_options(0, 1, false), kSteps);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto zero3 = run_steps(*env, *config, {}, zero_options(3, 1, false), kSteps);
  ASSERT_TRUE(zero3.ok()) << zero3.status().to_string();
  EXPECT_EQ(plain->losses, zero3->losses);
  ASSERT_EQ(plain->master.size(), zero3->master.size());
  EXPECT_EQ(
      std::memcmp(plain->master.data(), zero3->master.data(), plain->master.size() * sizeof(float)),
      0);
}

// The README's setting (bf16, 4 x 32 tokens): each level holds less than the one before, by the
// amounts zero.h states. No steps are taken: the bytes are allocated at creation.
int memory_body(int rank, int size, const char* file, int64_t layers) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path(file));
  CHILD_OK(config.status());
  if (layers > 0) config->layers = layers;
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, size);
  CHILD_OK(groups.status());
  std::vector<GptTrainer::Memory> memory;
  ZeroPlan plan;
  for (int zero = 0; zero <= 3; ++zero) {
    TrainOptions options;
    options.micro_batch = 4;
    options.seq = 32;
    options.zero = zero;
    auto trainer = GptTrainer::create(*env->device, *config, *env->kernels, *groups, options);
    CHILD_OK(trainer.status());
    memory.push_back((*trainer)->memory());
    plan = (*trainer)->zero();
    if (zero > 0) {
      const uint64_t total = (*trainer)->model().params().layout().total;
      if (check_zero_bytes(rank, plan, memory.back().params, total, size, 2) != 0) return 1;
    }
    if (rank == 0) {
      const Params::Bytes& p = memory.back().params;
      std::fprintf(stderr,
                   "%s, %lld layers, dp %d zero=%d: master %llu, m %llu, v %llu, grad %llu, "
                   "work %llu; activations %llu; total %llu bytes%s\n",
                   file, (long long)config->layers, size, zero, ull(p.master), ull(p.m), ull(p.v),
                   ull(p.grad), ull(p.work), ull(memory.back().activations),
                   ull(memory.back().total()),
                   zero == 3 ? (plan.slots == 2 ? " (2 gather slots)" : " (1 gather slot)") : "");
    }
  }
  CHILD_CHECK(memory[1].params.grad == plan.shards.padded * 4,
              "zero 1 gradient %llu bytes: the whole (padded) gradient is %llu",
              ull(memory[1].params.grad), ull(plan.shards.padded * 4));
  CHILD_CHECK(memory[2].params.grad < memory[1].params.grad, "zero 2 gradient %llu >= zero 1 %llu",
              ull(memory[2].params.grad), ull(memory[1].params.grad));
  CHILD_CHECK(memory[3].params.work < memory[2].params.work,
              "zero 3 working copy %llu >= zero 2 %llu", ull(memory[3].params.work),
              ull(memory[2].params.work));
  for (int zero = 1; zero <= 3; ++zero) {
    CHILD_CHECK(memory[size_t(zero)].total() < memory[size_t(zero) - 1].total(),
                "zero=%d holds %llu bytes, zero=%d %llu", zero, ull(memory[size_t(zero)].total()),
                zero - 1, ull(memory[size_t(zero) - 1].total()));
  }
  CHILD_OK(world->barrier());
  return 0;
}

void expect_memory_falls(const char* file, int dp, int64_t layers = 0) {
  expect_ranks_pass(
      dp, [file, layers](int rank, int size) { return memory_body(rank, size, file, layers); },
      std::chrono::milliseconds(120000));
}

TEST(GptZero, MemoryFallsWithEachLevelDataParallelTwo) {
  expect_memory_falls("tiny-llama.json", 2);
}
TEST(GptZero, MemoryFallsWithEachLevelDataParallelFour) {
  expect_memory_falls("tiny-llama.json", 4);
  expect_memory_falls("tiny-mixtral.json", 4);
}
// The scratch is one part (a block): with more blocks the per-rank bytes approach 1/dp.
TEST(GptZero, MemoryFallsWithEachLevelSixteenLayersDataParallelFour) {
  expect_memory_falls("tiny-llama.json", 4, 16);
}

TEST(GptZero, RefusesWhatItCannotShard) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  TrainOptions four = parallel_test_options(1);
  four.zero = 4;
  auto level = GptTrainer::create(*env->device, config, *env->kernels, {}, four);
  ASSERT_FALSE(level.ok());
  EXPECT_NE(level.status().to_string().find("zero=4"), std::string::npos)
      << level.status().to_string();
  TrainOptions bf16 = parallel_test_options(1);
  bf16.zero = 1;
  bf16.grad_comm = DType::kBF16;
  auto wire = GptTrainer::create(*env->device, config, *env->kernels, {}, bf16);
  ASSERT_FALSE(wire.ok());
  EXPECT_NE(wire.status().to_string().find("grad_comm"), std::string::npos)
      << wire.status().to_string();
}

// ZeRO-2/3 under pipeline parallelism: tests/gpt/pipeline_zero_test.cc.

}  // namespace
}  // namespace tessera::gpt::testing
