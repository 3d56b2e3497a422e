#include "run.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <utility>

#include "dump.h"
#include "recovery.h"

namespace tessera::trainer {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int fail(int rank, const Status& s) {
  std::fprintf(stderr, "tessera-train: rank %d: %s\n", rank, s.to_string().c_str());
  return 1;
}

void print_progress(const StepReport& r, const RunOptions& o, int64_t batch, double ckpt_stall,
                    double elapsed) {
  const double samples_s = r.seconds > 0 ? double(batch) / r.seconds : 0;
  std::printf("step %5" PRId64 "/%" PRId64
              "  loss %.6f  %8.0f samples/s  step %.1f ms  exposed comm %.2f ms (tp %.2f pp %.2f "
              "dp %.2f)  overlap %.0f%%  ckpt stall %.2f ms  t=%.1fs\n",
              r.step + 1, o.train.steps, r.loss, samples_s, 1e3 * r.seconds,
              1e3 * (r.tp_comm_s + r.pp_comm_s + r.dp_exposed_s), 1e3 * r.tp_comm_s,
              1e3 * r.pp_comm_s, 1e3 * r.dp_exposed_s, 100 * r.overlap_ratio, 1e3 * ckpt_stall,
              elapsed);
  std::fflush(stdout);
}

}  // namespace

Status check_run_options(const RunOptions& o, int world_size) {
  const std::string steps = " (--steps " + std::to_string(o.train.steps) + ": steps 0.." +
                            std::to_string(o.train.steps - 1) + ")";
  if (o.train.steps < 0 || o.snapshot_every < 0 || o.save_every < 0 || o.max_failed_saves < 0 ||
      o.log_every < 0) {
    return invalid_argument(
        "--steps, --snapshot-every, --save-every, --max-failed-saves and --log-every must not be "
        "negative");
  }
  if (o.snapshot_every == 0) {
    // Without snapshots the checkpointer is off: these flags would be silently ignored.
    for (const auto& [given, flag] :
         {std::pair{!o.ckpt_dir.empty(), "--ckpt-dir"}, std::pair{o.fresh, "--fresh"},
          std::pair{o.allow_other_run, "--allow-other-run"},
          std::pair{o.fail_saves_from >= 0, "--fail-saves-from"},
          std::pair{o.switch_step >= 0, "--switch-step"}}) {
      if (given) return invalid_argument(std::string(flag) + " needs --snapshot-every N");
    }
  }
  if (o.overwrite && !o.fresh) {
    return invalid_argument("--overwrite needs --fresh (it deletes what a fresh start refuses)");
  }
  if (o.fresh && o.allow_other_run) {
    return invalid_argument("--allow-other-run resumes; --fresh does not: give one of them");
  }
  if (o.kill_launcher && o.kill_rank < 0) {
    return invalid_argument("--kill-launcher needs --kill-rank and --kill-step");
  }
  if ((o.kill_rank >= 0) != (o.kill_step >= 0)) {
    return invalid_argument("--kill-rank and --kill-step go together");
  }
  if (o.kill_rank >= world_size) {
    return invalid_argument("--kill-rank " + std::to_string(o.kill_rank) +
                            " is not a rank of this " + std::to_string(world_size) + "-rank job");
  }
  if (o.kill_step >= o.train.steps) {
    return invalid_argument("--kill-step " + std::to_string(o.kill_step) + " is never reached" +
                            steps);
  }
  if ((o.switch_step >= 0) != !o.switch_plan_text.empty()) {
    return invalid_argument("--switch-step and --switch-plan go together");
  }
  if (o.switch_batch != 0 && o.switch_step < 0) {
    return invalid_argument("--switch-batch needs --switch-step");
  }
  if (o.switch_step >= o.train.steps) {
    return invalid_argument("--switch-step " + std::to_string(o.switch_step) + " is never reached" +
                            steps);
  }
  return Status();
}

static std::string step_json(const StepReport& r, const TrainPlan& plan,
                             const SnapshotReport& snap) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "{\"step\": %" PRId64
                ", \"loss\": %.9g, \"seconds\": %.6f, \"compute_s\": %.6f, "
                "\"tp_comm_s\": %.6f, \"pp_comm_s\": %.6f, \"dp_comm_s\": %.6f, "
                "\"dp_exposed_s\": %.6f, \"overlap_ratio\": %.4f, \"dp_bytes\": %zu, "
                "\"plan\": \"%s\", \"ckpt_stall_s\": %.6f, \"ckpt_bytes_full\": %zu, "
                "\"ckpt_bytes_written\": %zu, \"ckpt_delta\": %s, \"ckpt_chunks\": %zu, "
                "\"ckpt_chunks_changed\": %zu, \"ckpt_saved_step\": %" PRId64 "}",
                r.step, r.loss, r.seconds, r.compute_s, r.tp_comm_s, r.pp_comm_s, r.dp_comm_s,
                r.dp_exposed_s, r.overlap_ratio, r.dp_bytes, plan_text(plan).c_str(), snap.stall_s,
                snap.bytes_full, snap.bytes_written, snap.delta ? "true" : "false", snap.chunks,
                snap.chunks_changed, snap.saved_step);
  return buf;
}

