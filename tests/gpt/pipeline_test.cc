// Pipeline parallelism (1F1B, examples/trainer/gpt/pipeline.h) against a 1-rank run: every rank
// (a forked process with its own discrete host device) trains a few steps as its stage of a
// (tp, dp, pp) grid and then, alone, the 1-rank reference with the same global batch; the
// losses of each step and the stage's parameters must match within the f32 tolerances of
// model_test_parallel.cc. A pipeline run repeats itself bitwise. With tied embeddings the first
// and the last stage's copies of the embedding stay bitwise identical.
#include <algorithm>
#include <cmath>
#include <map>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

// Tolerances: model_test_support.h (the stage boundary changes no summation order; tp and dp add
// theirs).
constexpr int kSteps = 3;

struct Grid {
  const char* config;  // null: tiny_config(tiny)
  int tp = 1, dp = 1, pp = 2;
  int64_t micro_batches = 4;  // per step, per dp rank
  float clip_norm = 0;        // > 0: clipped to this global norm (summed over the stages)
  Tiny tiny = Tiny::kGpt2;    // the config when `config` is null
};

// `micro_batches` of 2 sequences of 16 tokens per step, clipped to `clip_norm` (0: not clipped).
Result<RunOut> run_stage_steps(const DeviceEnv& env, const GptConfig& config, ParallelGroups groups,
                               int64_t micro_batches, float clip_norm) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.adamw.clip_norm = clip_norm;
  return run_steps(env, config, std::move(groups), options, kSteps);
}

int grid_body(int rank, int size, Grid grid) {
  auto opened = open_grid_rank(rank, size, grid.config, grid.tiny, grid.tp, grid.dp, grid.pp);
  CHILD_OK(opened.status());
  auto& [env, config, world, groups] = **opened;
  const int tp_rank = groups.tp_rank(), stage = groups.pp_rank();
  auto parallel = run_stage_steps(env, config, groups, grid.micro_batches, grid.clip_norm);
  CHILD_OK(parallel.status());
  auto again = run_stage_steps(env, config, groups, grid.micro_batches, grid.clip_norm);
  CHILD_OK(again.status());
  CHILD_CHECK(again->losses == parallel->losses, "rank %d: a repeated run's losses differ", rank);
  CHILD_CHECK(again->master == parallel->master, "rank %d: a repeated run's weights differ", rank);
  auto reference = run_stage_steps(env, config, {}, grid.micro_batches * grid.dp, grid.clip_norm);
  CHILD_OK(reference.status());

  const std::string loss =
      loss_beyond(parallel->losses, reference->losses, kLossTol, "1 rank", rank == 0);
  CHILD_CHECK(loss.empty(), "%s", loss.c_str());
  // The stage's tensors, found by name in the 1-rank layout.
  auto range = stage_range(config.layers, stage, grid.pp);
  CHILD_OK(range.status());
  auto local_full = make_layout(config, tp_rank, grid.tp);
  auto full = make_layout(config, 0, 1);
  CHILD_OK(local_full.status());
  CHILD_OK(full.status());
  const ParamLayout local = stage_layout(*local_full, *range);
  CHILD_CHECK(local.total == parallel->master.size(), "stage %d holds %zu weights, layout %llu",
              stage, parallel->master.size(), (unsigned long long)local.total);
  const ParamDiff d = diff_by_name(local, parallel->master, *full, reference->master, true, tp_rank,
                                   grid.tp, kParamTol, "1 rank");
  CHILD_CHECK(d.first_beyond.empty(), "%s", d.first_beyond.c_str());
  if (config.tied) {
    // The first and last stage's copies of the tied embedding are bitwise identical: each equals
    // the elementwise max over the embedding group.
    CHILD_CHECK(local.wte >= 0 && groups.embed != nullptr, "stage %d: no tied embedding", stage);
    const ParamSpec& wte = local.specs[size_t(local.wte)];
    const auto begin = parallel->master.begin() + std::ptrdiff_t(wte.offset);
    const std::vector<float> mine(begin, begin + std::ptrdiff_t(wte.local_count()));
    auto buffer = env.device->allocate(mine.size() * sizeof(float));
    CHILD_OK(buffer.status());
    CHILD_OK(upload(*env.stream, buffer->data(), mine));
    CHILD_OK(allreduce_on(groups.embed, *env.stream, buffer->data(), mine.size(), DType::kF32,
                          ReduceOp::kMax, "tied embedding copies"));
    auto most = download<float>(*env.stream, buffer->data(), mine.size());
    CHILD_OK(most.status());
    CHILD_CHECK(*most == mine, "stage %d: the tied embedding's copies differ", stage);
  }
  std::fprintf(stderr,
               "rank %d (stage %d of %d, blocks %d..%d, tp %d of %d): %zu parameters within %.3g "
               "of the 1-rank run (rms %.3g)\n",
               rank, stage, grid.pp, range->first_layer, range->end_layer - 1, tp_rank, grid.tp,
               parallel->master.size(), d.worst, d.rms);
  CHILD_CHECK(d.rms <= kParamRmsTol, "parameter differences: rms %.3g", d.rms);
  CHILD_OK(world->barrier());
  return 0;
}

