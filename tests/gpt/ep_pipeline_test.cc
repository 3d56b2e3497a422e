// Expert parallelism under pipeline parallelism (examples/trainer/gpt/ep.h, pipeline.h) against a
// 1-rank run: every rank (a forked process with its own discrete host device) trains the tiny
// mixtral a few steps as its stage of a (tp, dp, pp) grid with the stage's experts sharded over ep
// ranks carved from dp, then, alone, the 1-rank reference with the whole global batch; losses and
// the rank's parameters (matched by name: it holds its stage's tensors and, of those, its experts)
// must agree within the f32 tolerances of model_test_support.h. The ep and expert_dp groups are
// per stage (make_groups), so the ep ranks of a stage run the same 1F1B schedule and their
// all-to-alls pair up, the replayed forwards (pipeline.h) included: 4 micro-batches over 2 stages
// make stage 0 replay 3 of its 4 forwards before their backwards.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ep.h"
#include "forked_test_support.h"
#include "model_test_support.h"
#include "pipeline.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

constexpr int kSteps = 3;
constexpr std::chrono::milliseconds kDeadline{240000};

struct Grid {
  int tp = 1, dp = 2, pp = 2, ep = 2;
  int64_t micro_batches = 4;    // per step and dp rank
  bool against_ep_one = false;  // also run the grid with ep 1 and compare
  bool drop_expert_dp = false;  // negative control: expert gradients not summed over expert_dp
};

Result<RunOut> run_grid_steps(const DeviceEnv& env, const GptConfig& config, ParallelGroups groups,
                              int64_t micro_batches, Recompute recompute = Recompute::kNone) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.recompute = recompute;
  return run_steps(env, config, std::move(groups), options, kSteps);
}

// The layout the model of `groups` holds: its tp shard, its stage's tensors, its experts.
Result<ParamLayout> rank_layout(const GptConfig& config, const ParallelGroups& groups) {
  TSR_ASSIGN_OR_RETURN(ParamLayout layout, make_layout(config, groups.tp_rank(), groups.tp_size()));
  if (groups.pp_size() > 1) {
    TSR_ASSIGN_OR_RETURN(StageRange range,
                         stage_range(config.layers, groups.pp_rank(), groups.pp_size()));
    layout = stage_layout(layout, range);
  }
  if (groups.ep_size() == 1) return layout;
  return expert_layout(config, layout, groups.ep_rank(), groups.ep_size());
}

// The smallest and largest pipeline stage over `comm` (this rank's alone when comm is null).
Result<std::pair<double, double>> stages_in(const DeviceEnv& env, const ParallelGroups& groups,
                                            const std::shared_ptr<coll::Communicator>& comm) {
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer buffer, env.device->allocate(2 * sizeof(double)));
  double* d = static_cast<double*>(buffer.data());
  const double stage = groups.pp_rank();
  TSR_RETURN_IF_ERROR(upload(*env.stream, d, std::vector<double>{stage, stage}));
  TSR_RETURN_IF_ERROR(allreduce_on(comm, *env.stream, d, 1, DType::kF64, ReduceOp::kMin, "stage"));
  TSR_RETURN_IF_ERROR(
      allreduce_on(comm, *env.stream, d + 1, 1, DType::kF64, ReduceOp::kMax, "stage"));
  TSR_ASSIGN_OR_RETURN(std::vector<double> v, download<double>(*env.stream, d, 2));
  return std::pair{v[0], v[1]};
}

