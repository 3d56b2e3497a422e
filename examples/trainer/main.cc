// tessera-train: the reference trainer. Started once per rank by `tessera launch -n N` (or alone
// as a single rank); see examples/trainer/README.md.
//
//   tessera launch -n 4 tessera-train --plan tp=2,dp=2 --steps 20 --params-out final.bin
//   tessera-train --compare a.bin b.bin --tolerance 1e-4   (two --params-out files)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dump.h"
#include "run.h"

namespace {

// `tessera-train --compare A B [--tolerance T]`: no training; every other flag is refused.
int compare_main(const CLI::App& app, const std::vector<std::string>& files, double tolerance) {
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (option->count() > 0 && name != "--compare" && name != "--tolerance") {
      std::fprintf(stderr, "tessera-train: %s is a training flag: not with --compare\n",
                   name.c_str());
      return 2;
    }
  }
  if (files.size() != 2) {
    std::fprintf(stderr, "tessera-train: %s\n",
                 files.empty() ? "--tolerance goes with --compare A B"
                               : "--compare takes two parameters files");
    return 2;
  }
  if (!(tolerance >= 0)) {
    std::fprintf(stderr, "tessera-train: --tolerance %g: must be 0 or more\n", tolerance);
    return 2;
  }
  auto c = tessera::trainer::compare_params_files(files[0], files[1]);
  if (!c.ok()) {
    std::fprintf(stderr, "tessera-train --compare: %s\n", c.status().message().c_str());
    return 2;
  }
  const bool within = c->max_abs_diff <= tolerance;
  std::printf("%s vs %s: max |diff| %.3g%s%s (tolerance %g): %s\n", files[0].c_str(),
              files[1].c_str(), c->max_abs_diff, c->worst.empty() ? "" : " at ", c->worst.c_str(),
              tolerance,
              c->bitwise_equal ? "bitwise equal"
              : within         ? "within"
                               : "beyond the tolerance");
  return within ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::trainer;
  // One BLAS thread per rank: ranks already fill the cores, and a fixed thread count keeps the
  // GEMMs' results reproducible. Must happen before the host backend (and OpenBLAS) loads.
  setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/0);
  RunOptions o;
  std::string size = "small", plan, plan_json;
  int64_t hidden = 0, blocks = 0, classes = 0;
  double lr = 1e-3;
  size_t bucket_kb = 64;
  CLI::App app{"Tessera's reference trainer: a residual MLP trained under any plan",
               "tessera-train"};
  // A flag given twice: the last one wins (scripts append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model-size", size, "tiny, small, medium or large")->capture_default_str();
  app.add_option("--hidden", hidden, "override the hidden size");
  app.add_option("--blocks", blocks, "override the number of blocks");
  app.add_option("--classes", classes, "override the number of classes");
  app.add_option("--plan", plan, "tp=,pp=,dp=,zero=,mbs=,stages=a+b (default: dp = world)");
  app.add_option("--plan-json", plan_json, "the output of `tessera plan --json` (first plan)");
  app.add_option("--global-batch", o.train.global_batch, "samples per step")->capture_default_str();
  app.add_option("--steps", o.train.steps, "training steps")->capture_default_str();
  app.add_option("--seed", o.train.seed, "seed of data and initial values")->capture_default_str();
  app.add_option("--lr", lr, "Adam learning rate")->capture_default_str();
  app.add_option("--bucket-kb", bucket_kb, "overlap engine bucket size, KiB")
      ->capture_default_str();
  app.add_option("--params-out", o.params_out, "write the gathered final parameters here");
  app.add_option("--metrics", o.metrics_path, "rank 0 writes one JSON line per step here");
  app.add_option("--log-every", o.log_every, "print a progress line every N steps (0: none)")
      ->capture_default_str();
  app.add_option("--ckpt-dir", o.ckpt_dir,
                 "checkpoint directory (with --snapshot-every; default tessera-train-ckpt): a run "
                 "resumes from its `latest` and locks it");
  app.add_option("--snapshot-every", o.snapshot_every,
                 "snapshot (in memory, saved to --ckpt-dir) every N steps")
      ->capture_default_str();
  app.add_option("--save-every", o.save_every,
                 "every Nth save to storage is full, the others deltas (0: 4)")
      ->capture_default_str();
  app.add_flag("--fresh", o.fresh,
               "start from step 0 instead of resuming; refuses a --ckpt-dir that holds anything");
  app.add_flag("--overwrite", o.overwrite,
               "with --fresh: delete the checkpoints already in --ckpt-dir");
  app.add_flag("--allow-other-run", o.allow_other_run,
               "resume from a checkpoint written by another run (other model sizes or seed)");
  app.add_option("--max-failed-saves", o.max_failed_saves,
                 "stop with exit code 3 after N failed saves in a row (0: never)")
      ->capture_default_str();
  app.add_option("--fail-saves-from", o.fail_saves_from,
                 "fault injection: every save of this step or a later one fails (a full disk)");
  app.add_option("--kill-rank", o.kill_rank, "fault injection: this rank SIGKILLs itself");
  app.add_option("--kill-step", o.kill_step, "... before this step, in generation 0 only");
  app.add_flag("--kill-launcher", o.kill_launcher,
               "with --kill-rank: SIGKILL that rank's launcher first (a whole node lost; "
               "--nnodes MIN:MAX re-forms the job on the survivors)");
  app.add_option("--switch-step", o.switch_step, "re-plan before this step");
  app.add_option("--switch-plan", o.switch_plan_text, "the plan after --switch-step");
  app.add_option("--switch-batch", o.switch_batch, "the global batch after --switch-step");
  app.add_option("--gpt-config", o.train.gpt_config,
                 "train the GPT/MoE decoder of this Hugging Face config.json instead of the MLP "
                 "(--global-batch counts sequences of --seq tokens; examples/trainer/gpt)");
  app.add_option("--seq", o.train.seq, "tokens per sequence (with --gpt-config)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--f32", o.train.gpt_f32,
               "with --gpt-config: f32 activations and working weights instead of bf16 (tight "
               "comparisons between plans)");
  app.add_option("--backend", o.train.backend,
                 "with --gpt-config: the HAL backend (auto: cuda, hip or level_zero where one "
                 "lists a device, else host)")
      ->capture_default_str();
  bool print_model = false;
  app.add_flag("--print-model", print_model,
               "print the model as an IR layer list (for `tessera plan --model`) and exit");
  std::vector<std::string> compare;
  double tolerance = 0;
  app.add_option("--compare", compare,
                 "compare two --params-out files and exit: prints the largest |difference| and "
                 "where it is; exit 0 within --tolerance, 1 beyond it, 2 if a file is unreadable "
                 "or the two hold other parameters")
      ->expected(2);
  app.add_option("--tolerance", tolerance, "with --compare: the largest |difference| accepted")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!compare.empty() || app.count("--tolerance") > 0)
    return compare_main(app, compare, tolerance);
  if (!o.train.gpt_config.empty()) {
    // The MLP's flags would be silently ignored by the decoder.
    for (const char* flag :
         {"--model-size", "--hidden", "--blocks", "--classes", "--print-model"}) {
      if (app.count(flag) > 0) {
        std::fprintf(stderr, "tessera-train: %s sizes or prints the MLP: not with --gpt-config\n",
                     flag);
        return 2;
      }
    }
  } else if (app.count("--seq") > 0 || o.train.gpt_f32 ||
             (app.count("--backend") > 0 && o.train.backend != "host")) {
    // The MLP's math runs on the host backend only.
    std::fprintf(stderr, "tessera-train: --seq, --f32 and --backend are for --gpt-config\n");
    return 2;
  }

  auto spec = model_spec_preset(size);
  if (!spec.ok()) {
    std::fprintf(stderr, "tessera-train: %s\n", spec.status().message().c_str());
    return 2;
  }
  o.train.model = *spec;
  if (hidden > 0) o.train.model.hidden = hidden;
  if (blocks > 0) o.train.model.blocks = blocks;
  if (classes > 0) o.train.model.classes = classes;
  if (print_model) {
    const ModelSpec& m = o.train.model;
    std::printf(
        "{\"name\": \"tessera-mlp-h%lld-l%lld\", \"hidden\": %lld, \"bias\": true, "
        "\"dropout\": false,\n \"layers\": [{\"repeat\": %lld, \"layers\": [{\"type\": \"mlp\", "
        "\"ffn\": %lld, \"activation\": \"gelu\"}]},\n            {\"type\": \"lm_head\", "
        "\"vocab\": %lld}]}\n",
        (long long)m.hidden, (long long)m.blocks, (long long)m.hidden, (long long)m.blocks,
        (long long)m.ffn_size(), (long long)m.classes);
    return 0;
  }
  o.train.adam.lr = float(lr);
  o.train.bucket_bytes = bucket_kb << 10;
  if (!plan_json.empty()) {
    std::ifstream f(plan_json);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto p = f ? plan_from_json(text, plan_json)
               : tessera::Result<TrainPlan>(tessera::not_found(plan_json + ": cannot read"));
    if (!p.ok()) {
      std::fprintf(stderr, "tessera-train: %s\n", p.status().message().c_str());
      return 2;
    }
    o.train.plan = *p;
    o.plan_given = true;
  } else if (!plan.empty()) {
    auto p = parse_plan(plan);
    if (!p.ok()) {
      std::fprintf(stderr, "tessera-train: %s\n", p.status().message().c_str());
      return 2;
    }
    o.train.plan = *p;
    o.plan_given = true;
  }
  return run_training(o);
}
