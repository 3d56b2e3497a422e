// Shared by the GPT model tests: a host device (discrete in ctest: the tests never touch device
// memory), its stream and GptKernels, opened once per process; tiny decoder configs built through
// the model IR; and the finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "config.h"
#include "kernels.h"
#include "model.h"
#include "tessera/hal/hal.h"
#include "tessera/ir/loaders.h"
#include "trainer.h"

namespace tessera::gpt::testing {

// Tolerances of every parallel-vs-one-rank comparison (model_test_parallel, pipeline, zero,
// pipeline_zero, ep tests): f32 activations, so the runs differ only in summation order
// (row-parallel partial sums, the vocabulary-parallel loss, gradients summed over dp, ZeRO's
// per-micro-batch reduction, expert GEMMs split by source rank). AdamW normalises each update by
// the gradient's running RMS, so parameters whose gradients are nearly zero move by up to lr
// whatever their rounding: the parameter tolerance is 3% of one step's lr (3e-3); a wrong gradient
// moves parameters by O(lr) per step.
constexpr double kLossTol = 2e-5;      // relative, per step
constexpr double kParamTol = 1e-4;     // absolute, per parameter (weights are O(0.02 .. 1))
constexpr double kParamRmsTol = 2e-6;  // over all (or this rank's) parameters (2e-7 seen)

// One device's worth of state. Members are destroyed in reverse order: the stream before the
// platform.
struct DeviceEnv {
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  std::optional<hal::Stream> stream;
  std::optional<GptKernels> kernels;
};

// Opens device 0 of TESSERA_TEST_BACKEND (host when unset; bench/gpu_check.sh sets cuda) with a
// stream and the kernels; nullopt after printing why.
inline std::optional<DeviceEnv> open_device() {
  const char* chosen = std::getenv("TESSERA_TEST_BACKEND");
  const std::string backend = chosen != nullptr && *chosen != '\0' ? chosen : "host";
  DeviceEnv env;
  hal::PlatformOptions options;
  options.registry.selection = backend;
  auto platform = hal::Platform::create(options);
  if (!platform.ok()) {
    std::fprintf(stderr, "platform (%s): %s\n", backend.c_str(),
                 platform.status().to_string().c_str());
    return std::nullopt;
  }
  env.platform = *platform;
  auto device = env.platform->device(backend, 0);
  if (!device.ok()) {
    std::fprintf(stderr, "device %s:0: %s\n", backend.c_str(), device.status().to_string().c_str());
    return std::nullopt;
  }
  env.device.emplace(*device);
  auto stream = env.device->create_stream();
  if (!stream.ok()) return std::nullopt;
  env.stream.emplace(std::move(*stream));
  auto kernels = GptKernels::load(*env.device);
  if (!kernels.ok()) {
    std::fprintf(stderr, "kernels: %s\n", kernels.status().to_string().c_str());
    return std::nullopt;
  }
  env.kernels.emplace(std::move(*kernels));
  return env;
}

// The options the multi-rank tests share: `micro_batches` per step of 2 sequences of 16 tokens,
// f32 activations (tight comparisons with a 1-rank run), lr 3e-3.
inline TrainOptions parallel_test_options(int64_t micro_batches) {
  TrainOptions options;
  options.micro_batch = 2;
  options.seq = 16;
  options.micro_batches = micro_batches;
  options.act = DType::kF32;
  options.adamw.lr = 3e-3f;
  return options;
}

// What `steps` training steps leave on this rank: the losses, the f32 master weights (gathered
// under ZeRO), the trainer's memory accounting and its ZeRO plan.
struct RunOut {
  std::vector<double> losses;
  std::vector<float> master;
  GptTrainer::Memory memory;
  ZeroPlan zero;
};

inline Result<RunOut> run_steps(const DeviceEnv& env, const GptConfig& config,
                                ParallelGroups groups, const TrainOptions& options, int steps) {
  TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(*env.device, config, *env.kernels,
                                                        std::move(groups), options));
  TSR_RETURN_IF_ERROR(trainer->init(*env.stream));
  RunOut out;
  for (int s = 0; s < steps; ++s) {
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer->step(*env.stream));
    out.losses.push_back(r.loss);
  }
  TSR_ASSIGN_OR_RETURN(out.master, trainer->download_master(*env.stream));
  out.memory = trainer->memory();
  out.zero = trainer->zero();
  return out;
}

