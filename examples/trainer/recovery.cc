#include "recovery.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "replan.h"
#include "tessera/checkpoint/comm_rank_group.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/common/log.h"

namespace tessera::trainer {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr std::chrono::seconds kRestartWait{60};

// A step's error that a peer's death (or the job's re-forming) explains: the communicators'
// codes. The trainer's own refusals (a bad state, a programming error) end the run instead of
// waiting for a restart that never comes.
bool peer_failure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal:
    case StatusCode::kUnimplemented:
    case StatusCode::kNotFound: return false;
    default: return true;
  }
}

}  // namespace

// Store key holding the plan after a switch (for a rank restarted later).
const char* const kPlanKey = "tessera-train/plan";

// Store key where a rank that kills itself (fault injection) leaves "<wall-clock us>:<step>".
const char* const kKillTimeKey = "tessera-train/kill_time_us";

Session::Session(RunOptions options, std::shared_ptr<coll::Bootstrap> bootstrap)
    : o_(std::move(options)),
      bootstrap_(std::move(bootstrap)),
      restarted_(bootstrap_->info().generation > 0) {}

Session::~Session() {
  if (ckpt_) ckpt_->wait().status().ignore();
  ckpt_.reset();
  trainer_.reset();
}

std::string Session::rank_text() const {
  return "rank " + std::to_string(bootstrap_->info().rank);
}

std::string Session::ckpt_dir() const {
  return o_.ckpt_dir.empty() ? "tessera-train-ckpt" : o_.ckpt_dir;
}

// Rank 0 locks the directory and, in generation 0, decides how the job starts (ckpt_dir.h); every
// rank learns the decision through the bootstrap, so that all start from the same step or all
// fail. A restarted rank does not decide: it restores (rank 0 takes the lock again, the kernel
// dropped its predecessor's).
Result<int64_t> Session::claim_ckpt_dir() {
  const int rank = bootstrap_->info().rank;
  const bool first_generation = bootstrap_->info().generation == 0;
  std::string verdict;  // rank 0: "resume <step>", "fresh", or "error <message>"
  if (rank == 0) {
    auto lock = DirLock::acquire(ckpt_dir());
    if (!lock.ok() && !first_generation) return lock.status();
    if (!lock.ok()) {
      verdict = "error " + lock.status().message();
    } else {
      lock_ = std::move(lock).value();
    }
  }
  if (!first_generation) return int64_t(-1);
  if (rank == 0 && lock_) {
    const StartPolicy policy{o_.fresh, o_.overwrite, o_.allow_other_run, o_.train.steps,
                             run_identity(o_.train)};
    auto d = decide_start(ckpt_dir(), policy);
    if (!d.ok()) {
      verdict = "error " + d.status().message();
    } else {
      std::printf("%s\n", d->note.c_str());
      std::fflush(stdout);
      verdict = d->resume_step >= 0 ? "resume " + std::to_string(d->resume_step) : "fresh";
    }
  }
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> all,
                       bootstrap_->allgather("tessera-train/ckpt-dir", verdict));
  const std::string& v = all.at(0);
  if (v.rfind("error ", 0) == 0) {
    // Every rank says why: the launcher may stop rank 0 before it prints its own message.
    return failed_precondition(rank == 0 ? v.substr(6)
                                         : "rank 0 refused --ckpt-dir: " + v.substr(6));
  }
  if (v.rfind("resume ", 0) == 0) return int64_t(std::stoll(v.substr(7)));
  return int64_t(-1);
}

// Loads the committed step `step` (every rank; resharded when the plan differs from the saved one).
Status Session::resume(int64_t step) {
  ckpt::LoadOptions options;
  options.step = step;
  auto r = ckpt_->load(options);
  if (!r.ok()) {
    return r.status().with_context("resuming from " + ckpt_dir() + "/" + ckpt::step_dir_name(step) +
                                   " (--fresh --overwrite starts over)");
  }
  TSR_RETURN_IF_ERROR(trainer_->state_loaded(step));
  next_step_ = step;
  last_snapshot_step_ = step;  // committed already: not saved again
  return Status();
}

