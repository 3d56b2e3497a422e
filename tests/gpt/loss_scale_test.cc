// f16 training with loss scaling (examples/trainer/gpt/loss_scale.h, trainer.h) on discrete host
// devices:
// - the scaler's arithmetic (backoff to the minimum, growth after the window, state round trip)
//   and the options refused by field name;
// - f16 with dynamic scaling follows an f32 run within an f16 tolerance (and closer than bf16);
// - an initial scale that overflows f16 skips steps, each leaving master weights bitwise and the
//   optimizer's step count as they were, backs off until finite and then trains; a small window
//   grows the scale;
// - dp 2 (zero 0 and 1), tp 2 and pp 2 x dp 2 skip the same step on every rank when only one
//   rank overflows (its scale set apart); negative control: at the other ranks' scale nothing
//   overflows, so a check local to each rank would have stepped them and diverged;
// - a checkpoint under scaling resumes bitwise (the scaler's state and the optimizer's step with
//   it); negative control: the same weights with a fresh scaler do not.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"
#include "tessera/checkpoint/rank_group.h"

namespace tessera::gpt::testing {
namespace {

TrainOptions scaled_options(DType act, LossScaleMode mode, double initial) {
  TrainOptions o = parallel_test_options(1);
  o.act = act;
  o.loss_scale.mode = mode;
  o.loss_scale.initial_scale = initial;
  return o;
}

Result<std::unique_ptr<GptTrainer>> make_trainer(const DeviceEnv& env, const GptConfig& config,
                                                 ParallelGroups groups,
                                                 const TrainOptions& options) {
  TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(*env.device, config, *env.kernels,
                                                        std::move(groups), options));
  TSR_RETURN_IF_ERROR(trainer->init(*env.stream));
  return trainer;
}

// ---- the scaler alone --------------------------------------------------------------------------

TEST(LossScaler, BacksOffToTheMinimumAndGrowsAfterTheWindow) {
  LossScaleOptions o;
  o.mode = LossScaleMode::kDynamic;
  o.initial_scale = 8;
  o.min_scale = 2;
  o.growth_interval = 3;
  LossScaler scaler(o);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4);
  scaler.update(false);
  scaler.update(false);  // would be 1: held at min_scale
  EXPECT_EQ(scaler.scale(), 2);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 2);
  scaler.update(true);  // the third good step in a row
  EXPECT_EQ(scaler.scale(), 4);
  EXPECT_EQ(scaler.good_steps(), 0);
  scaler.update(true);
  scaler.update(false);  // a skip restarts the window
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 2);
  EXPECT_EQ(scaler.good_steps(), 2);

  LossScaler restored(o);
  ASSERT_TRUE(restored.set_state(scaler.state()).ok()) << scaler.state();
  EXPECT_EQ(restored.scale(), scaler.scale());
  EXPECT_EQ(restored.good_steps(), 2);
  EXPECT_EQ(restored.skipped_steps(), 4);
  const Status bad = restored.set_state("scale=1 good=x");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("scale=1 good=x"), std::string::npos) << bad.to_string();

  LossScaleOptions fixed;
  fixed.mode = LossScaleMode::kStatic;
  fixed.initial_scale = 128;
  LossScaler constant(fixed);
  constant.update(false);
  for (int i = 0; i < 5; ++i) constant.update(true);
  EXPECT_EQ(constant.scale(), 128);
  EXPECT_EQ(constant.skipped_steps(), 1);
  EXPECT_EQ(LossScaler(LossScaleOptions{}).scale(), 1);

  // Another mode at a resume: the skipped steps carry over (AdamW's count depends on them), the
  // scale only from dynamic into dynamic; a static run keeps its configured scale.
  LossScaler now_static(fixed);
  ASSERT_TRUE(now_static.set_state(scaler.state()).ok());
  EXPECT_EQ(now_static.scale(), 128);
  EXPECT_EQ(now_static.skipped_steps(), 4);
  LossScaler now_off{LossScaleOptions{}};
  ASSERT_TRUE(now_off.set_state(scaler.state()).ok());
  EXPECT_EQ(now_off.scale(), 1);
  EXPECT_EQ(now_off.skipped_steps(), 4);
  LossScaler from_static(o);
  ASSERT_TRUE(from_static.set_state(constant.state()).ok()) << constant.state();
  EXPECT_EQ(from_static.scale(), o.initial_scale);
  EXPECT_EQ(from_static.skipped_steps(), 1);
  EXPECT_FALSE(restored.set_state("mode=sometimes scale=0x1p+0 good=0 skipped=0").ok());
}