// Each step's loss against `reference`'s: within `rel_tol` of it (relative; 0: equal). The first
// step that is not, as "step N loss X, <other> Y" ("" when every step is); `print`: each step's
// pair on stderr (for rank 0).
inline std::string loss_beyond(const std::vector<double>& losses,
                               const std::vector<double>& reference, double rel_tol,
                               const char* other, bool print) {
  if (losses.size() != reference.size()) {
    return std::to_string(losses.size()) + " losses, " + other + " " +
           std::to_string(reference.size());
  }
  for (size_t s = 0; s < losses.size(); ++s) {
    const double a = losses[s], b = reference[s];
    if (print) std::fprintf(stderr, "step %zu loss %.7f (%s %.7f)\n", s + 1, a, other, b);
    if (rel_tol == 0 ? a == b : std::abs(a - b) <= rel_tol * std::abs(b)) continue;
    char line[160];
    std::snprintf(line, sizeof line, "step %zu loss %.9g, %s %.9g", s + 1, a, other, b);
    return line;
  }
  return "";
}

// Bitwise equal weights; and two runs with the same losses and bitwise the same weights.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
inline bool same_bits(const RunOut& a, const RunOut& b) {
  return a.losses == b.losses && same_bits(a.master, b.master);
}

// "" when `trainer` was refused with INVALID_ARGUMENT naming `what`, else what happened instead;
// accepted(): "" when it was created (the refusal tests' negative controls).
inline std::string refused_naming(const Result<std::unique_ptr<GptTrainer>>& trainer,
                                  const std::string& what) {
  if (trainer.ok()) return "accepted: " + what;
  if (trainer.status().code() != StatusCode::kInvalidArgument ||
      trainer.status().to_string().find(what) == std::string::npos) {
    return "refused otherwise: " + trainer.status().to_string();
  }
  return "";
}
inline std::string accepted(const Result<std::unique_ptr<GptTrainer>>& trainer) {
  return trainer.ok() ? "" : "refused: " + trainer.status().to_string();
}

// The padded elements of the plan's largest block part (zero 2 --overlap's second scratch).
inline uint64_t largest_block(const ZeroPlan& plan) {
  uint64_t largest = 0;
  for (size_t k = 1; k + 1 < plan.parts.size(); ++k) {
    uint64_t n = 0;
    for (int u : plan.parts[k]) n += plan.shards.units[size_t(u)].padded;
    largest = std::max(largest, n);
  }
  return largest;
}

// How far `master` (in `layout`) is from `values` (in `other`), tensors matched by name: whole
// tensors when `whole`, of which this rank's tp shard is compared, else the same shards; only the
// tensors whose name contains `only` when it is given. The largest and the rms absolute difference
// (over all of `master`), and the first element further than `tol` ("" when none is), naming the
// other side `other_name`.
struct ParamDiff {
  double worst = 0, rms = 0;
  std::string first_beyond;
};
inline ParamDiff diff_by_name(const ParamLayout& layout, const std::vector<float>& master,
                              const ParamLayout& other, const std::vector<float>& values,
                              bool whole, int tp_rank, int tp, double tol,
                              const char* other_name = "other", const char* only = nullptr) {
  std::map<std::string, const ParamSpec*> by_name;
  for (const ParamSpec& spec : other.specs) by_name[spec.name] = &spec;
  ParamDiff d;
  double sum_sq = 0;
  for (const ParamSpec& spec : layout.specs) {
    if (only && spec.name.find(only) == std::string::npos) continue;
    const ParamSpec& theirs = *by_name.at(spec.name);
    const std::span<const float> ref(values.data() + theirs.offset, theirs.local_count());
    const std::vector<float> want =
        whole ? shard_of(spec, ref, tp_rank, tp) : std::vector<float>(ref.begin(), ref.end());
    for (size_t j = 0; j < want.size(); ++j) {
      const double got = master[spec.offset + j], diff = std::abs(got - double(want[j]));
      d.worst = std::max(d.worst, diff);
      sum_sq += diff * diff;
      if (diff > tol && d.first_beyond.empty()) {
        d.first_beyond = spec.name + "[" + std::to_string(j) + "] = " + std::to_string(got) + ", " +
                         other_name + " " + std::to_string(want[j]);
      }
    }
  }
  d.rms = std::sqrt(sum_sq / double(std::max<size_t>(master.size(), 1)));
  return d;
}