Status Session::start() {
  const double t0 = now_s(), w0 = wall_s();
  int64_t resume_step = -1;
  if (o_.snapshot_every > 0) {
    TSR_ASSIGN_OR_RETURN(resume_step, claim_ckpt_dir());
  }
  if (resume_step >= 0 && o_.switch_step >= 0 && resume_step >= o_.switch_step) {
    // The checkpoint is past the switch: run the plan and batch the job switched to.
    TSR_ASSIGN_OR_RETURN(o_.train.plan, parse_plan(o_.switch_plan_text));
    if (o_.switch_batch > 0) o_.train.global_batch = o_.switch_batch;
    switched_ = true;
    if (bootstrap_->info().rank == 0) {  // for a rank restarted later
      TSR_RETURN_IF_ERROR(bootstrap_->store().set(
          kPlanKey, o_.switch_plan_text + ";" + std::to_string(o_.train.global_batch)));
    }
  }
  if (bootstrap_->info().generation > 0 && o_.switch_step >= 0) {
    // Restarted after the plan switch: join the survivors in the plan they run now.
    auto plan = bootstrap_->store().get(kPlanKey, std::chrono::milliseconds(100));
    if (plan.ok()) {  // "<plan>;<global batch>"
      const size_t semi = plan->find(';');
      TSR_ASSIGN_OR_RETURN(o_.train.plan, parse_plan(plan->substr(0, semi)));
      if (semi != std::string::npos) o_.train.global_batch = std::stoll(plan->substr(semi + 1));
      switched_ = true;
    }
  }
  TSR_ASSIGN_OR_RETURN(trainer_, create_session_trainer(o_.train, bootstrap_));
  if (o_.snapshot_every <= 0) return Status();
  TSR_RETURN_IF_ERROR(make_checkpointer());
  const int generation = bootstrap_->info().generation;
  if (generation == 0) {
    if (resume_step >= 0) return resume(resume_step);
    // Complete before step 1, so that a fault at any later point finds a snapshot somewhere.
    SnapshotReport unused;
    TSR_RETURN_IF_ERROR(snapshot(0, &unused));
    return collect_save();
  }
  // A restarted rank: the survivors are re-forming with us; take our state from the buddy.
  const double reformed = now_s();
  TSR_ASSIGN_OR_RETURN(ckpt::RestoreResult r, restore());
  recovery_.pending = true;
  recovery_.restored_step = r.step;
  recovery_.from_peer = r.from_peer;
  recovery_.transfer_s = now_s() - reformed;
  recovery_.reform_s = reformed - t0;
  recovery_.restore_end = now_s();
  recovery_.cause = "restarted as generation " + std::to_string(generation);
  auto kill = bootstrap_->store().get(kKillTimeKey, std::chrono::milliseconds(100));
  if (kill.ok()) {
    recovery_.detect_s = w0 - double(std::stoll(*kill)) * 1e-6;  // kill -> this process started
    // "<us>:<step>": the recovery is complete once the step the kill interrupted is done again.
    const size_t colon = kill->find(':');
    if (colon != std::string::npos) recovery_.failed_step = std::stoll(kill->substr(colon + 1));
  }
  next_step_ = r.step;
  last_snapshot_step_ = r.step;  // the same on every rank: later snapshots stay collective
  return Status();
}

Result<ckpt::RestoreResult> Session::restore() {
  auto r = ckpt_->restore();
  if (r.ok()) {
    TSR_RETURN_IF_ERROR(trainer_->state_loaded(r->step));
    return r;
  }
  if (r.status().code() != StatusCode::kNotFound) return r;
  // No snapshot survived anywhere (every rank sees the same storage): start over from step 0,
  // which the seed reproduces bit for bit.
  TSR_LOG(kWarn, "trainer") << rank_text() << ": " << r.status().message()
                            << "; restarting from step 0";
  TSR_RETURN_IF_ERROR(trainer_->reset_state());
  ckpt::RestoreResult fresh;
  fresh.step = 0;
  fresh.detail = "no snapshot: restarted from the initial state";
  return fresh;
}