TEST(LossScaler, OutOfRangeOptionsAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    void (*spoil)(LossScaleOptions&);
  };
  const Case cases[] = {
      {"initial_scale", [](LossScaleOptions& o) { o.initial_scale = 0; }},
      {"growth_factor", [](LossScaleOptions& o) { o.growth_factor = 1; }},
      {"backoff_factor", [](LossScaleOptions& o) { o.backoff_factor = 1.5; }},
      {"growth_interval", [](LossScaleOptions& o) { o.growth_interval = 0; }},
      {"min_scale", [](LossScaleOptions& o) { o.min_scale = 1e9; }},
  };
  for (const Case& c : cases) {
    LossScaleOptions o;
    o.mode = LossScaleMode::kDynamic;
    EXPECT_TRUE(check_loss_scale(o).ok());
    c.spoil(o);
    const Status s = check_loss_scale(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(std::string("loss_scale.") + c.field), std::string::npos)
        << s.to_string();
  }
  // The trainer refuses them before allocating anything.
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  TrainOptions options = scaled_options(DType::kF16, LossScaleMode::kDynamic, 1024);
  options.loss_scale.growth_interval = 0;
  auto trainer =
      GptTrainer::create(*env->device, tiny_config(Tiny::kLlama), *env->kernels, {}, options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("loss_scale.growth_interval"), std::string::npos)
      << trainer.status().to_string();
}

// ---- one rank ----------------------------------------------------------------------------------

struct Steps {
  std::vector<StepResult> results;
  std::vector<float> master;
};
Result<Steps> train(const DeviceEnv& env, const GptConfig& config, const TrainOptions& options,
                    int steps) {
  TSR_ASSIGN_OR_RETURN(auto trainer, make_trainer(env, config, {}, options));
  Steps out;
  for (int s = 0; s < steps; ++s) {
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer->step(*env.stream));
    out.results.push_back(r);
  }
  TSR_ASSIGN_OR_RETURN(out.master, trainer->download_master(*env.stream));
  return out;
}

// The largest relative loss difference and rms parameter difference from the f32 run.
struct Drift {
  double loss = 0, params = 0;
};
Drift drift(const Steps& run, const Steps& reference) {
  Drift d;
  for (size_t s = 0; s < run.results.size(); ++s) {
    d.loss = std::max(d.loss, std::abs(run.results[s].loss - reference.results[s].loss) /
                                  std::abs(reference.results[s].loss));
  }
  double sum = 0;
  for (size_t i = 0; i < run.master.size(); ++i) {
    const double diff = double(run.master[i]) - reference.master[i];
    sum += diff * diff;
  }
  d.params = std::sqrt(sum / double(std::max<size_t>(run.master.size(), 1)));
  return d;
}