void expect_pipeline_matches_one_rank(Grid grid) {
  expect_grid_ranks_pass(grid, grid_body, std::chrono::milliseconds(240000));
}

TEST(GptPipeline, StageRangesSplitLikeThePlanner) {
  auto r = stage_range(5, 0, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_layer, 0);
  EXPECT_EQ(r->end_layer, 3);  // earlier stages larger
  r = stage_range(5, 1, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_layer, 3);
  EXPECT_EQ(r->end_layer, 5);
  EXPECT_TRUE(r->last);
  EXPECT_FALSE(r->first);
  EXPECT_FALSE(stage_range(1, 0, 2).ok());
}

// 4 micro-batches over 2 stages: one warm-up forward on stage 0, steady 1F1B, one cool-down.
TEST(GptPipeline, TwoStagesMatchOneRankDense) {
  expect_pipeline_matches_one_rank({"tiny-llama.json", 1, 1, 2, 4});
}
// 4 ranks: the pipeline inside a tp or dp grid (ranks tp-innermost, pp outermost).
TEST(GptPipeline, TwoStagesByTensorParallelTwoMatchOneRankDense) {
  expect_pipeline_matches_one_rank({"tiny-llama.json", 2, 1, 2, 3});
}
TEST(GptPipeline, TwoStagesByDataParallelTwoMatchOneRankDense) {
  expect_pipeline_matches_one_rank({"tiny-llama.json", 1, 2, 2, 3});
}
// Clipping to 0.3 (the norm is ~1.3 here: every step is clipped): the stages sum their squares
// over the pp group, so each stage scales by the global norm as the 1-rank run does.
TEST(GptPipeline, TwoStagesClipToTheGlobalNormLikeOneRank) {
  expect_pipeline_matches_one_rank({"tiny-llama.json", 1, 1, 2, 4, 0.3f});
}
TEST(GptPipeline, TwoStagesByTensorParallelTwoClipToTheGlobalNormLikeOneRank) {
  expect_pipeline_matches_one_rank({"tiny-llama.json", 2, 1, 2, 3, 0.3f});
}
// Tied embeddings (tiny GPT-2: LayerNorm, GeLU, biases, learned positions): stage 0 holds the
// embedding, stage 1 the head, the same matrix; their gradients are summed over the embedding
// group after the schedule, so both copies take the 1-rank step.
TEST(GptPipeline, TwoStagesMatchOneRankTied) {
  expect_pipeline_matches_one_rank({nullptr, 1, 1, 2, 4});
}
// dp 2: the embedding group's sum, then the dp allreduce of every gradient.
TEST(GptPipeline, TwoStagesByDataParallelTwoMatchOneRankTied) {
  expect_pipeline_matches_one_rank({nullptr, 1, 2, 2, 3});
}
// Clipped every step: the tied embedding's squares count once in the global norm (on the first
// stage), as in the 1-rank run.
TEST(GptPipeline, TwoStagesTiedClipToTheGlobalNormLikeOneRank) {
  expect_pipeline_matches_one_rank({nullptr, 1, 1, 2, 4, 0.05f});
}
// MoE (tiny-mixtral: 4 experts, top-2, tied): the router aux loss of each stage's blocks, summed
// over the pipeline group, and the tied embedding as above.
TEST(GptPipeline, TwoStagesMatchOneRankMoeTied) {
  expect_pipeline_matches_one_rank({"tiny-mixtral.json", 1, 1, 2, 4});
}
TEST(GptPipeline, TwoStagesByTensorParallelTwoMatchOneRankMoeTied) {
  expect_pipeline_matches_one_rank({"tiny-mixtral.json", 2, 1, 2, 3});
}