Status Session::make_checkpointer() {
  // The checkpointer's own communicator: its background thread sends the replicas.
  TSR_ASSIGN_OR_RETURN(ckpt_comm_, coll::Communicator::create(bootstrap_, trainer_->device()));
  if (ckpt_) {
    TSR_RETURN_IF_ERROR(ckpt_->rebind(std::make_shared<ckpt::CommRankGroup>(ckpt_comm_)));
    return register_state();  // the rebuilt trainer may hold its state in new buffers
  }
  ckpt::CheckpointOptions c;
  c.dir = ckpt_dir();
  c.peer_replica = true;
  c.full_every = o_.save_every > 0 ? int(o_.save_every) : 4;
  c.chunk_bytes = 64 << 10;  // small model: fine chunks make the deltas small
  c.fsync = false;           // a demo/test directory; the commit protocol still holds
  c.keep_last = 2;
  c.layout = plan_text(trainer_->plan());
  c.device = trainer_->device();  // device tensors are copied on its streams
  c.metadata[kRunIdentityKey] = run_identity(o_.train);
  if (o_.fail_saves_from >= 0) {
    // Fault injection: the save fails on every rank once its shard is written, as a full disk
    // would fail it. The hook runs on the persist thread; the Checkpointer dies before *this.
    c.fault_hook = [this](ckpt::FaultPoint point) {
      if (point != ckpt::FaultPoint::kAfterShards || saving_step_.load() < o_.fail_saves_from) {
        return Status();
      }
      return resource_exhausted("fault injection (--fail-saves-from " +
                                std::to_string(o_.fail_saves_from) + "): No space left on device");
    };
  }
  TSR_ASSIGN_OR_RETURN(
      ckpt_, ckpt::Checkpointer::create(c, std::make_shared<ckpt::CommRankGroup>(ckpt_comm_)));
  return register_state();
}

Status Session::register_state() {
  return trainer_->register_state(ckpt_->registry());
}

// The failed-save policy: a failed save is a warning (the snapshot in memory and the buddy's copy
// still cover a lost rank), o_.max_failed_saves of them in a row stop the run. Every rank sees the
// same outcome (the commit is collective), so every rank stops at the same save.
Status Session::collect_save() {
  if (!save_pending_) return Status();
  save_pending_ = false;
  TSR_ASSIGN_OR_RETURN(ckpt::SaveResult r, ckpt_->wait());
  last_save_ = r;
  if (r.status.ok()) {
    failed_saves_ = 0;
    return Status();
  }
  ++failed_saves_;
  TSR_LOG(kWarn, "trainer") << rank_text() << ": save of step " << r.step << " to " << ckpt_dir()
                            << " failed (" << failed_saves_ << " in a row): " << r.status.message();
  if (o_.max_failed_saves > 0 && failed_saves_ >= o_.max_failed_saves) {
    saves_failing_ = true;
    return r.status.with_context(std::to_string(failed_saves_) + " saves to " + ckpt_dir() +
                                 " failed in a row (--max-failed-saves " +
                                 std::to_string(o_.max_failed_saves) + "); the last, of step " +
                                 std::to_string(r.step));
  }
  return Status();
}

Status Session::snapshot(int64_t step, SnapshotReport* out) {
  // Stall: what the training thread waits for, the previous save's end (BusyPolicy::kWait) and
  // the snapshot copy.
  const double t0 = now_s();
  TSR_RETURN_IF_ERROR(collect_save());  // the previous save ran in the background meanwhile
  if (last_save_) {
    out->bytes_full = last_save_->bytes_full;
    out->bytes_written = last_save_->bytes_written;
    out->delta = last_save_->delta;
    out->chunks = last_save_->chunks;
    out->chunks_changed = last_save_->chunks_changed;
    out->saved_step = last_save_->step;
  }
  saving_step_.store(step);
  TSR_RETURN_IF_ERROR(ckpt_->save_async(step).status());
  save_pending_ = true;
  out->taken = true;
  out->stall_s = now_s() - t0;
  last_snapshot_step_ = step;
  return Status();
}