int grid_body(int rank, int size, Grid grid) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups_or = make_groups(world, grid.tp, grid.dp, grid.pp, grid.ep);
  CHILD_OK(groups_or.status());
  const ParallelGroups groups = *groups_or;
  const int tp_rank = groups.tp_rank(), stage = groups.pp_rank();
  CHILD_CHECK(groups.ep_size() == grid.ep && groups.ep_rank() == rank / grid.tp % grid.dp % grid.ep,
              "rank %d: ep rank %d of %d", rank, groups.ep_rank(), groups.ep_size());
  CHILD_CHECK(stage == rank / (grid.tp * grid.dp), "rank %d: stage %d", rank, stage);
  CHILD_CHECK((groups.expert_dp != nullptr) == (grid.dp > grid.ep), "rank %d: expert_dp %s", rank,
              groups.expert_dp ? "present" : "missing");
  // The expert groups are per stage: every member of this rank's is on its stage.
  for (const auto& [comm, what] :
       {std::pair{groups.ep, "expert"}, {groups.expert_dp, "expert-dp"}}) {
    auto range = stages_in(*env, groups, comm);
    CHILD_OK(range.status());
    CHILD_CHECK(range->first == stage && range->second == stage,
                "rank %d (stage %d): its %s group spans stages %g..%g", rank, stage, what,
                range->first, range->second);
  }

  auto parallel = run_grid_steps(*env, *config, groups, grid.micro_batches);
  CHILD_OK(parallel.status());
  auto reference = run_grid_steps(*env, *config, {}, grid.micro_batches * grid.dp);
  CHILD_OK(reference.status());
  const std::string loss =
      loss_beyond(parallel->losses, reference->losses, kLossTol, "1 rank", rank == 0);
  CHILD_CHECK(loss.empty(), "%s", loss.c_str());
  auto local = rank_layout(*config, groups);
  auto full = make_layout(*config, 0, 1);
  CHILD_OK(local.status());
  CHILD_OK(full.status());
  CHILD_CHECK(parallel->master.size() == local->total, "master of %zu elements, layout %llu",
              parallel->master.size(), (unsigned long long)local->total);
  const ParamDiff d = diff_by_name(*local, parallel->master, *full, reference->master, true,
                                   tp_rank, grid.tp, kParamTol);
  std::fprintf(stderr,
               "rank %d (stage %d, tp %d, ep %d of %d): %zu parameters within %.3g of the 1-rank "
               "run (rms %.3g)\n",
               rank, stage, tp_rank, groups.ep_rank(), grid.ep, parallel->master.size(), d.worst,
               d.rms);
  CHILD_CHECK(d.first_beyond.empty(), "rank %d: %s", rank, d.first_beyond.c_str());
  CHILD_CHECK(d.rms <= kParamRmsTol, "rank %d: parameter differences: rms %.3g", rank, d.rms);

  if (grid.against_ep_one) {
    // The same grid with every expert on every dp rank: the same steps within the tolerances.
    auto dense_groups = make_groups(world, grid.tp, grid.dp, grid.pp, 1);
    CHILD_OK(dense_groups.status());
    auto dense = run_grid_steps(*env, *config, *dense_groups, grid.micro_batches);
    CHILD_OK(dense.status());
    const std::string dense_loss =
        loss_beyond(parallel->losses, dense->losses, kLossTol, "ep 1", false);
    CHILD_CHECK(dense_loss.empty(), "%s", dense_loss.c_str());
    auto dense_layout = rank_layout(*config, *dense_groups);
    CHILD_OK(dense_layout.status());
    const ParamDiff e = diff_by_name(*local, parallel->master, *dense_layout, dense->master, false,
                                     tp_rank, grid.tp, kParamTol);
    CHILD_CHECK(e.first_beyond.empty(), "rank %d against ep 1: %s", rank, e.first_beyond.c_str());
    CHILD_CHECK(e.rms <= kParamRmsTol, "rank %d against ep 1: rms %.3g", rank, e.rms);
    // A second run repeats the first bitwise, and so does one with full recomputation (each
    // block's backward reruns its forward, all-to-alls included, on every ep rank of the stage).
    auto again = run_grid_steps(*env, *config, groups, grid.micro_batches);
    CHILD_OK(again.status());
    CHILD_CHECK(same_bits(*parallel, *again), "rank %d: a repeated run differs", rank);
    auto recomputed = run_grid_steps(*env, *config, groups, grid.micro_batches, Recompute::kFull);
    CHILD_OK(recomputed.status());
    CHILD_CHECK(same_bits(*parallel, *recomputed), "rank %d: recomputation differs", rank);
  }
  if (grid.drop_expert_dp) {
    // Negative control: the expert gradients summed over the ep group's tokens only, not over
    // expert_dp; the comparison above must catch it.
    ParallelGroups broken = groups;
    broken.expert_dp = nullptr;
    auto wrong = run_grid_steps(*env, *config, broken, grid.micro_batches);
    CHILD_OK(wrong.status());
    const ParamDiff w = diff_by_name(*local, wrong->master, *full, reference->master, true, tp_rank,
                                     grid.tp, kParamTol, "other", ".moe.expert");
    std::fprintf(stderr, "rank %d without the expert_dp sum: experts off by up to %.3g (%s)\n",
                 rank, w.worst, w.first_beyond.c_str());
    CHILD_CHECK(!w.first_beyond.empty(), "rank %d: a missing expert_dp sum went unnoticed", rank);
  }
  CHILD_OK(world->barrier());
  return 0;
}

