// tessera-gpt-train: trains the GPT/MoE decoder of a Hugging Face config.json on the Markov corpus
// (data.h), one process per rank under any launcher the bootstrap knows (`tessera launch`,
// torchrun-style, mpirun, srun) or alone. A tp x dp grid in the planner's rank order; rank 0
// prints one line per step.
//
//   tessera-gpt-train --config examples/trainer/configs/tiny-llama.json --steps 60
//   tessera launch -n 4 -- tessera-gpt-train --config .../tiny-mixtral.json --tp 2 --dp 2
//
//   tessera launch -n 2 -- tessera-gpt-train --config ... --ckpt-dir ck --snapshot-every 5
//   (the same again with --resume --steps 40 continues from ck's latest step; checkpoint.h)
//
// Integration into tessera-train (plans from the planner, elastic recovery) is to come.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "memory_report.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/hal/hal.h"
#include "tessera/ir/loaders.h"
#include "trainer.h"

namespace tessera::gpt {
namespace {

struct CliOptions {
  std::string config;
  std::string backend = "host";
  int steps = 20;
  int tp = 1;
  int dp = 0;                // 0: world / (tp * pp)
  int pp = 1;                // pipeline stages (1F1B, pipeline.h)
  int ep = 1;                // expert parallelism, carved from dp (ep.h)
  int64_t decay_steps = -1;  // -1: steps
  std::string act = "bf16";
  std::string grad_comm = "f32";
  std::string recompute = "none";  // a bare --recompute leaves it empty: full
  std::string loss_scale = "off";  // off, dynamic or a static value
  bool loss_scale_window = false;  // --loss-scale-window given (dynamic scaling only)
  TrainOptions train;
  SnapshotOptions snapshots;
  bool json_summary = false;
};

// What the run did, for --json-summary (bench/trainer_bench.sh reads it).
struct RunTotals {
  int64_t first_step = 0, steps = 0;
  double seconds = 0;  // the steps' wall time, snapshot stalls included
  double snapshot_stall_s = 0;
  int64_t snapshots = 0;
  std::vector<double> step_seconds;
  double last_loss = 0;
  double loss_scale = 1;  // after the last step (loss_scale.h)
  int64_t skipped_steps = 0;
  // This rank's tp collectives' and pipeline transfers' device time over the steps (StepResult).
  double tp_comm_s = 0, pp_comm_s = 0;
};

void print_summary(const RunTotals& t, double tokens_per_step, const std::string& plan) {
  std::vector<double> sorted = t.step_seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  std::printf(
      "{\"summary\": true, \"plan\": \"%s\", \"first_step\": %lld, \"steps\": %lld, "
      "\"tokens_per_step\": %.0f, \"seconds\": %.6f, \"tokens_per_s\": %.1f, "
      "\"step_s_median\": %.6f, \"snapshots\": %lld, \"snapshot_stall_s\": %.6f, "
      "\"last_loss\": %.6f, \"loss_scale\": %.17g, \"skipped_steps\": %lld, "
      "\"tp_comm_s\": %.6f, \"pp_comm_s\": %.6f}\n",
      plan.c_str(), (long long)t.first_step, (long long)t.steps, tokens_per_step, t.seconds,
      t.seconds > 0 ? tokens_per_step * double(t.steps) / t.seconds : 0.0, median,
      (long long)t.snapshots, t.snapshot_stall_s, t.last_loss, t.loss_scale,
      (long long)t.skipped_steps, t.tp_comm_s, t.pp_comm_s);
}

Result<DType> parse_dtype(const std::string& name, const char* flag) {
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  return invalid_argument(std::string(flag) + ": '" + name + "' is not bf16, f16 or f32");
}

// --loss-scale: off, dynamic (from LossScaleOptions' initial scale) or a static positive value.
Status parse_loss_scale(const std::string& text, LossScaleOptions& out) {
  if (text == "off") {
    out.mode = LossScaleMode::kOff;
    return Status();
  }
  if (text == "dynamic") {
    out.mode = LossScaleMode::kDynamic;
    return Status();
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value > 0) || !std::isfinite(value)) {
    return invalid_argument("--loss-scale: '" + text +
                            "' is not off, dynamic or a positive number");
  }
  out.mode = LossScaleMode::kStatic;
  out.initial_scale = value;
  return Status();
}

Result<Recompute> parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (name == recompute_name(r)) return r;
  }
  if (name.empty()) return Recompute::kFull;
  return invalid_argument("--recompute: '" + name + "' is not none, selective or full");
}