Result<SessionStep> Session::step() {
  SessionStep out;
  if (o_.switch_step >= 0 && next_step_ == o_.switch_step && !switched_) {
    TSR_RETURN_IF_ERROR(switch_plan(&out));
  }
  for (;;) {
    const int64_t step = next_step_;
    auto r = trainer_->train_step(step);
    if (r.ok()) {
      out.report = *r;
      break;
    }
    if (!ckpt_ || !peer_failure(r.status())) return r.status();
    recovery_.failed_step = std::max(recovery_.failed_step, step);
    TSR_RETURN_IF_ERROR(recover(r.status()));
  }
  ++next_step_;
  if (recovery_.pending && next_step_ > recovery_.failed_step) {
    // The first step the fault had interrupted is done again: the recovery is complete.
    recovery_.pending = false;
    const double replay_s = now_s() - recovery_.restore_end;
    out.recovered = true;
    char text[2048];  // the cause can be long (a node loss names the re-plan)
    std::snprintf(text, sizeof text,
                  "recovered: %s; restored step %" PRId64 " (%s), replayed through step %" PRId64
                  "; detection %.3f s, re-formation %.3f s, state transfer %.3f s, replay %.3f "
                  "s, total %.3f s",
                  recovery_.cause.c_str(), recovery_.restored_step,
                  recovery_.from_peer ? "from memory" : "from storage", next_step_,
                  recovery_.detect_s, recovery_.reform_s, recovery_.transfer_s, replay_s,
                  recovery_.detect_s + recovery_.reform_s + recovery_.transfer_s + replay_s);
    out.recovery_text = text;
    std::snprintf(text, sizeof text,
                  "{\"recovery\": {\"rank\": %d, \"restarted\": %s, \"restored_step\": %" PRId64
                  ", \"resumed_step\": %" PRId64
                  ", \"from_memory\": %s, \"detection_s\": %.6f, \"reformation_s\": %.6f, "
                  "\"transfer_s\": %.6f, \"replay_s\": %.6f}}",
                  bootstrap_->info().rank, restarted_ ? "true" : "false", recovery_.restored_step,
                  next_step_, recovery_.from_peer ? "true" : "false", recovery_.detect_s,
                  recovery_.reform_s, recovery_.transfer_s, replay_s);
    out.recovery_json = text;
  }
  // Replayed steps are not saved again: their snapshot exists and holds the same bits.
  if (ckpt_ && next_step_ % o_.snapshot_every == 0 && next_step_ < o_.train.steps &&
      next_step_ > last_snapshot_step_) {
    TSR_RETURN_IF_ERROR(snapshot(next_step_, &out.snapshot));
  }
  return out;
}

Status Session::recover(const Status& failure) {
  const double detected = now_s(), detected_wall = wall_s();
  TSR_LOG(kWarn, "trainer") << rank_text() << ": step failed (" << failure.message()
                            << "); re-forming the communicators";
  trainer_->abort_communication(failure.message());
  if (ckpt_comm_) ckpt_comm_->abort(failure.message());
  ckpt_->wait().status().ignore();  // a save in flight fails against the dead peer: not counted
  save_pending_ = false;
  ckpt_comm_.reset();
  auto generation = bootstrap_->next_generation(kRestartWait);
  if (!generation.ok()) {
    return generation.status().with_context(rank_text() + ": after '" + failure.message() +
                                            "': waiting for the restarted rank");
  }
  // The trainer may free the registered buffers while it rebuilds: nothing may read them until
  // they are registered again (make_checkpointer).
  ckpt_->registry().clear();
  if (bootstrap_->shrunk()) return reform_on_fewer_ranks(failure, detected, detected_wall);
  TSR_RETURN_IF_ERROR(trainer_->rebuild_communication(bootstrap_));
  TSR_RETURN_IF_ERROR(make_checkpointer());  // a new communicator, rebound
  const double reformed = now_s();
  TSR_ASSIGN_OR_RETURN(ckpt::RestoreResult r, restore());
  recovery_.pending = true;
  recovery_.restored_step = r.step;
  recovery_.from_peer = r.from_peer;
  recovery_.reform_s = reformed - detected;
  recovery_.transfer_s = now_s() - reformed;
  recovery_.restore_end = now_s();
  recovery_.cause = failure.message();
  recovery_.detect_s = 0;
  auto kill = bootstrap_->store().get(kKillTimeKey, std::chrono::milliseconds(100));
  if (kill.ok()) recovery_.detect_s = detected_wall - double(std::stoll(*kill)) * 1e-6;
  next_step_ = r.step;
  last_snapshot_step_ = r.step;  // the same on every rank: later snapshots stay collective
  return Status();
}