void expect_grid_matches_one_rank(Grid grid) {
  expect_grid_ranks_pass(grid, grid_body, kDeadline);
}

// pp 2 x dp 2, ep 2 (4 ranks): each stage's two dp ranks split its experts; against 1 rank and
// against ep 1, repeated bitwise (also under full recomputation).
TEST(GptExpertParallelPipeline, PpTwoByDpTwoEpTwoMatchesOneRankAndEpOne) {
  Grid grid;
  grid.against_ep_one = true;
  expect_grid_matches_one_rank(grid);
}
// pp 2 x dp 4, ep 2 (8 ranks): two expert groups per stage, whose expert gradients also sum over
// the stage's expert_dp pairs; without that sum the parameters leave the tolerance.
TEST(GptExpertParallelPipeline, PpTwoByDpFourEpTwoMatchesOneRankAndNeedsExpertDp) {
  Grid grid;
  grid.dp = 4;
  grid.micro_batches = 2;
  grid.drop_expert_dp = true;
  expect_grid_matches_one_rank(grid);
}
// pp 2 x tp 2 x dp 2, ep 2 (8 ranks): experts split over ep and their GEMMs over tp.
TEST(GptExpertParallelPipeline, PpTwoByTpTwoByDpTwoEpTwoMatchesOneRank) {
  Grid grid;
  grid.tp = 2;
  grid.micro_batches = 3;
  expect_grid_matches_one_rank(grid);
}

