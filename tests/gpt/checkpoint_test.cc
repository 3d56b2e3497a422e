// The GPT trainer's state in the checkpointer (examples/trainer/gpt/checkpoint.h), on discrete
// host devices (the checkpointer copies device memory on its own stream):
// - a run saved after k steps and continued by a fresh trainer (initialised from another seed,
//   so a load that writes nothing shows) ends bitwise where one run straight through ends: one
//   rank in bf16, dp 2 at zero 0, 1 and 3;
// - zero-0 checkpoints are plan-independent: saved under dp 2 and loaded under tp 2 (from storage,
//   and moved in memory by reshard_from_memory), the continued run matches a 1-rank run within
//   the parallel tests' tolerances;
// - a ZeRO checkpoint loaded under another plan is refused naming the tensor;
// - negative control: continuing from the loaded weights with the wrong step count (the data and
//   the schedule restart) does not end where the straight run ends.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "checkpoint.h"
#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"
#include "tessera/checkpoint/comm_rank_group.h"

namespace tessera::gpt::testing {
namespace {

constexpr int kSteps = 4;

struct Plan {
  int tp = 1, dp = 1, zero = 0;
};

TrainOptions options_for(const Plan& p, DType act) {
  TrainOptions o = parallel_test_options(1);
  o.act = act;
  o.zero = p.zero;
  return o;
}

// One rank's world and its checkpointer's group (a communicator of its own, as the trainer's
// persist thread needs).
struct RankEnv {
  DeviceEnv dev;
  std::shared_ptr<coll::Communicator> world, ckpt_comm;
  std::shared_ptr<ckpt::RankGroup> group() const {
    if (!ckpt_comm) return std::make_shared<ckpt::SingleRankGroup>();
    return std::make_shared<ckpt::CommRankGroup>(ckpt_comm);
  }
};

Result<std::unique_ptr<ckpt::Checkpointer>> make_checkpointer(const RankEnv& env,
                                                              const std::string& dir) {
  ckpt::CheckpointOptions c;
  c.dir = dir;
  c.fsync = false;
  c.chunk_bytes = 16 << 10;
  c.device = *env.dev.device;
  return ckpt::Checkpointer::create(c, env.group());
}

Result<std::unique_ptr<GptTrainer>> make_trainer(const RankEnv& env, const GptConfig& config,
                                                 const Plan& plan, DType act, uint64_t seed) {
  ParallelGroups groups;
  if (env.world) {
    TSR_ASSIGN_OR_RETURN(groups, make_groups(env.world, plan.tp, plan.dp));
  }
  TrainOptions options = options_for(plan, act);
  options.seed = seed;
  TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(*env.dev.device, config, *env.dev.kernels,
                                                        std::move(groups), options));
  TSR_RETURN_IF_ERROR(trainer->init(*env.dev.stream));
  return trainer;
}

Result<std::vector<double>> run(GptTrainer& trainer, const hal::Stream& stream, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer.step(stream));
    losses.push_back(r.loss);
  }
  return losses;
}

// kSteps steps straight through, saving after `save_at` of them.
struct Straight {
  std::vector<double> losses;
  std::vector<float> master;
};
Result<Straight> run_and_save(const RankEnv& env, const GptConfig& config, const Plan& plan,
                              DType act, const std::string& dir, int save_at) {
  TSR_ASSIGN_OR_RETURN(auto trainer, make_trainer(env, config, plan, act, 1234));
  TSR_ASSIGN_OR_RETURN(auto ckpt, make_checkpointer(env, dir));
  TSR_RETURN_IF_ERROR(register_gpt_state(*trainer, ckpt->registry()));
  Straight out;
  TSR_ASSIGN_OR_RETURN(out.losses, run(*trainer, *env.dev.stream, save_at));
  TSR_RETURN_IF_ERROR(ckpt->save_async(save_at).status());
  TSR_ASSIGN_OR_RETURN(ckpt::SaveResult saved, ckpt->wait());
  TSR_RETURN_IF_ERROR(saved.status);
  TSR_ASSIGN_OR_RETURN(std::vector<double> rest, run(*trainer, *env.dev.stream, kSteps - save_at));
  out.losses.insert(out.losses.end(), rest.begin(), rest.end());
  TSR_ASSIGN_OR_RETURN(out.master, trainer->download_master(*env.dev.stream));
  return out;
}

