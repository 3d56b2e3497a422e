// Expert parallelism of the MoE decoder (examples/trainer/gpt/ep.h) against a 1-rank run: every
// rank (a forked process with its own discrete host device) trains the tiny mixtral a few steps
// with its experts sharded over ep ranks carved from dp, then, alone, the 1-rank reference with
// the whole global batch; losses and parameters (matched by name: each rank holds only its
// experts) must agree within the f32 tolerances of model_test_parallel.cc. The capacity is T per
// expert and source rank, so no token is dropped and the 1-rank run routes the same tokens.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ep.h"
#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

// Tolerances: model_test_support.h (here expert GEMMs split by source rank, gradients summed over
// dp instead of one larger GEMM).
constexpr int kSteps = 4;

struct Grid {
  int tp;
  int dp;
  int ep;
};

Result<RunOut> run_ep_steps(const DeviceEnv& env, const GptConfig& config, ParallelGroups groups,
                            int64_t micro_batches, bool recompute = false) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.recompute = recompute ? Recompute::kFull : Recompute::kNone;
  return run_steps(env, config, std::move(groups), options, kSteps);
}

// The layout the model of `groups` holds (make_layout, then expert_layout under ep).
Result<ParamLayout> rank_layout(const GptConfig& config, const ParallelGroups& groups) {
  TSR_ASSIGN_OR_RETURN(ParamLayout layout, make_layout(config, groups.tp_rank(), groups.tp_size()));
  if (groups.ep_size() == 1) return layout;
  return expert_layout(config, layout, groups.ep_rank(), groups.ep_size());
}

int grid_body(int rank, int size, Grid grid) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups_or = make_groups(world, grid.tp, grid.dp, 1, grid.ep);
  CHILD_OK(groups_or.status());
  const ParallelGroups groups = *groups_or;
  CHILD_CHECK(groups.ep_size() == grid.ep, "ep group of %d", groups.ep_size());
  CHILD_CHECK(groups.ep_rank() == rank / grid.tp % grid.dp % grid.ep, "rank %d: ep rank %d", rank,
              groups.ep_rank());
  auto parallel = run_ep_steps(*env, *config, groups, 2);
  CHILD_OK(parallel.status());
  auto reference = run_ep_steps(*env, *config, {}, 2 * grid.dp);
  CHILD_OK(reference.status());

  const std::string loss =
      loss_beyond(parallel->losses, reference->losses, kLossTol, "1 rank", rank == 0);
  CHILD_CHECK(loss.empty(), "%s", loss.c_str());
  auto local = rank_layout(*config, groups);
  auto dense_local = make_layout(*config, groups.tp_rank(), grid.tp);
  auto full = make_layout(*config, 0, 1);
  CHILD_OK(local.status());
  CHILD_OK(dense_local.status());
  CHILD_OK(full.status());
  // The experts are sharded: this rank holds E/ep of them, and nothing else is missing.
  CHILD_CHECK(parallel->master.size() == local->total, "master of %zu elements, layout %llu",
              parallel->master.size(), (unsigned long long)local->total);
  const uint64_t expert_elements = local->total - expert_begin(*local);
  const uint64_t all_experts = dense_local->total - expert_begin(*local);
  CHILD_CHECK(all_experts == expert_elements * uint64_t(grid.ep),
              "expert elements %llu on this rank, %llu in all", (unsigned long long)expert_elements,
              (unsigned long long)all_experts);
  std::map<std::string, const ParamSpec*> by_name;
  for (const ParamSpec& spec : full->specs) by_name[spec.name] = &spec;
  double worst = 0, sum_sq = 0;
  for (const ParamSpec& spec : local->specs) {
    const ParamSpec* whole = by_name.at(spec.name);
    const std::span<const float> ref(reference->master.data() + whole->offset,
                                     whole->local_count());
    const std::vector<float> want = shard_of(spec, ref, groups.tp_rank(), grid.tp);
    for (size_t j = 0; j < want.size(); ++j) {
      const double got = double(parallel->master[spec.offset + j]);
      const double diff = std::abs(got - double(want[j]));
      worst = std::max(worst, diff);
      sum_sq += diff * diff;
      CHILD_CHECK(diff <= kParamTol, "%s[%zu] = %.9g, 1 rank %.9g", spec.name.c_str(), j, got,
                  double(want[j]));
    }
  }
  const double rms = std::sqrt(sum_sq / double(parallel->master.size()));
  std::fprintf(stderr,
               "rank %d (tp %d, ep %d of %d): parameters within %.3g of the 1-rank run (rms "
               "%.3g)\n",
               rank, groups.tp_rank(), groups.ep_rank(), grid.ep, worst, rms);
  CHILD_CHECK(rms <= kParamRmsTol, "parameter differences: rms %.3g", rms);
  CHILD_OK(world->barrier());
  return 0;
}

