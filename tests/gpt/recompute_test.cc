// Activation recomputation of the GPT/MoE decoder (Recompute, examples/trainer/gpt/model.h):
// selective (the attention core rerun before each attention backward) and full (each block rerun
// before its backward) give bitwise the steps of a run without recomputation, because the same
// kernels rerun on the same inputs and shapes; on 1 rank and under tp 2 (forked ranks, one
// discrete host device each), dense and MoE. Their activation bytes order full < selective < none,
// selective keeping everything but the attention core's log-sum-exp of all blocks but one.
#include <cstring>
#include <string>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

constexpr int kSteps = 3;
constexpr Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};

// What selective recomputation saves: the f32 log-sum-exp per (sequence, local head, query) of
// every block but one, the blocks sharing one scratch for it.
uint64_t selective_saving(const GptConfig& config, const TrainOptions& options, int tp) {
  return uint64_t(config.layers - 1) * uint64_t(options.micro_batch) * uint64_t(config.heads / tp) *
         uint64_t(options.seq) * sizeof(float);
}

// Trains kSteps under each mode on `groups`: "" when selective and full repeat the losses and
// master weights of none bitwise and the activation bytes are as the header says, else what is
// not.
std::string check_modes(const DeviceEnv& env, const GptConfig& config, const ParallelGroups& groups,
                        TrainOptions options) {
  RunOut runs[std::size(kModes)];
  for (size_t i = 0; i < std::size(kModes); ++i) {
    options.recompute = kModes[i];
    auto run = run_steps(env, config, groups, options, kSteps);
    if (!run.ok()) return std::string(recompute_name(kModes[i])) + ": " + run.status().to_string();
    runs[i] = std::move(*run);
  }
  const RunOut& none = runs[0];
  for (size_t i = 1; i < std::size(kModes); ++i) {
    const std::string mode(recompute_name(kModes[i]));
    if (runs[i].losses != none.losses) return mode + ": losses differ from none";
    if (runs[i].master.size() != none.master.size() ||
        std::memcmp(runs[i].master.data(), none.master.data(),
                    none.master.size() * sizeof(float)) != 0) {
      return mode + ": master weights differ from none";
    }
  }
  const uint64_t bytes_none = none.memory.activations;
  const uint64_t bytes_selective = runs[1].memory.activations;
  const uint64_t bytes_full = runs[2].memory.activations;
  std::fprintf(stderr, "%s tp %d: activation bytes none %llu, selective %llu, full %llu\n",
               config.name.c_str(), groups.tp_size(), (unsigned long long)bytes_none,
               (unsigned long long)bytes_selective, (unsigned long long)bytes_full);
  if (!(bytes_full < bytes_selective && bytes_selective < bytes_none))
    return "activation bytes not full < selective < none";
  const uint64_t want = selective_saving(config, options, groups.tp_size());
  if (bytes_none - bytes_selective != want) {
    return "selective saves " + std::to_string(bytes_none - bytes_selective) + " bytes, not " +
           std::to_string(want);
  }
  return "";
}

TrainOptions recompute_options(DType act) {
  TrainOptions options = parallel_test_options(2);
  options.act = act;
  return options;
}

struct Case {
  const char* name;  // the test name's suffix
  const char* file;  // under examples/trainer/configs
};
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.file;
}
class GptRecompute : public ::testing::TestWithParam<Case> {};

TEST_P(GptRecompute, SelectiveAndFullGiveBitwiseTheStepsOfNoneWithLessMemoryOnOneRank) {
  auto env = open_device();
  ASSERT_TRUE(env.has_value());
  auto config = load_config(config_path(GetParam().file));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(check_modes(*env, *config, {}, recompute_options(DType::kBF16)), "");
}

int tp_body(int rank, int size, const char* file) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto config = load_config(config_path(file));
  CHILD_OK(config.status());
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups = make_groups(world, size, 1);
  CHILD_OK(groups.status());
  const std::string error = check_modes(*env, *config, *groups, recompute_options(DType::kF32));
  CHILD_CHECK(error.empty(), "%s", error.c_str());
  CHILD_OK(world->barrier());
  return 0;
}

TEST_P(GptRecompute, SelectiveAndFullGiveBitwiseTheStepsOfNoneUnderTensorParallelTwo) {
  const char* file = GetParam().file;
  expect_ranks_pass(
      2, [file](int rank, int size) { return tp_body(rank, size, file); },
      std::chrono::milliseconds(240000));
}

INSTANTIATE_TEST_SUITE_P(Configs, GptRecompute,
                         ::testing::Values(Case{"Dense", "tiny-llama.json"},
                                           Case{"Moe", "tiny-mixtral.json"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace tessera::gpt::testing