// A fresh trainer under `plan` (seed 99: other weights) loads `dir`'s latest and runs to kSteps;
// `resume_step` overrides the step it continues at (the negative control), -1: the loaded one.
Result<Straight> load_and_continue(const RankEnv& env, const GptConfig& config, const Plan& plan,
                                   DType act, const std::string& dir, int resume_step = -1) {
  TSR_ASSIGN_OR_RETURN(auto trainer, make_trainer(env, config, plan, act, 99));
  TSR_ASSIGN_OR_RETURN(auto ckpt, make_checkpointer(env, dir));
  TSR_RETURN_IF_ERROR(register_gpt_state(*trainer, ckpt->registry()));
  TSR_ASSIGN_OR_RETURN(ckpt::LoadResult loaded, ckpt->load());
  const int64_t at = resume_step >= 0 ? resume_step : loaded.step;
  TSR_RETURN_IF_ERROR(trainer->resume_at(*env.dev.stream, at));
  Straight out;
  TSR_ASSIGN_OR_RETURN(out.losses, run(*trainer, *env.dev.stream, kSteps - int(loaded.step)));
  TSR_ASSIGN_OR_RETURN(out.master, trainer->download_master(*env.dev.stream));
  return out;
}

std::optional<RankEnv> open_rank(int rank, int size) {
  RankEnv env;
  auto dev = open_device();
  if (!dev) return std::nullopt;
  env.dev = std::move(*dev);
  if (size > 1) {
    env.world = coll::testing::child_communicator(rank, size, {}, &*env.dev.device);
    if (!env.world) return std::nullopt;
    auto dup = env.world->split(0, rank);
    if (!dup.ok()) return std::nullopt;
    env.ckpt_comm = *dup;
  }
  return env;
}

// Saved after 2 of kSteps steps and continued by a fresh trainer of the same plan: bitwise.
int resume_body(int rank, int size, Plan plan, DType act, std::string dir) {
  auto env = open_rank(rank, size);
  CHILD_CHECK(env.has_value(), "no device or communicator");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  auto straight = run_and_save(*env, *config, plan, act, dir, 2);
  CHILD_OK(straight.status());
  auto resumed = load_and_continue(*env, *config, plan, act, dir);
  CHILD_OK(resumed.status());
  for (size_t s = 0; s < resumed->losses.size(); ++s) {
    CHILD_CHECK(resumed->losses[s] == straight->losses[2 + s], "step %zu loss %.9g, straight %.9g",
                3 + s, resumed->losses[s], straight->losses[2 + s]);
  }
  CHILD_CHECK(same_bits(resumed->master, straight->master),
              "zero=%d dp %d: the resumed run's weights differ from the straight run's", plan.zero,
              plan.dp);
  // Negative control: the same weights continued as if at step 0 (data and lr schedule restart).
  auto wrong = load_and_continue(*env, *config, plan, act, dir, 0);
  CHILD_OK(wrong.status());
  CHILD_CHECK(!same_bits(wrong->master, straight->master),
              "continuing at the wrong step went unnoticed");
  if (env->world) CHILD_OK(env->world->barrier());
  return 0;
}

void expect_resume_bitwise(Plan plan, DType act) {
  ScratchDir dir("gpt_ckpt");
  ASSERT_FALSE(dir.path().empty());
  expect_ranks_pass(
      plan.tp * plan.dp,
      [&](int rank, int size) { return resume_body(rank, size, plan, act, dir.path()); },
      std::chrono::milliseconds(120000));
}