// How far a rank's master weights (its tp shard, in make_layout(config, tp_rank, tp) order) are
// from a 1-rank run's (`reference`, in make_layout(config, 0, 1) order), as diff_by_name.
inline Result<ParamDiff> diff_from_one_rank(const GptConfig& config, int tp_rank, int tp,
                                            const std::vector<float>& master,
                                            const std::vector<float>& reference, double tol) {
  TSR_ASSIGN_OR_RETURN(ParamLayout local, make_layout(config, tp_rank, tp));
  TSR_ASSIGN_OR_RETURN(ParamLayout full, make_layout(config, 0, 1));
  if (master.size() != local.total || reference.size() != full.total) {
    return invalid_argument("diff_from_one_rank: " + std::to_string(master.size()) + " and " +
                            std::to_string(reference.size()) + " values");
  }
  return diff_by_name(local, master, full, reference, true, tp_rank, tp, tol, "1 rank");
}

// Prints how far rank `rank`'s parameters (tp rank `tp_rank`, pipeline stage `stage` when >= 0)
// are from `other`'s; "" when every element is within the diff's tolerance and the rms within
// `rms_tol`, else which is not (or why there is no diff).
inline std::string params_beyond(const Result<ParamDiff>& diff, double rms_tol, const char* other,
                                 int rank, int tp_rank, int stage = -1) {
  if (!diff.ok()) return std::string("against ") + other + ": " + diff.status().to_string();
  const ParamDiff& d = *diff;
  const std::string where = stage >= 0 ? ", stage " + std::to_string(stage) : "";
  std::fprintf(stderr, "rank %d (tp %d%s): parameters within %.3g of %s (rms %.3g)\n", rank,
               tp_rank, where.c_str(), d.worst, other, d.rms);
  if (!d.first_beyond.empty()) return std::string("against ") + other + ": " + d.first_beyond;
  if (d.rms > rms_tol) {
    char line[160];
    std::snprintf(line, sizeof line, "against %s: parameter rms %.3g", other, d.rms);
    return line;
  }
  return "";
}

// A scratch directory for one test (under the temporary directory, named `prefix`_XXXXXX),
// removed with it; path() is "" when it could not be made.
class ScratchDir {
 public:
  explicit ScratchDir(const char* prefix) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "_XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string config_path(const char* file) {
  return std::string(TESSERA_GPT_CONFIG_DIR) + "/" + file;
}

// Tiny decoders for gradient checks, built through the IR like the HF configs.
enum class Tiny { kLlama, kMixtral, kGpt2 };
inline void PrintTo(Tiny kind, std::ostream* out) {
  *out << (kind == Tiny::kLlama ? "llama" : kind == Tiny::kMixtral ? "mixtral" : "gpt2");
}
inline GptConfig tiny_config(Tiny kind) {
  ir::DecoderConfig d;
  d.hidden = 16;
  d.layers = 2;
  d.heads = 4;
  d.kv_heads = 2;
  d.ffn = 24;
  d.vocab = 32;
  d.max_seq_len = 16;
  d.dropout = false;
  if (kind == Tiny::kGpt2) {
    d.name = "tiny-gpt2";
    d.kv_heads = 4;
    d.learned_positions = 16;
    d.activation = ir::MlpActivation::kGelu;
    d.norm = ir::NormType::kLayerNorm;
    d.bias = true;
    d.tied = true;
  } else {
    d.name = kind == Tiny::kLlama ? "tiny-llama" : "tiny-mixtral";
    d.activation = ir::MlpActivation::kSwiGlu;
    d.norm = ir::NormType::kRmsNorm;
    d.bias = false;
    d.tied = kind == Tiny::kMixtral;
    if (kind == Tiny::kMixtral) {
      d.experts = 4;
      d.top_k = 2;
    }
  }
  auto model = ir::build_decoder(d);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  auto config = config_from_model(*model);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  GptConfig c = *config;
  c.router_aux_coef = 0.05f;  // large enough that its gradient shows in the check
  return c;
}

}  // namespace tessera::gpt::testing