// A node was lost and the launcher re-formed the job on the survivors (Bootstrap::shrunk): a plan
// for the smaller world (replan.h), a trainer for it, the checkpointer moved onto the survivors
// (rebind_shrunk), and the newest snapshot resharded in memory from the survivors' snapshots and
// the replicas they hold of the lost ranks; storage when a lost rank's state is in no survivor's
// memory (DATA_LOSS). Every survivor takes the same path (the checkpointer's errors are
// collective).
Status Session::reform_on_fewer_ranks(const Status& failure, double detected,
                                      double detected_wall) {
  const int world = bootstrap_->info().size;
  const std::string where =
      rank_text() + ": re-forming on " + std::to_string(world) + " ranks after a node loss";
  TSR_ASSIGN_OR_RETURN(Replan replan, replan_for_world(o_.train, world));
  const TrainPlan before = trainer_->plan();
  trainer_.reset();  // its communicators are aborted; the state lives in the checkpointer
  TrainOptions t = o_.train;
  t.plan = replan.plan;
  auto fresh = create_session_trainer(t, bootstrap_);
  if (!fresh.ok()) return fresh.status().with_context(where);
  trainer_ = std::move(fresh).value();
  TSR_ASSIGN_OR_RETURN(ckpt_comm_, coll::Communicator::create(bootstrap_, trainer_->device()));
  TSR_RETURN_IF_ERROR(ckpt_
                          ->rebind_shrunk(std::make_shared<ckpt::CommRankGroup>(ckpt_comm_),
                                          bootstrap_->old_ranks())
                          .with_context(where));
  TSR_RETURN_IF_ERROR(register_state().with_context(where));
  const double reformed = now_s();
  int64_t step = -1;
  bool from_memory = true;
  auto moved = ckpt_->reshard_from_memory();
  if (moved.ok()) {
    step = moved->step;
  } else if (moved.status().code() == StatusCode::kDataLoss) {
    TSR_LOG(kWarn, "trainer") << rank_text() << ": " << moved.status().message()
                              << "; loading the latest checkpoint from storage";
    auto loaded = ckpt_->load();
    if (!loaded.ok()) return loaded.status().with_context(where);
    step = loaded->step;
    from_memory = false;
  } else {
    return moved.status().with_context(where);
  }
  TSR_RETURN_IF_ERROR(trainer_->state_loaded(step).with_context(where));
  TSR_RETURN_IF_ERROR(ckpt_->set_layout(plan_text(replan.plan)).with_context(where));
  o_.train.plan = replan.plan;
  recovery_.pending = true;
  recovery_.restored_step = step;
  recovery_.from_peer = from_memory;
  recovery_.reform_s = reformed - detected;
  recovery_.transfer_s = now_s() - reformed;
  recovery_.restore_end = now_s();
  recovery_.cause = failure.message() + "; node lost: re-formed on " + std::to_string(world) +
                    " ranks, " + plan_text(before) + " -> " + plan_text(replan.plan) + " (" +
                    replan.why + ")";
  recovery_.detect_s = 0;
  auto kill = bootstrap_->store().get(kKillTimeKey, std::chrono::milliseconds(100));
  if (kill.ok()) recovery_.detect_s = detected_wall - double(std::stoll(*kill)) * 1e-6;
  next_step_ = step;
  last_snapshot_step_ = step;
  return Status();
}