TEST(GptCheckpoint, OneRankBf16ResumeIsBitwise) {
  expect_resume_bitwise({}, DType::kBF16);
}
TEST(GptCheckpoint, DataParallelTwoResumeIsBitwise) {
  expect_resume_bitwise({1, 2, 0}, DType::kF32);
}
TEST(GptCheckpoint, ZeroOneResumeIsBitwise) {
  expect_resume_bitwise({1, 2, 1}, DType::kF32);
}
TEST(GptCheckpoint, ZeroThreeResumeIsBitwise) {
  expect_resume_bitwise({1, 2, 3}, DType::kF32);
}

// Saved under dp 2, continued under tp 2 (from storage, or moved in memory): the 1-rank run's
// steps within the parallel tests' tolerances.
int replan_body(int rank, int size, bool in_memory, std::string dir) {
  auto env = open_rank(rank, size);
  CHILD_CHECK(env.has_value(), "no device or communicator");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  const Plan dp2{1, 2, 0}, tp2{2, 1, 0};
  // The reference: one rank with dp's two micro-batches per step (the same samples, trainer.h).
  TrainOptions one = options_for({}, DType::kF32);
  one.micro_batches = 2;
  auto reference_trainer =
      GptTrainer::create(*env->dev.device, *config, *env->dev.kernels, {}, one);
  CHILD_OK(reference_trainer.status());
  CHILD_OK((*reference_trainer)->init(*env->dev.stream));
  auto reference_losses = run(**reference_trainer, *env->dev.stream, kSteps);
  CHILD_OK(reference_losses.status());
  auto reference = (*reference_trainer)->download_master(*env->dev.stream);
  CHILD_OK(reference.status());

  // tp 2 runs one micro-batch of 2 sequences on both ranks: the same samples as dp 2's step
  // only with 2 micro-batches, so the continuation takes 2 (as the 1-rank run does).
  auto continue_under_tp2 = [&](ckpt::Checkpointer& ckpt) -> Result<Straight> {
    ParallelGroups groups;
    TSR_ASSIGN_OR_RETURN(groups, make_groups(env->world, tp2.tp, tp2.dp));
    one.seed = 99;
    TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(*env->dev.device, *config,
                                                          *env->dev.kernels, groups, one));
    TSR_RETURN_IF_ERROR(trainer->init(*env->dev.stream));
    TSR_RETURN_IF_ERROR(register_gpt_state(*trainer, ckpt.registry()));
    TSR_ASSIGN_OR_RETURN(ckpt::LoadResult r, in_memory ? ckpt.reshard_from_memory() : ckpt.load());
    TSR_RETURN_IF_ERROR(trainer->resume_at(*env->dev.stream, r.step));
    Straight out;
    TSR_ASSIGN_OR_RETURN(out.losses, run(*trainer, *env->dev.stream, kSteps - int(r.step)));
    TSR_ASSIGN_OR_RETURN(out.master, trainer->download_master(*env->dev.stream));
    return out;
  };
  auto result = [&]() -> Result<Straight> {
    if (!in_memory) {  // saved by one trainer, loaded by another checkpointer
      TSR_RETURN_IF_ERROR(run_and_save(*env, *config, dp2, DType::kF32, dir, 2).status());
      TSR_ASSIGN_OR_RETURN(auto ckpt, make_checkpointer(*env, dir));
      return continue_under_tp2(*ckpt);
    }
    // The same checkpointer's snapshot moved to the new trainer's buffers.
    TSR_ASSIGN_OR_RETURN(auto old_trainer, make_trainer(*env, *config, dp2, DType::kF32, 1234));
    TSR_ASSIGN_OR_RETURN(auto ckpt, make_checkpointer(*env, dir));
    TSR_RETURN_IF_ERROR(register_gpt_state(*old_trainer, ckpt->registry()));
    TSR_RETURN_IF_ERROR(run(*old_trainer, *env->dev.stream, 2).status());
    TSR_RETURN_IF_ERROR(ckpt->save_async(2).status());
    TSR_RETURN_IF_ERROR(ckpt->wait().status());
    return continue_under_tp2(*ckpt);
  }();
  CHILD_OK(result.status());
  const Straight& continued = *result;
  for (size_t s = 0; s < continued.losses.size(); ++s) {
    const double a = continued.losses[s], b = (*reference_losses)[2 + s];
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b), "step %zu loss %.9g, 1 rank %.9g", 3 + s,
                a, b);
  }
  const int tp_rank = env->world->rank();  // tp 2 on two ranks: the tp rank is the world rank
  auto diff = diff_from_one_rank(*config, tp_rank, 2, continued.master, *reference, kParamTol);
  CHILD_OK(diff.status());
  CHILD_CHECK(diff->first_beyond.empty(), "%s", diff->first_beyond.c_str());
  CHILD_CHECK(diff->rms <= kParamRmsTol, "parameter differences: rms %.3g", diff->rms);
  CHILD_OK(env->world->barrier());
  return 0;
}