int run_training(RunOptions o) {
  auto bootstrap = coll::Bootstrap::from_environment();
  if (!bootstrap.ok()) return fail(-1, bootstrap.status());
  const coll::LaunchInfo info = (*bootstrap)->info();
  const int rank = info.rank;
  if (Status s = check_run_options(o, info.size); !s.ok()) {
    std::fprintf(stderr, "tessera-train: %s\n", s.message().c_str());
    return 2;
  }
  if (!o.plan_given) {
    o.train.plan = TrainPlan{};
    o.train.plan.dp = info.size;
  }
  Session session(o, *bootstrap);
  // Saves that keep failing get their own exit code: the training may be fine, its state is not
  // on storage.
  auto stop = [&](const Status& failure) {
    const int code = fail(rank, failure);
    return session.saves_failing() ? kExitSavesFailing : code;
  };
  Status s = session.start();
  if (!s.ok()) return stop(s);
  std::FILE* metrics = nullptr;
  if (rank == 0 && !o.metrics_path.empty()) {
    // Append mode (O_APPEND): a restarted rank appends its own recovery line to the same file.
    if (info.generation == 0) {
      if (std::FILE* f = std::fopen(o.metrics_path.c_str(), "w")) std::fclose(f);
    }
    metrics = std::fopen(o.metrics_path.c_str(), "a");
    if (metrics == nullptr) return fail(rank, unavailable(o.metrics_path + ": cannot open"));
  }
  const double t0 = now_s();
  while (session.next_step() < o.train.steps) {
    const int64_t step = session.next_step();
    if (rank == o.kill_rank && step == o.kill_step && info.generation == 0) {
      std::printf("rank %d: fault injection: SIGKILL before step %" PRId64 "\n", rank, step + 1);
      std::fflush(stdout);
      // The kill time, for the survivors' detection figure (wall clock, microseconds).
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
      (*bootstrap)
          ->store()
          .set(kKillTimeKey, std::to_string(us) + ":" + std::to_string(step))
          .ignore();
      if (o.kill_launcher) ::kill(::getppid(), SIGKILL);  // the whole node: its other ranks too
      ::raise(SIGKILL);
    }
    auto r = session.step();
    if (!r.ok()) return stop(r.status());
    if (r->recovered) {  // every rank's own view: a survivor's and the restarted rank's differ
      std::printf("rank %d %s\n", rank, r->recovery_text.c_str());
      std::fflush(stdout);
      if (metrics) {
        std::fprintf(metrics, "%s\n", r->recovery_json.c_str());
        std::fflush(metrics);
      } else if (!o.metrics_path.empty() && info.generation > 0) {
        // The restarted rank appends its view (one short line, O_APPEND: not interleaved).
        if (std::FILE* f = std::fopen(o.metrics_path.c_str(), "a")) {
          std::fprintf(f, "%s\n", r->recovery_json.c_str());
          std::fclose(f);
        }
      }
    }
    if (r->switched && rank == 0) {
      std::printf("%s\n", r->switch_text.c_str());
      if (metrics) std::fprintf(metrics, "%s\n", r->switch_json.c_str());
      if (metrics) std::fflush(metrics);
    }
    if (rank == 0) {
      if (o.log_every > 0 && ((step + 1) % o.log_every == 0 || step + 1 == o.train.steps)) {
        print_progress(r->report, o, session.trainer().global_batch(), r->snapshot.stall_s,
                       now_s() - t0);
      }
      if (metrics) {
        std::fprintf(metrics, "%s\n",
                     step_json(r->report, session.trainer().plan(), r->snapshot).c_str());
        std::fflush(metrics);
      }
    }
  }
  auto checksum = session.trainer().gather_params(o.params_out);
  if (!checksum.ok()) return fail(rank, checksum.status());
  s = session.finish();
  if (!s.ok()) return stop(s);
  // Nobody tears its communicators down while a peer may still drain the last collective.
  s = session.trainer().world().barrier();
  if (!s.ok()) return fail(rank, s.with_context("final barrier"));
  if (rank == 0) {
    std::printf("final parameters checksum %016" PRIx64 " plan %s steps %" PRId64 " (%.2f s)\n",
                *checksum, plan_text(session.trainer().plan()).c_str(), o.train.steps,
                now_s() - t0);
    if (metrics) {
      std::fprintf(metrics, "{\"final_checksum\": \"%016" PRIx64 "\", \"seconds\": %.3f}\n",
                   *checksum, now_s() - t0);
      std::fclose(metrics);
    }
  }
  return 0;
}

}  // namespace tessera::trainer