constexpr std::chrono::milliseconds kDeadline{240000};

void expect_grid_matches_one_rank(Grid grid) {
  expect_ranks_pass(
      grid.tp * grid.dp, [grid](int rank, int size) { return grid_body(rank, size, grid); },
      kDeadline);
}

TEST(GptExpertParallel, EpTwoOnDpTwoMatchesOneRank) {
  expect_grid_matches_one_rank({1, 2, 2});
}
// Two expert groups: expert gradients also sum over the expert-data-parallel pairs.
TEST(GptExpertParallel, EpTwoOnDpFourMatchesOneRank) {
  expect_grid_matches_one_rank({1, 4, 2});
}
TEST(GptExpertParallel, EpTwoByTpTwoMatchesOneRank) {
  expect_grid_matches_one_rank({2, 2, 2});
}

// ep 2 on dp 2: a second run, and one with full recomputation (which replays the all-to-alls),
// give bitwise the first run's losses and parameters; ZeRO under ep is refused by name.
int repeat_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, 2, 1, 2);
  CHILD_OK(groups.status());
  auto first = run_ep_steps(*env, *config, *groups, 2);
  CHILD_OK(first.status());
  auto second = run_ep_steps(*env, *config, *groups, 2);
  CHILD_OK(second.status());
  CHILD_CHECK(same_bits(*first, *second), "rank %d: a repeated run differs", rank);
  auto recomputed = run_ep_steps(*env, *config, *groups, 2, /*recompute=*/true);
  CHILD_OK(recomputed.status());
  CHILD_CHECK(same_bits(*first, *recomputed), "rank %d: recomputation differs", rank);
  TrainOptions options = parallel_test_options(1);
  options.zero = 1;
  auto zero = GptTrainer::create(*env->device, *config, *env->kernels, *groups, options);
  CHILD_CHECK(!zero.ok() && zero.status().message().find("expert parallelism") != std::string::npos,
              "zero=1 under ep: %s", zero.ok() ? "accepted" : zero.status().to_string().c_str());
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptExpertParallel, RepeatsBitwiseAndRefusesZero) {
  expect_ranks_pass(2, repeat_body, kDeadline);
}

TEST(GptExpertParallel, RefusesEpNotDividingDpOrExpertsAndDenseModels) {
  auto groups = make_groups(nullptr, 1, 1, 1, 2);
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.status().message().find("ep 2 does not divide dp 1"), std::string::npos)
      << groups.status().to_string();
  auto mixtral = load_config(config_path("tiny-mixtral.json"));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().to_string();
  auto layout = make_layout(*mixtral, 0, 1);
  ASSERT_TRUE(layout.ok());
  auto three = expert_layout(*mixtral, *layout, 0, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("ep 3 does not divide experts 4"), std::string::npos)
      << three.status().to_string();
  auto llama = load_config(config_path("tiny-llama.json"));
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  auto dense_layout = make_layout(*llama, 0, 1);
  ASSERT_TRUE(dense_layout.ok());
  auto dense = expert_layout(*llama, *dense_layout, 0, 2);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find("needs a MoE model"), std::string::npos)
      << dense.status().to_string();
}

// The layout a rank holds under ep 2: the same non-expert tensors at the front, then experts
// 2 and 3 of every layer (rank 1), named with their global index.
TEST(GptExpertParallel, ExpertLayoutKeepsThisRanksExpertsLast) {
  auto config = load_config(config_path("tiny-mixtral.json"));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto full = make_layout(*config, 0, 1);
  ASSERT_TRUE(full.ok());
  auto half = expert_layout(*config, *full, 1, 2);
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  const uint64_t begin = expert_begin(*half);
  for (const BlockParams& b : half->blocks) {
    ASSERT_EQ(b.experts.size(), size_t(config->experts / 2));
    for (size_t j = 0; j < b.experts.size(); ++j) {
      const ParamSpec& up = half->at(b.experts[j].up);
      EXPECT_GE(up.offset, begin);
      EXPECT_NE(up.name.find("expert" + std::to_string(2 + j) + "."), std::string::npos) << up.name;
    }
    EXPECT_LT(half->at(b.router).offset, begin);
  }
  EXPECT_EQ(half->at(half->wte).name, "embed.wte");
  EXPECT_EQ(half->head, half->wte);  // tied
  uint64_t expert_elements = 0;
  for (const ParamSpec& spec : full->specs)
    if (spec.name.find(".moe.expert") != std::string::npos) expert_elements += spec.local_count();
  EXPECT_EQ(half->total, full->total - expert_elements / 2);
}

}  // namespace
}  // namespace tessera::gpt::testing