TEST(GptCheckpoint, SavedUnderDataParallelLoadsUnderTensorParallel) {
  ScratchDir dir("gpt_ckpt");
  ASSERT_FALSE(dir.path().empty());
  expect_ranks_pass(
      2, [&](int rank, int size) { return replan_body(rank, size, false, dir.path()); },
      std::chrono::milliseconds(120000));
}

TEST(GptCheckpoint, ReshardFromMemoryMovesDataParallelToTensorParallel) {
  ScratchDir dir("gpt_ckpt");
  ASSERT_FALSE(dir.path().empty());
  expect_ranks_pass(
      2, [&](int rank, int size) { return replan_body(rank, size, true, dir.path()); },
      std::chrono::milliseconds(120000));
}

// A zero-1 checkpoint holds flat shards: a zero-0 trainer does not find its tensors in it.
int refusal_body(int rank, int size, std::string dir) {
  auto env = open_rank(rank, size);
  CHILD_CHECK(env.has_value(), "no device or communicator");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  CHILD_OK(run_and_save(*env, *config, {1, 2, 1}, DType::kF32, dir, 2).status());
  auto loaded = load_and_continue(*env, *config, {1, 2, 0}, DType::kF32, dir);
  CHILD_CHECK(!loaded.ok(), "a zero-1 checkpoint loaded into a zero-0 trainer");
  const std::string message = loaded.status().message();
  CHILD_CHECK(message.find("embed.wte") != std::string::npos &&
                  message.find("not in step 2") != std::string::npos,
              "the refusal does not name the tensor: %s", message.c_str());
  return 0;
}

// The same checkpoint resumed on one rank at zero 1: one unit's flat order differs with dp, so
// the names carry dp and nothing loads scrambled.
int one_rank_refusal_body(int rank, int size, std::string dir) {
  auto env = open_rank(rank, size);
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path("tiny-llama.json"));
  CHILD_OK(config.status());
  auto loaded = load_and_continue(*env, *config, {1, 1, 1}, DType::kF32, dir);
  CHILD_CHECK(!loaded.ok(), "a dp-2 zero-1 checkpoint loaded into a dp-1 zero-1 trainer");
  const std::string message = loaded.status().message();
  CHILD_CHECK(message.find("zero.tp1.pp1.dp1.s0.t0.master") != std::string::npos,
              "the refusal does not name the tensor: %s", message.c_str());
  return 0;
}

TEST(GptCheckpoint, ZeroCheckpointIsRefusedUnderAnotherPlanNamingTheTensor) {
  ScratchDir dir("gpt_ckpt");
  ASSERT_FALSE(dir.path().empty());
  expect_ranks_pass(
      2, [&](int rank, int size) { return refusal_body(rank, size, dir.path()); },
      std::chrono::milliseconds(120000));
  expect_ranks_pass(
      1, [&](int rank, int size) { return one_rank_refusal_body(rank, size, dir.path()); },
      std::chrono::milliseconds(120000));
}

}  // namespace
}  // namespace tessera::gpt::testing
