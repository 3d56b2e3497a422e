// `tessera demo`: the main job in one command (docs/DEMO.md). Probes the machine, plans the demo
// model for the local host devices, trains it under `tessera launch` with a progress bar, kills
// one rank and recovers, switches plan once (state moved in memory), checks the final parameters
// bitwise against a fault-free reference run, and prints a summary; trace, plan timeline and
// loss curve land in the output folder. Exit 0 only when the check passes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "commands.h"
#include "demo/demo.h"
#include "demo_config.h"
#include "tessera/hal/platform.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/timeline.h"

namespace tessera::tools {
namespace {

using demo::DemoOptions;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tessera demo: %s\n", message.c_str());
  throw CLI::RuntimeError(2);
}

std::string self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Flags that contradict each other or can never take effect are refused before anything runs:
// the demo must not announce a kill that never happens and then report the check as if it had.
void check_options(const DemoOptions& o, bool fault_step_given) {
  if (o.ranks < 1) fail("--ranks must be at least 1");
  if (o.devices > 0 && o.devices != o.ranks) {
    fail("--devices " + std::to_string(o.devices) + " must equal --ranks " +
         std::to_string(o.ranks) + " (one device per rank; host devices are virtual)");
  }
  if (o.steps < 4) fail("--steps must be at least 4");
  if (o.out.empty()) fail("--out must name a folder");
  if (o.model != "gpt" && o.model != "mlp") fail("--model '" + o.model + "' is not gpt or mlp");
  if (o.hosts != 1 && o.hosts != 2) fail("--hosts must be 1 or 2");
  if (o.hosts == 2) {
    if (o.model != "gpt") fail("--hosts 2 trains the GPT decoder: not with --model mlp");
    if (o.ranks < 2 || o.ranks % 2 != 0) fail("--hosts 2 needs an even --ranks (ranks per host)");
    if (o.no_fault) fail("--hosts 2 shows a host lost: not with --no-fault");
  }
  if (o.seq < 1) fail("--seq must be at least 1");
  if (!fault_step_given) return;
  if (o.no_fault) fail("--fault-step and --no-fault contradict each other: give one of them");
  if (o.fault_step < 0 || o.fault_step >= o.steps) {
    fail("--fault-step " + std::to_string(o.fault_step) + " is never reached: --steps " +
         std::to_string(o.steps) + " trains steps 0.." + std::to_string(o.steps - 1) +
         " (0-based; the kill comes before step S + 1)");
  }
}

// Empties the output folder of a previous demo's results and makes run/ and reference/.
std::filesystem::path prepare_output(const std::string& folder) {
  std::error_code ec;
  const std::filesystem::path out = std::filesystem::absolute(folder);
  std::filesystem::remove_all(out / "run", ec);
  std::filesystem::remove_all(out / "reference", ec);
  std::filesystem::remove_all(out / "hosts", ec);  // --hosts 2: its checkpoints would be resumed
  for (const auto& entry : std::filesystem::directory_iterator(out, ec)) {  // a previous demo's
    const std::string name = entry.path().filename().string();
    if (name.rfind("trace", 0) == 0 || name == "loss.svg" || name == "plan-timeline.svg") {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  ec.clear();
  std::filesystem::create_directories(out / "run", ec);
  std::filesystem::create_directories(out / "reference", ec);
  if (ec) fail(out.string() + ": cannot create the output folder: " + ec.message());
  return out;
}

// Probes the machine, plans both phases of the demo and draws the first plan's timeline.
demo::DemoPlan probe_and_plan(const DemoOptions& o, const demo::DemoModel& model,
                              const std::filesystem::path& out) {
  auto probe = demo::probe_machine(model.backend);
  if (!probe.ok()) fail(probe.status().message());
  std::printf("probe     %s, %u cores, f32 GEMM %.1f GFLOP/s (256^3, one thread pool)\n",
              probe->device.c_str(), probe->cores, probe->gemm_gflops);
  auto plan = demo::plan_demo(o, model, *probe);
  if (!plan.ok()) fail(plan.status().message());
  const bool even = o.model == "gpt";
  trainer::fit_trainer_microbatches(&plan->first, o.global_batch, model.blocks, even);
  trainer::fit_trainer_microbatches(&plan->second, plan->second_batch, model.blocks, even);
  std::printf("plan      %s now, %s from step %lld (batch %lld)\n",
              trainer::plan_text(plan->first).c_str(), trainer::plan_text(plan->second).c_str(),
              (long long)plan->switch_step + 1, (long long)plan->second_batch);
  const plan::Estimate& e = plan->first_estimate;
  std::ofstream svg(out / "plan-timeline.svg");
  svg << plan::timeline_svg(e, plan::simulate_pipeline(e),
                            "tessera demo: " + plan::plan_summary(e.plan) + " (predicted)");
  return std::move(*plan);
}

// The flags both runs share: model, schedule and the two plans.
std::vector<std::string> common_trainer_flags(const DemoOptions& o, const demo::DemoModel& model,
                                              const demo::DemoPlan& plan) {
  std::vector<std::string> flags = model.trainer_flags;
  flags.insert(
      flags.end(),
      {"--steps", std::to_string(o.steps), "--global-batch", std::to_string(o.global_batch),
       "--plan", demo::plan_flag(plan.first), "--snapshot-every", "2", "--switch-step",
       std::to_string(plan.switch_step), "--switch-plan", demo::plan_flag(plan.second),
       "--switch-batch", std::to_string(plan.second_batch), "--log-every", "1"});
  return flags;
}

// The model: the GPT decoder of the embedded demo-llama.json (written to <out>/model.json), or
// the MLP of --model-size.
demo::DemoModel demo_model(const DemoOptions& o, const std::filesystem::path& out) {
  demo::DemoModel m;
  if (o.model == "mlp") {
    auto spec = trainer::model_spec_preset(o.model_size);
    if (!spec.ok()) fail(spec.status().message());
    m.description = "MLP " + o.model_size + " (hidden " + std::to_string(spec->hidden) + ", " +
                    std::to_string(spec->blocks) + " blocks, " + std::to_string(spec->classes) +
                    " classes)";
    m.ir = trainer::model_ir(*spec);
    m.blocks = spec->blocks;
    m.tp2_ok = spec->ffn_size() % 2 == 0;
    m.trainer_flags = {"--model-size", o.model_size};
    return m;
  }
  const std::string path = (out / "model.json").string();
  std::ofstream(path) << demo::kDemoGptConfig;
  auto ir = ir::load_model(path);
  if (!ir.ok()) fail(ir.status().message());
  const auto j = nlohmann::json::parse(demo::kDemoGptConfig);
  const int64_t heads = j.at("num_attention_heads"), kv = j.at("num_key_value_heads");
  const int64_t ffn = j.at("intermediate_size"), vocab = j.at("vocab_size");
  m.blocks = j.at("num_hidden_layers");
  m.description = "GPT decoder " + j.at("_name_or_path").get<std::string>() + " (hidden " +
                  std::to_string(j.at("hidden_size").get<int64_t>()) + ", " +
                  std::to_string(m.blocks) + " layers, " + std::to_string(heads) +
                  " heads, vocab " + std::to_string(vocab) + "), " + std::to_string(o.seq) +
                  " tokens per sequence";
  m.ir = std::move(*ir);
  m.seq = o.seq;
  m.tp2_ok = heads % 2 == 0 && kv % 2 == 0 && ffn % 2 == 0 && vocab % 2 == 0;
  auto platform = hal::Platform::create();
  if (!platform.ok()) fail(platform.status().message());
  auto backend = trainer::pick_backend(**platform, o.backend);
  if (!backend.ok()) fail(backend.status().message());
  m.backend = *backend;
  m.trainer_flags = {"--gpt-config", path, "--seq", std::to_string(o.seq), "--backend", m.backend};
  return m;
}

// Runs the trainer under the launcher with `extra` flags; its log goes to <dir>/log.txt, and a
// failed run ends the demo naming `what`.
void run_phase(const char* what, const DemoOptions& o, const std::string& dir,
               std::vector<std::string> args, bool show_progress, const std::string& trace) {
  const std::string bin = self_dir();
  const auto run = demo::run_trainer(bin + "/tessera", bin + "/tessera-train", o.ranks, args,
                                     show_progress, trace, o.steps, show_progress);
  std::ofstream(dir + "/log.txt") << run.log;
  if (run.exit_code != 0) {
    fail(std::string(what) + " failed (exit " + std::to_string(run.exit_code) + "); log: " + dir +
         "/log.txt");
  }
}

// The training run: checkpoints, metrics and, unless --no-fault, a rank that kills itself.
void run_training(const DemoOptions& o, const std::vector<std::string>& common,
                  const std::filesystem::path& out) {
  const int64_t fault_step = o.no_fault ? -1 : (o.fault_step >= 0 ? o.fault_step : o.steps / 3);
  const int kill_rank = o.ranks - 1;
  std::vector<std::string> args = common;
  const std::string dir = (out / "run").string();
  args.insert(args.end(), {"--ckpt-dir", dir + "/ckpt", "--metrics", dir + "/metrics.jsonl",
                           "--params-out", dir + "/final.bin"});
  if (fault_step >= 0) {
    args.insert(args.end(), {"--kill-rank", std::to_string(kill_rank), "--kill-step",
                             std::to_string(fault_step)});
    std::printf(
        "fault     rank %d will SIGKILL itself before step %lld; tessera launch "
        "--max-restarts 1 restarts it\n",
        kill_rank, (long long)fault_step + 1);
  }
  std::printf("\ntraining (rank 0's view):\n");
  run_phase("the training run", o, dir, args, true, (out / "trace.json").string());
}

// The same flags without a fault: what the training run's final parameters must equal.
void run_reference(const DemoOptions& o, const std::vector<std::string>& common,
                   const std::filesystem::path& out) {
  std::printf("\nreference (the same flags, no fault) ...\n");
  std::vector<std::string> args = common;
  const std::string dir = (out / "reference").string();
  args.insert(args.end(), {"--ckpt-dir", dir + "/ckpt", "--params-out", dir + "/final.bin"});
  run_phase("the reference run", o, dir, args, false, "");
}

// Prints the summary, the bitwise check and where the outputs are; true when the check passed.
bool report(const demo::DemoPlan& plan, const std::filesystem::path& out) {
  const std::string run_dir = (out / "run").string(), ref_dir = (out / "reference").string();
  const std::string a = read_file(run_dir + "/final.bin"), b = read_file(ref_dir + "/final.bin");
  const bool equal = !a.empty() && a == b;
  auto summary = demo::summarize(run_dir + "/metrics.jsonl", plan, (out / "loss.svg").string());
  if (!summary.ok()) fail(summary.status().message());
  std::printf("\n%s", summary->c_str());
  std::printf("check     final parameters (%zu bytes) %s the fault-free reference run's\n",
              a.size(), equal ? "are bitwise EQUAL to" : "DIFFER from");
  std::error_code ec;
  std::vector<std::string> traces;
  for (const auto& entry : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("trace", 0) == 0) traces.push_back(name);
  }
  std::printf(
      "output    %s/: plan-timeline.svg, loss.svg, %s, run/ (log, metrics.jsonl, "
      "final.bin, ckpt/), reference/\n",
      out.string().c_str(),
      traces.empty()
          ? "no trace (no DP group in this plan)"
          : (std::to_string(traces.size()) +
             " Perfetto traces (trace.g<group>.rank<r>.json, one per DP group member; open in "
             "ui.perfetto.dev)")
                .c_str());
  return equal;
}

void run_demo(const DemoOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::string train = self_dir() + "/tessera-train";
  if (access(train.c_str(), X_OK) != 0) fail(train + " not found (build the tessera-train target)");
  const std::filesystem::path out = prepare_output(o.out);
  const demo::DemoModel model = demo_model(o, out);
  std::printf("tessera demo: %d ranks, %s, %lld steps\n", o.ranks, model.description.c_str(),
              (long long)o.steps);
  const demo::DemoPlan plan = probe_and_plan(o, model, out);
  if (o.hosts == 2) {
    const demo::HostsResult across = demo::run_across_hosts(o, model, plan, out, self_dir());
    if (across.ran) {
      std::printf("\n%s", across.report.c_str());
      if (!across.why.empty()) fail(across.why);
      std::printf("done in %.1f s\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (!across.passed) throw CLI::RuntimeError(1);
      return;
    }
    std::printf("hosts     --hosts 2: %s; running the one-host demo instead\n", across.why.c_str());
  }
  const std::vector<std::string> common = common_trainer_flags(o, model, plan);
  run_training(o, common, out);
  run_reference(o, common, out);
  const bool equal = report(plan, out);
  std::printf("done in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!equal) throw CLI::RuntimeError(1);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Train a small model on the local devices: plan, launch, kill a rank and recover, switch "
      "plan, check bitwise against a fault-free run (docs/DEMO.md)");
  cmd->add_option("--ranks", o->ranks, "ranks (processes) to launch")->capture_default_str();
  cmd->add_option("--devices", o->devices, "devices to plan for (default: --ranks)");
  cmd->add_option("--model", o->model,
                  "gpt: the GPT decoder of examples/trainer/configs/demo-llama.json (embedded); "
                  "mlp: the residual MLP of --model-size")
      ->capture_default_str();
  CLI::Option* model_size =
      cmd->add_option("--model-size", o->model_size, "the MLP's size: tiny, small, medium or large")
          ->capture_default_str();
  CLI::Option* seq =
      cmd->add_option("--seq", o->seq, "tokens per sequence (gpt)")->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps")->capture_default_str();
  CLI::Option* fault_step = cmd->add_option(
      "--fault-step", o->fault_step,
      "the 0-based step S before which a rank is killed, 0 <= S < --steps (default: a third of "
      "the way)");
  cmd->add_flag("--no-fault", o->no_fault, "train without killing a rank");
  cmd->add_option("--hosts", o->hosts,
                  "2: train across two emulated hosts (network namespaces, root), lose one whole "
                  "host and continue on the other after a re-plan; without root the one-host demo")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output folder")->capture_default_str();
  CLI::Option* backend =
      cmd->add_option("--backend", o->backend,
                      "the GPT decoder's HAL backend: auto (cuda, hip or level_zero where one "
                      "lists a device, else host) or a backend name")
          ->capture_default_str();
  cmd->callback([o, fault_step, model_size, seq, backend] {
    if (model_size->count() > 0 && o->model != "mlp") {
      fail("--model-size sizes the MLP: give --model mlp with it");
    }
    if (seq->count() > 0 && o->model != "gpt")
      fail("--seq is the GPT decoder's: not with --model mlp");
    if (backend->count() > 0 && o->model != "gpt" && o->backend != "host") {
      fail("--backend: the MLP runs on the host backend only (--model gpt trains on others)");
    }
    check_options(*o, fault_step->count() > 0);
    run_demo(*o);
  });
}

}  // namespace tessera::tools