Status Session::switch_plan(SessionStep* out) {
  const double t0 = now_s();
  const std::string where =
      rank_text() + ": plan switch before step " + std::to_string(next_step_ + 1);
  TSR_ASSIGN_OR_RETURN(TrainPlan next, parse_plan(o_.switch_plan_text));
  const TrainPlan before = trainer_->plan();
  if (!ckpt_) {
    return failed_precondition(where +
                               ": needs --snapshot-every (state moves by the checkpointer)");
  }
  if (before.zero != 0 || next.zero != 0) {
    return unimplemented(where +
                         ": plans with ZeRO are not switched (the shards' names and sizes differ)");
  }
  const int64_t batch = o_.switch_batch > 0 ? o_.switch_batch : o_.train.global_batch;
  TSR_RETURN_IF_ERROR(
      check_trainer_plan(o_.train, next, batch, bootstrap_->info().size).with_context(where));
  // A snapshot of this very step, complete, is what reshard_from_memory moves.
  if (last_snapshot_step_ != next_step_) {
    SnapshotReport unused;
    TSR_RETURN_IF_ERROR(snapshot(next_step_, &unused).with_context(where));
  }
  TSR_RETURN_IF_ERROR(collect_save().with_context(where));
  const double saved =
      now_s();  // before: the save in flight finishing (its own time, not the move's)
  TrainOptions t = o_.train;
  t.plan = next;
  t.global_batch = batch;
  // Collective: the new layout's communicators.
  auto fresh = create_session_trainer(t, bootstrap_);
  if (!fresh.ok()) return fresh.status().with_context(where);
  std::unique_ptr<SessionTrainer> old = std::move(trainer_);
  trainer_ = std::move(fresh).value();
  TSR_RETURN_IF_ERROR(register_state().with_context(where));
  auto moved = ckpt_->reshard_from_memory();
  if (!moved.ok()) return moved.status().with_context(where);
  if (moved->step != next_step_) {  // the snapshot of this step was completed just above
    return internal_error(where + ": the state moved is of step " + std::to_string(moved->step));
  }
  TSR_RETURN_IF_ERROR(trainer_->state_loaded(moved->step).with_context(where));
  // The next manifests record the plan the state is now laid out in.
  TSR_RETURN_IF_ERROR(ckpt_->set_layout(plan_text(trainer_->plan())).with_context(where));
  old.reset();
  o_.train.plan = next;
  o_.train.global_batch = batch;
  if (bootstrap_->info().rank == 0) {
    TSR_RETURN_IF_ERROR(
        bootstrap_->store().set(kPlanKey, o_.switch_plan_text + ";" + std::to_string(batch)));
  }
  switched_ = true;
  out->switched = true;
  const double end = now_s();
  char text[512];
  std::snprintf(text, sizeof text,
                "plan switch before step %" PRId64
                ": %s -> %s; state moved in memory "
                "(reshard_from_memory) in %.3f s, after %.3f s waiting for the snapshot's save",
                next_step_ + 1, plan_text(before).c_str(), plan_text(next).c_str(), end - saved,
                saved - t0);
  out->switch_text = text;
  std::snprintf(text, sizeof text,
                "{\"switch\": {\"step\": %" PRId64
                ", \"from\": \"%s\", \"to\": \"%s\", \"seconds\": %.6f, \"move_s\": %.6f, "
                "\"save_wait_s\": %.6f}}",
                next_step_, plan_text(before).c_str(), plan_text(next).c_str(), end - t0,
                end - saved, saved - t0);
  out->switch_json = text;
  return Status();
}

Status Session::finish() {
  if (!ckpt_) return Status();
  if (next_step_ > last_snapshot_step_) {  // the final state, for a later run to resume from
    SnapshotReport unused;
    TSR_RETURN_IF_ERROR(snapshot(next_step_, &unused));
  }
  TSR_RETURN_IF_ERROR(collect_save());
  if (last_save_ && last_save_->step == next_step_ && !last_save_->status.ok()) {
    saves_failing_ = true;
    return last_save_->status.with_context("the final save (step " + std::to_string(next_step_) +
                                           ") to " + ckpt_dir() + " failed");
  }
  return Status();
}

}  // namespace tessera::trainer