TEST(LossScaling, F16TrainingFollowsF32WithinAnF16Tolerance) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  constexpr int kSteps = 5;
  auto f32 = train(*env, config, scaled_options(DType::kF32, LossScaleMode::kOff, 1), kSteps);
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  auto f16 =
      train(*env, config, scaled_options(DType::kF16, LossScaleMode::kDynamic, 65536), kSteps);
  ASSERT_TRUE(f16.ok()) << f16.status().to_string();
  auto bf16 = train(*env, config, scaled_options(DType::kBF16, LossScaleMode::kOff, 1), kSteps);
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  for (const StepResult& r : f16->results) {
    EXPECT_FALSE(r.skipped) << "step " << r.step;
    EXPECT_EQ(r.loss_scale, 65536) << "step " << r.step;
    EXPECT_TRUE(std::isfinite(r.grad_norm)) << "step " << r.step;
  }
  const Drift half = drift(*f16, *f32), brain = drift(*bf16, *f32);
  std::printf(
      "drift from f32 over %d steps: f16 loss %.3g params rms %.3g; bf16 loss %.3g params "
      "rms %.3g\n",
      kSteps, half.loss, half.params, brain.loss, brain.params);
  // f16 keeps 3 more mantissa bits than bf16. Seen: f16 4.3e-6 on the loss, 6.5e-6 rms on the
  // weights; bf16 6.3e-5 and 1.4e-4, beyond these bounds (the check can tell the two apart).
  EXPECT_LE(half.loss, 5e-5);
  EXPECT_LE(half.params, 5e-5);
  EXPECT_LT(half.loss, brain.loss);
  EXPECT_LT(half.params, brain.params);
}

TEST(LossScaling, AnOverflowingScaleSkipsStepsAndBacksOffUntilFiniteThenTrains) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  TrainOptions options = scaled_options(DType::kF16, LossScaleMode::kDynamic, std::ldexp(1.0, 40));
  options.adamw.warmup_steps = 4;  // the first applied update must get the schedule's first lr
  auto made = make_trainer(*env, config, {}, options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  GptTrainer& trainer = **made;
  int skipped = 0;
  double first_loss = 0;
  for (; skipped < 40; ++skipped) {
    auto before = trainer.download_master(*env->stream);
    ASSERT_TRUE(before.ok());
    auto r = trainer.step(*env->stream);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->loss_scale, std::ldexp(1.0, 40 - skipped));
    if (skipped == 0) first_loss = r->loss;
    if (!r->skipped) {
      EXPECT_TRUE(std::isfinite(r->grad_norm));
      EXPECT_FLOAT_EQ(float(r->lr), scheduled_lr(options.adamw, 1));
      break;
    }
    EXPECT_FALSE(std::isfinite(r->grad_norm)) << "step " << r->step;
    auto after = trainer.download_master(*env->stream);
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(same_bits(*before, *after)) << "skipped step " << r->step << " moved the weights";
    EXPECT_EQ(trainer.optimizer_steps(), 0) << "skipped step " << r->step;
    EXPECT_EQ(trainer.steps_done(), skipped + 1);
  }
  std::printf("2^40 backed off to 2^%d after %d skipped steps\n", 40 - skipped, skipped);
  ASSERT_GE(skipped, 1) << "2^40 never overflowed f16: the test shows nothing";
  ASSERT_LT(skipped, 40) << "never came back to finite";
  EXPECT_EQ(trainer.loss_scaler().skipped_steps(), skipped);
  EXPECT_EQ(trainer.optimizer_steps(), 1);
  EXPECT_EQ(trainer.steps_done(), skipped + 1);
  // Then it trains: more steps, each either applied or (at the edge of f16's range) skipped again
  // with the scale halved, the optimizer counting only the applied ones; the loss goes down.
  double last_loss = 0;
  int applied = 1;
  for (int s = 0; s < 8; ++s) {
    const double scale = trainer.loss_scaler().scale();
    auto r = trainer.step(*env->stream);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    applied += r->skipped ? 0 : 1;
    EXPECT_EQ(trainer.loss_scaler().scale(), r->skipped ? scale / 2 : scale) << "step " << r->step;
    last_loss = r->loss;
  }
  EXPECT_GE(applied, 5);
  EXPECT_EQ(trainer.optimizer_steps(), applied);
  EXPECT_LT(last_loss, first_loss);
}