// A replayed forward (pipeline.h: before a backward whose forward was not the stage's last) routes
// as the first run did and runs the same all-to-alls on every ep rank of the stage: on pp 2 x dp 2
// ep 2, each stage runs micro-batches a, b and a again from a's kept input; the second a gives
// bitwise a's routing and stage output, while b routes differently (the signature sees routing).
int replay_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, 1, 2, 2, 2);
  CHILD_OK(groups.status());
  const int64_t batch = 2, seq = 16;
  auto model =
      GptModel::create(*env->device, *config, *env->kernels, *groups, DType::kF32, batch, seq);
  CHILD_OK(model.status());
  GptModel& m = **model;
  CHILD_OK(m.params().init(*env->stream, 7));
  const MarkovCorpus corpus(config->vocab, 11);
  const uint64_t n = m.residual_count();
  // The stage input of micro-batch j (stage 1; stage 0 embeds the tokens): a deterministic
  // residual stream of O(1) values, different per micro-batch and dp rank.
  auto set_input = [&](int j) -> Status {
    if (m.stage().first) return Status();
    std::vector<float> x(n);
    for (uint64_t i = 0; i < n; ++i)
      x[i] = float(std::sin(0.37 * double(i) + 1.3 * j + 0.7 * groups->dp_rank()));
    return upload(*env->stream, m.stage_input(), x);
  };
  struct Seen {
    uint64_t routing;
    std::vector<float> output;
  };
  auto run = [&](int j) -> Result<Seen> {
    TSR_RETURN_IF_ERROR(set_input(j));
    const uint64_t first = uint64_t((j * 2 + groups->dp_rank()) * batch);
    TSR_RETURN_IF_ERROR(m.forward(*env->stream, corpus.batch(first, batch, seq)).status());
    TSR_ASSIGN_OR_RETURN(std::vector<float> out,
                         download<float>(*env->stream, m.stage_output(), size_t(n)));
    return Seen{m.routing_signature(), std::move(out)};
  };
  auto a = run(0);
  CHILD_OK(a.status());
  auto b = run(1);
  CHILD_OK(b.status());
  auto replay = run(0);
  CHILD_OK(replay.status());
  CHILD_CHECK(replay->routing == a->routing, "rank %d: the replay routed differently", rank);
  CHILD_CHECK(replay->output == a->output, "rank %d: the replay's stage output differs", rank);
  CHILD_CHECK(b->routing != a->routing, "rank %d: micro-batches a and b route alike", rank);
  // ZeRO with ep stays refused by name under pp too.
  TrainOptions options = parallel_test_options(2);
  options.zero = 1;
  auto zero = GptTrainer::create(*env->device, *config, *env->kernels, *groups, options);
  CHILD_CHECK(!zero.ok() && zero.status().message().find("zero=1 with expert parallelism ep 2") !=
                                std::string::npos,
              "zero=1 under pp with ep: %s",
              zero.ok() ? "accepted" : zero.status().to_string().c_str());
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptExpertParallelPipeline, ReplayedForwardRoutesAsTheFirstAndZeroIsRefused) {
  expect_ranks_pass(4, replay_body, kDeadline);
}

// A stage's layout under ep 2: the other stage's blocks stay empty, this stage's blocks hold
// experts 2 and 3 (rank 1) after every non-expert tensor; an expert layout is not sharded again.
TEST(GptExpertParallelPipeline, ExpertLayoutOfAStageShardsOnlyItsBlocks) {
  auto config = load_config(config_path("tiny-mixtral.json"));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto full = make_layout(*config, 0, 1);
  ASSERT_TRUE(full.ok());
  auto range = stage_range(config->layers, 1, 2);
  ASSERT_TRUE(range.ok());
  const ParamLayout stage = stage_layout(*full, *range);
  auto half = expert_layout(*config, stage, 1, 2);
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  const uint64_t begin = expert_begin(*half);
  uint64_t stage_experts = 0;
  for (const ParamSpec& spec : stage.specs)
    if (spec.name.find(".moe.expert") != std::string::npos) stage_experts += spec.local_count();
  ASSERT_GT(stage_experts, 0u);
  EXPECT_EQ(half->total, stage.total - stage_experts / 2);
  for (int l = 0; l < int(half->blocks.size()); ++l) {
    const BlockParams& b = half->blocks[size_t(l)];
    if (l < range->first_layer) {
      EXPECT_TRUE(b.experts.empty()) << "block " << l;
      EXPECT_LT(b.router, 0) << "block " << l;
      continue;
    }
    ASSERT_EQ(b.experts.size(), size_t(config->experts / 2));
    for (size_t j = 0; j < b.experts.size(); ++j) {
      const ParamSpec& up = half->at(b.experts[j].up);
      EXPECT_GE(up.offset, begin);
      EXPECT_NE(
          up.name.find("block" + std::to_string(l) + ".moe.expert" + std::to_string(2 + j) + "."),
          std::string::npos)
          << up.name;
    }
    EXPECT_LT(half->at(b.router).offset, begin);
  }
  auto again = expert_layout(*config, *half, 0, 2);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already sharded"), std::string::npos)
      << again.status().to_string();
}

}  // namespace
}  // namespace tessera::gpt::testing