Status run(CliOptions o) {
  TSR_ASSIGN_OR_RETURN(GptConfig config, load_config(o.config));
  o.train.adamw.decay_steps = o.decay_steps < 0 ? o.steps : o.decay_steps;
  TSR_ASSIGN_OR_RETURN(o.train.act, parse_dtype(o.act, "--act"));
  TSR_ASSIGN_OR_RETURN(o.train.grad_comm, parse_dtype(o.grad_comm, "--grad-comm"));
  TSR_ASSIGN_OR_RETURN(o.train.recompute, parse_recompute(o.recompute));
  TSR_RETURN_IF_ERROR(parse_loss_scale(o.loss_scale, o.train.loss_scale));
  if (o.loss_scale_window && o.train.loss_scale.mode != LossScaleMode::kDynamic) {
    return invalid_argument("--loss-scale-window needs --loss-scale dynamic (not '" + o.loss_scale +
                            "')");
  }
  TSR_ASSIGN_OR_RETURN(auto bootstrap, coll::Bootstrap::from_environment());
  const coll::LaunchInfo info = bootstrap->info();
  TSR_ASSIGN_OR_RETURN(auto platform, hal::Platform::create());
  const std::vector<hal::Device> devices = platform->devices(o.backend);
  if (devices.empty()) return not_found("no device of backend '" + o.backend + "'");
  const hal::Device device = devices[size_t(info.local_rank) % devices.size()];
  TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
  TSR_ASSIGN_OR_RETURN(GptKernels kernels, GptKernels::load(device));
  std::shared_ptr<coll::Communicator> world;
  if (info.size > 1) {
    TSR_ASSIGN_OR_RETURN(world, coll::Communicator::create(bootstrap, device));
  }
  const int dp = o.dp > 0 ? o.dp : info.size / std::max(o.tp * o.pp, 1);
  TSR_ASSIGN_OR_RETURN(ParallelGroups groups, make_groups(world, o.tp, dp, o.pp, o.ep));
  TSR_ASSIGN_OR_RETURN(auto trainer, GptTrainer::create(device, config, kernels, groups, o.train));
  TSR_RETURN_IF_ERROR(trainer->init(stream));
  // The steps' high-water mark apart from the set-up's (memory_report.h).
  const uint64_t setup_peak = device.memory_stats().peak;
  device.reset_peak();
  const bool print = info.rank == 0;
  if (print) {
    const GptModel& model = trainer->model();
    const uint64_t param_bytes = model.params().bytes().total();  // sharded under ZeRO
    std::printf(
        "%s on %s (%s kernels), tp %d%s x dp %d, %lld x %lld tokens x %lld micro-batches per "
        "rank, act %s, recompute %s, loss scale %s; loss floor %.3f nats\n"
        "rank 0 device memory: parameters, gradients, AdamW state %.2f MB; activations %.2f MB\n",
        describe(config).c_str(), device.id().c_str(), kernels.format_name(), o.tp,
        o.train.tp_comm_overlap ? " (sp, tp-comm-overlap)"
        : o.train.sp            ? " (sp)"
                                : "",
        dp, (long long)o.train.micro_batch, (long long)o.train.seq,
        (long long)o.train.micro_batches, o.act.c_str(),
        std::string(recompute_name(o.train.recompute)).c_str(),
        loss_scale_text(o.train.loss_scale).c_str(), trainer->corpus().entropy_floor(),
        double(param_bytes) / 1e6, double(model.activation_bytes()) / 1e6);
  }
  if (print && o.train.act == DType::kF16 && !o.train.loss_scale.enabled()) {
    std::fprintf(
        stderr,
        "tessera-gpt-train: warning: --act f16 without --loss-scale: small gradients "
        "flush to zero in f16 and an overflow fails the step (try --loss-scale dynamic)\n");
  }
  if (print) {
    const GptTrainer::Memory m = trainer->memory();
    std::printf(
        "rank 0 device bytes (zero=%d%s): master %llu, work %llu, grad %llu, m %llu, v %llu, "
        "activations %llu, pipeline %llu, other %llu; total %llu\n",
        o.train.zero, o.train.overlap ? ", overlap" : "", (unsigned long long)m.params.master,
        (unsigned long long)m.params.work, (unsigned long long)m.params.grad,
        (unsigned long long)m.params.m, (unsigned long long)m.params.v,
        (unsigned long long)m.activations, (unsigned long long)m.pipeline,
        (unsigned long long)(m.optimizer + m.trainer), (unsigned long long)m.total());
  }
  const double tokens_per_step =
      double(o.train.micro_batch * o.train.seq * o.train.micro_batches * dp);
  std::unique_ptr<GptSnapshots> snapshots;
  RunTotals totals;
  if (!o.snapshots.dir.empty()) {
    TSR_ASSIGN_OR_RETURN(snapshots, GptSnapshots::create(o.snapshots, *trainer, bootstrap, device));
    TSR_ASSIGN_OR_RETURN(totals.first_step, snapshots->resume(stream));
    if (totals.first_step > o.steps) {
      return invalid_argument("--ckpt-dir " + o.snapshots.dir + " holds step " +
                              std::to_string(totals.first_step) + ", beyond --steps " +
                              std::to_string(o.steps));
    }
    if (print && totals.first_step > 0) {
      std::printf("resumed from %s at step %lld\n", o.snapshots.dir.c_str(),
                  (long long)totals.first_step);
    }
  }
  for (int64_t s = totals.first_step; s < o.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    TSR_ASSIGN_OR_RETURN(StepResult r, trainer->step(stream));
    SnapshotStats snap;
    if (snapshots) {
      TSR_ASSIGN_OR_RETURN(snap, snapshots->after_step(r.step, r.step == o.steps));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    totals.steps += 1;
    totals.seconds += seconds;
    totals.step_seconds.push_back(seconds);
    totals.last_loss = r.loss;
    totals.loss_scale = trainer->loss_scaler().scale();
    totals.skipped_steps += r.skipped ? 1 : 0;
    totals.tp_comm_s += r.tp_comm_seconds;
    totals.pp_comm_s += r.pp_comm_seconds;
    totals.snapshots += snap.taken ? 1 : 0;
    totals.snapshot_stall_s += snap.stall_s;
    if (print) {
      std::printf("step %lld loss %.4f xent %.4f grad_norm %.3f lr %.2e tokens/s %.0f",
                  (long long)r.step, r.loss, r.xent, r.grad_norm, r.lr, tokens_per_step / seconds);
      if (snap.taken) {
        std::printf(
            " snapshot stall %.2f ms%s", snap.stall_s * 1e3,
            snap.bytes_full > 0 ? (snap.delta ? " (last save delta)" : " (last save full)") : "");
      }
      if (o.train.overlap) {
        std::printf(" comm %.2f ms exposed %.2f ms", r.comm_seconds * 1e3,
                    r.exposed_comm_seconds * 1e3);
      }
      if (o.tp > 1) std::printf(" tp comm %.2f ms", r.tp_comm_seconds * 1e3);
      if (o.pp > 1) std::printf(" pp comm %.2f ms", r.pp_comm_seconds * 1e3);
      if (o.train.loss_scale.enabled()) {
        std::printf(" loss_scale %g%s", r.loss_scale, r.skipped ? " skipped (overflow)" : "");
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (snapshots) {
    // The run is not done until its last save is durable: the wait counts as a stall.
    const auto start = std::chrono::steady_clock::now();
    TSR_RETURN_IF_ERROR(snapshots->finish());
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    totals.seconds += waited;
    totals.snapshot_stall_s += waited;
  }
  if (print && o.json_summary) {
    print_summary(totals, tokens_per_step, gpt_layout_text(*trainer));
  }
  // Every rank: its allocator high-water mark beside the planner's prediction for its stage.
  TSR_ASSIGN_OR_RETURN(const ir::Model ir_model, ir::load_model(o.config));
  const Result<plan::MemoryBreakdown> predicted =
      predict_memory(ir_model, plan_shape(o.train, o.tp, dp, o.pp, o.ep), groups.pp_rank());
  // The plans the trainer runs and the planner does not model here (zero 3 under pp) are
  // printed without a prediction; any other planner error is an error.
  if (!predicted.ok() && !(o.train.zero == 3 && o.pp > 1)) return predicted.status();
  if (predicted.ok()) {
    const MemoryComparison memory = compare_memory(trainer->memory(), device.memory_stats().peak,
                                                   setup_peak, predicted.value());
    const std::string report = memory_report_text(memory, info.rank);
    std::fputs(print ? report.c_str() : report.substr(0, report.find('\n') + 1).c_str(), stdout);
  } else {
    // The measurement stands on its own, with the planner's reason.
    std::printf(
        "rank %d peak measured %.3f MB; trainer accounts %.3f MB; no planner prediction: %s\n",
        info.rank, double(device.memory_stats().peak) / 1e6,
        double(trainer->memory().total()) / 1e6, predicted.status().message().c_str());
  }
  std::fflush(stdout);
  if (world) TSR_RETURN_IF_ERROR(world->barrier());
  return Status();
}

}  // namespace
}  // namespace tessera::gpt

int main(int argc, char** argv) {
  tessera::gpt::CliOptions o;
  CLI::App app{"Trains the GPT/MoE decoder of a config.json on the synthetic Markov corpus."};
  app.add_option("--config", o.config, "Hugging Face config.json")->required();
  app.add_option("--steps", o.steps, "optimizer steps");
  app.add_option("--tp", o.tp, "tensor-parallel degree");
  app.add_option("--dp", o.dp, "data-parallel degree (default: world / (tp * pp))");
  app.add_option("--pp", o.pp, "pipeline stages, 1F1B (tied or MoE not with zero)");
  app.add_option("--vp", o.train.vp,
                 "virtual stages per pipeline stage: interleaved 1F1B (needs pp > 1, "
                 "micro-batches a multiple of pp; not with zero, overlap or ep)");
  app.add_option(
      "--ep", o.ep,
      "expert parallelism: experts sharded over ep of the dp ranks (MoE; not with zero)");
  app.add_option("--clip-norm", o.train.adamw.clip_norm, "gradient clipping norm (<= 0: none)");
  app.add_option("--micro-batch", o.train.micro_batch, "sequences per micro-batch per rank");
  app.add_option("--seq", o.train.seq, "tokens per sequence");
  app.add_option("--micro-batches", o.train.micro_batches, "micro-batches per step");
  app.add_option("--act", o.act, "activation dtype: bf16, f16 or f32 (f16: use --loss-scale)");
  app.add_option("--grad-comm", o.grad_comm, "dp gradient allreduce dtype: f32 or bf16");
  app.add_option("--recompute", o.recompute,
                 "activation recomputation: none, selective (the attention core) or full (each "
                 "block); bare: full")
      ->expected(0, 1);
  app.add_flag("--sp", o.train.sp,
               "Megatron sequence parallelism over tp: norms and residual stream split by tokens "
               "(needs tp > 1; dense models)");
  app.add_flag("--tp-comm-overlap", o.train.tp_comm_overlap,
               "under --sp, the forward's tp gathers / reduce-scatters as ring collective matmuls "
               "overlapping the GEMMs (needs --sp and --act f32)");
  app.add_option("--zero", o.train.zero,
                 "ZeRO stage over dp: 0, 1 (optimizer state), 2 (+ gradients), 3 (+ weights)");
  app.add_flag("--overlap", o.train.overlap,
               "dp gradient sum through the overlap engine, bucket by bucket during the backward "
               "(zero 0 or 1, f32 or bf16 wire, pp, ep; zero 2/3: ZeRO's own collectives on a "
               "communication stream; bucket size: TESSERA_BUCKET_MB)");
  app.add_option("--loss-scale", o.loss_scale,
                 "loss scaling: off, dynamic (from 65536, x2 after --loss-scale-window good "
                 "steps, x0.5 and the step skipped on overflow) or a static value");
  auto* window = app.add_option("--loss-scale-window", o.train.loss_scale.growth_interval,
                                "dynamic loss scaling: good steps before the scale grows")
                     ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.train.adamw.lr, "AdamW learning rate");
  app.add_option("--warmup", o.train.adamw.warmup_steps, "linear learning-rate warmup steps");
  app.add_option("--decay-steps", o.decay_steps,
                 "cosine decay to 0.1 lr by this step (default: --steps; 0: constant)");
  app.add_option("--seed", o.train.seed, "parameter initialisation seed");
  app.add_option("--backend", o.backend, "HAL backend of the devices");
  app.add_option("--ckpt-dir", o.snapshots.dir,
                 "checkpoint directory: snapshots (with --snapshot-every) and --resume");
  app.add_option("--snapshot-every", o.snapshots.every,
                 "save master weights and AdamW state every N steps and after the last (0: "
                 "never); asynchronous unless --ckpt-sync")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--full-every", o.snapshots.full_every,
                 "a full save, then N-1 incremental (delta) saves; 1: every save full")
      ->check(CLI::PositiveNumber);
  app.add_flag("--ckpt-sync", o.snapshots.synchronous,
               "wait for each save to be durable before the next step (the baseline's "
               "synchronous checkpoint)");
  app.add_flag("--peer-replica", o.snapshots.peer_replica,
               "also keep each snapshot in the buddy rank's memory");
  app.add_flag("--resume", o.snapshots.resume,
               "continue from --ckpt-dir's latest checkpoint when it has one");
  app.add_flag("--json-summary", o.json_summary,
               "rank 0 prints one JSON line with the run's throughput and snapshot stalls");
  CLI11_PARSE(app, argc, argv);
  o.loss_scale_window = window->count() > 0;
  if (o.snapshots.dir.empty() && (o.snapshots.every > 0 || o.snapshots.resume)) {
    std::fprintf(stderr, "tessera-gpt-train: --snapshot-every and --resume need --ckpt-dir\n");
    return 2;
  }
  const tessera::Status s = tessera::gpt::run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera-gpt-train: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