TEST(LossScaling, DynamicScaleGrowsAfterTheWindowOfGoodSteps) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  TrainOptions options = scaled_options(DType::kF16, LossScaleMode::kDynamic, 1024);
  options.loss_scale.growth_interval = 2;
  auto run = train(*env, tiny_config(Tiny::kLlama), options, 5);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  const double want[] = {1024, 1024, 2048, 2048, 4096};
  for (size_t s = 0; s < 5; ++s) {
    EXPECT_FALSE(run->results[s].skipped);
    EXPECT_EQ(run->results[s].loss_scale, want[s]) << "step " << s + 1;
  }
  // Static: never grows.
  options.loss_scale.mode = LossScaleMode::kStatic;
  auto fixed = train(*env, tiny_config(Tiny::kLlama), options, 3);
  ASSERT_TRUE(fixed.ok()) << fixed.status().to_string();
  for (const StepResult& r : fixed->results) EXPECT_EQ(r.loss_scale, 1024);
}

// ---- several ranks -----------------------------------------------------------------------------

struct Plan {
  int tp = 1, dp = 1, pp = 1, zero = 0;
};

// The last rank (under pp the last stage, which seeds the backward) starts at 2^40 (its f16
// gradients overflow), the others at 2^8 (theirs do not): every rank must skip the first step
// and keep its weights (bitwise) and its optimizer count.
int one_rank_overflows_body(int rank, int size, Plan plan) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  const GptConfig config = tiny_config(Tiny::kLlama);
  const bool odd_one = rank == size - 1;
  auto run = [&](double odd_scale) -> Result<std::vector<StepResult>> {
    TSR_ASSIGN_OR_RETURN(ParallelGroups groups, make_groups(world, plan.tp, plan.dp, plan.pp));
    TrainOptions options =
        scaled_options(DType::kF16, LossScaleMode::kDynamic, odd_one ? odd_scale : 256.0);
    options.zero = plan.zero;
    TSR_ASSIGN_OR_RETURN(auto trainer, make_trainer(*env, config, groups, options));
    TSR_ASSIGN_OR_RETURN(std::vector<float> before, trainer->download_master(*env->stream));
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer->step(*env->stream));
    TSR_ASSIGN_OR_RETURN(std::vector<float> after, trainer->download_master(*env->stream));
    if (r.skipped && !same_bits(before, after)) {
      return internal_error("rank " + std::to_string(rank) + ": a skipped step moved weights");
    }
    if (r.skipped && trainer->optimizer_steps() != 0) {
      return internal_error("rank " + std::to_string(rank) + ": a skipped step counted");
    }
    return std::vector<StepResult>{r};
  };
  auto mixed = run(std::ldexp(1.0, 40));
  CHILD_OK(mixed.status());
  CHILD_CHECK((*mixed)[0].skipped, "rank %d (scale %g) stepped while rank %d overflowed", rank,
              (*mixed)[0].loss_scale, size - 1);
  // Negative control: with the last rank at the others' scale nobody overflows, so the others'
  // own gradients above were finite: a check local to each rank would have stepped them (under
  // tp and dp; under pp the first stage's gradients come from the last's).
  auto calm = run(256.0);
  CHILD_OK(calm.status());
  CHILD_CHECK(!(*calm)[0].skipped, "rank %d skipped at scale 256: the control shows nothing", rank);
  CHILD_OK(world->barrier());
  return 0;
}

TEST(LossScaling, DataParallelRanksSkipTogetherWhenOneOverflows) {
  expect_ranks_pass(
      2, [](int rank, int size) { return one_rank_overflows_body(rank, size, {.dp = 2}); },
      std::chrono::milliseconds(120000));
}

TEST(LossScaling, TensorParallelRanksSkipTogetherWhenOneOverflows) {
  expect_ranks_pass(
      2, [](int rank, int size) { return one_rank_overflows_body(rank, size, {.tp = 2}); },
      std::chrono::milliseconds(120000));
}

// ZeRO-1: each rank's norm covers its shard only, summed over dp.
TEST(LossScaling, ZeroOneRanksSkipTogetherWhenOneOverflows) {
  expect_ranks_pass(
      2,
      [](int rank, int size) { return one_rank_overflows_body(rank, size, {.dp = 2, .zero = 1}); },
      std::chrono::milliseconds(120000));
}