// What is not verified under pp is refused by name: ZeRO with a tied or MoE model (4 ranks: dp 2 x
// pp 2). Expert parallelism under pp runs: ep_pipeline_test.cc.
int refuse_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto mixtral = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(mixtral.status());
  GptConfig untied_moe = *mixtral;
  untied_moe.tied = false;
  const GptConfig gpt2 = tiny_config(Tiny::kGpt2);
  auto check = [&](const GptConfig& config, int ep, int zero, const std::string& what) -> int {
    auto groups = make_groups(world, 1, 2, 2, ep);
    CHILD_OK(groups.status());
    TrainOptions options = parallel_test_options(2);
    options.zero = zero;
    auto trainer = GptTrainer::create(*env->device, config, *env->kernels, *groups, options);
    CHILD_CHECK(!trainer.ok(), "pp 2 with %s was accepted", what.c_str());
    const std::string message = trainer.status().to_string();
    CHILD_CHECK(message.find("pp 2 with " + what) != std::string::npos, "%s", message.c_str());
    return 0;
  };
  if (check(gpt2, 1, 1, "tied embeddings and zero=1") != 0) return 1;
  if (check(*mixtral, 1, 2, "tied embeddings and zero=2") != 0) return 1;
  if (check(untied_moe, 1, 1, "experts (MoE) and zero=1") != 0) return 1;
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptPipeline, RefusesZeroWithTiedOrMoe) {
  expect_ranks_pass(4, refuse_body, std::chrono::milliseconds(120000));
}

// The step's tensor-parallel and pipeline communication (StepResult::tp_comm_seconds,
// pp_comm_seconds, the groups' CommTimers): above 0 where that group has two ranks, exactly 0
// where it has one, on every rank and every step (the second reuses the first's event pairs); a
// 1-rank run reports neither. Only > 0 / == 0 is asserted, never a time.
struct CommGrid {
  int tp = 1, pp = 1, vp = 1;
};

int comm_body(int rank, int size, CommGrid grid) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  // demo-llama: 4 layers, enough for pp 2 x vp 2.
  auto config = load_config(config_path("demo-llama.json"));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, grid.tp, 1, grid.pp);
  CHILD_OK(groups.status());
  TrainOptions options = parallel_test_options(2);
  options.vp = grid.vp;
  auto check = [&](ParallelGroups g, int tp, int pp, const char* what) -> int {
    auto trainer = GptTrainer::create(*env->device, *config, *env->kernels, std::move(g), options);
    CHILD_OK(trainer.status());
    CHILD_OK((*trainer)->init(*env->stream));
    for (int s = 0; s < 2; ++s) {
      auto r = (*trainer)->step(*env->stream);
      CHILD_OK(r.status());
      std::fprintf(stderr, "rank %d %s step %d: tp comm %.3g s, pp comm %.3g s\n", rank, what,
                   s + 1, r->tp_comm_seconds, r->pp_comm_seconds);
      CHILD_CHECK(tp > 1 ? r->tp_comm_seconds > 0 : r->tp_comm_seconds == 0,
                  "rank %d %s step %d: tp comm %.9g s at tp %d", rank, what, s + 1,
                  r->tp_comm_seconds, tp);
      CHILD_CHECK(pp > 1 ? r->pp_comm_seconds > 0 : r->pp_comm_seconds == 0,
                  "rank %d %s step %d: pp comm %.9g s at pp %d", rank, what, s + 1,
                  r->pp_comm_seconds, pp);
    }
    return 0;
  };
  if (check(*groups, grid.tp, grid.pp, "grid") != 0) return 1;
  options.vp = 1;
  if (check({}, 1, 1, "1 rank") != 0) return 1;
  CHILD_OK(world->barrier());
  return 0;
}

void expect_comm_reported(CommGrid grid) {
  expect_ranks_pass(
      grid.tp * grid.pp, [grid](int rank, int size) { return comm_body(rank, size, grid); },
      std::chrono::milliseconds(120000));
}

TEST(GptPipeline, StepReportsTensorParallelCommunicationUnderTpTwo) {
  expect_comm_reported({2, 1, 1});
}
TEST(GptPipeline, StepReportsPipelineTransfersUnderPpTwo) {
  expect_comm_reported({1, 2, 1});
}
TEST(GptPipeline, StepReportsPipelineTransfersOfTheInterleavedSchedule) {
  expect_comm_reported({1, 2, 2});
}
}  // namespace
}  // namespace tessera::gpt::testing