// pp 2 x dp 2: the stages' norms are summed over pp, the dp ranks' gradients over dp.
TEST(LossScaling, PipelineAndDataParallelRanksSkipTogetherWhenOneOverflows) {
  expect_ranks_pass(
      4, [](int rank, int size) { return one_rank_overflows_body(rank, size, {.dp = 2, .pp = 2}); },
      std::chrono::milliseconds(120000));
}

// ---- checkpoint --------------------------------------------------------------------------------

TEST(LossScaling, CheckpointResumeUnderScalingIsBitwise) {
  ScratchDir dir("gpt_scale");
  ASSERT_FALSE(dir.path().empty());
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  const GptConfig config = tiny_config(Tiny::kLlama);
  // Overflows at first (skips before the save), then grows every 2 good steps (across the save).
  TrainOptions options = scaled_options(DType::kF16, LossScaleMode::kDynamic, std::ldexp(1.0, 40));
  options.loss_scale.growth_interval = 2;
  options.loss_scale.backoff_factor = 1.0 / 65536;  // back off quickly: few skipped steps
  auto checkpointer = [&]() {
    ckpt::CheckpointOptions c;
    c.dir = dir.path();
    c.fsync = false;
    c.chunk_bytes = 16 << 10;
    c.device = *env->device;
    return ckpt::Checkpointer::create(c, std::make_shared<ckpt::SingleRankGroup>());
  };
  constexpr int kSave = 4, kSteps = 9;

  auto straight = make_trainer(*env, config, {}, options);
  ASSERT_TRUE(straight.ok()) << straight.status().to_string();
  auto saver = checkpointer();
  ASSERT_TRUE(saver.ok()) << saver.status().to_string();
  ASSERT_TRUE(register_gpt_state(**straight, (*saver)->registry()).ok());
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_TRUE((*straight)->step(*env->stream).ok());
    if (s + 1 == kSave) {
      ASSERT_TRUE((*saver)->save_async(kSave).ok());
      auto saved = (*saver)->wait();
      ASSERT_TRUE(saved.ok() && saved->status.ok());
      ASSERT_GE((*straight)->loss_scaler().skipped_steps(), 1) << "no skip before the save";
    }
  }
  auto want = (*straight)->download_master(*env->stream);
  ASSERT_TRUE(want.ok());

  auto resume = [&](bool fresh_scaler) -> Result<std::unique_ptr<GptTrainer>> {
    TrainOptions other = options;
    other.seed = 99;  // other weights: a load that writes nothing shows
    TSR_ASSIGN_OR_RETURN(auto trainer, make_trainer(*env, config, {}, other));
    TSR_ASSIGN_OR_RETURN(auto ckpt, checkpointer());
    TSR_RETURN_IF_ERROR(register_gpt_state(*trainer, ckpt->registry()));
    TSR_ASSIGN_OR_RETURN(ckpt::LoadResult loaded, ckpt->load());
    if (fresh_scaler) trainer->loss_scaler() = LossScaler(options.loss_scale);
    TSR_RETURN_IF_ERROR(trainer->resume_at(*env->stream, loaded.step));
    for (int64_t s = loaded.step; s < kSteps; ++s) {
      TSR_RETURN_IF_ERROR(trainer->step(*env->stream).status());
    }
    return trainer;
  };
  auto resumed = resume(false);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  auto got = (*resumed)->download_master(*env->stream);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(same_bits(*got, *want)) << "the resumed run's weights differ from the straight run's";
  EXPECT_EQ((*resumed)->loss_scaler().state(), (*straight)->loss_scaler().state());
  EXPECT_EQ((*resumed)->optimizer_steps(), (*straight)->optimizer_steps());
  // Negative control: the same weights and step with the scaler's state lost.
  auto forgetful = resume(true);
  ASSERT_TRUE(forgetful.ok()) << forgetful.status().to_string();
  auto wrong = (*forgetful)->download_master(*env->stream);
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(same_bits(*wrong, *want)) << "losing the scaler's state went unnoticed";
}

}  // namespace
}  // namespace tessera::gpt::testing
