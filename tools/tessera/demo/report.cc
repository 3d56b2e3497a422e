// The demo's summary and loss curve, from the trainer's metrics (one JSON object per line).
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "demo.h"

namespace tessera::tools::demo {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string bytes_text(double b) {
  if (b >= 1 << 20) return fmt("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return fmt("%.1f KiB", b / (1 << 10));
  return fmt("%.0f B", b);
}

}  // namespace

Result<std::string> summarize(const std::string& metrics_path, const DemoPlan& plan,
                              const std::string& loss_svg_path) {
  std::ifstream f(metrics_path);
  if (!f) return not_found(metrics_path + ": no metrics (did the trainer start?)");
  std::map<int64_t, double> loss;
  int64_t executed = 0, snapshots = 0, full_saves = 0, delta_saves = 0, fault_step = -1;
  double sum_step = 0, sum_compute = 0, sum_tp = 0, sum_pp = 0, sum_dp = 0, sum_exposed = 0;
  double overlap = 0, stall = 0, full_bytes = 0, delta_bytes = 0, wall = 0;
  size_t delta_chunks = 0, delta_changed = 0;
  std::set<int64_t> saved_steps;
  nlohmann::json sw;
  std::vector<nlohmann::json> recoveries;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("recovery")) {
      recoveries.push_back(j["recovery"]);
      continue;
    }
    if (j.contains("switch")) {
      sw = j["switch"];
      continue;
    }
    if (j.contains("final_checksum")) {
      wall = j.value("seconds", 0.0);
      continue;
    }
    if (!j.contains("step")) continue;
    ++executed;
    loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    sum_step += j.value("seconds", 0.0);
    sum_compute += j.value("compute_s", 0.0);
    sum_tp += j.value("tp_comm_s", 0.0);
    sum_pp += j.value("pp_comm_s", 0.0);
    sum_dp += j.value("dp_comm_s", 0.0);
    sum_exposed += j.value("dp_exposed_s", 0.0);
    overlap += j.value("overlap_ratio", 1.0);
    const double st = j.value("ckpt_stall_s", 0.0);
    if (st > 0) {
      ++snapshots;
      stall += st;
    }
    // Each snapshot reports the previous save (it ran in the background meanwhile).
    const int64_t saved = j.value("ckpt_saved_step", int64_t(-1));
    if (st > 0 && saved >= 0 && saved_steps.insert(saved).second) {
      const double written = double(j.value("ckpt_bytes_written", size_t(0)));
      if (j.value("ckpt_delta", false)) {
        ++delta_saves;
        delta_bytes += written;
        delta_chunks += j.value("ckpt_chunks", size_t(0));
        delta_changed += j.value("ckpt_chunks_changed", size_t(0));
      } else {
        ++full_saves;
        full_bytes += written;
      }
    }
  }
  for (const nlohmann::json& rec : recoveries) {  // a survivor resumed after the failed step
    if (!rec.value("restarted", false)) fault_step = rec.value("resumed_step", int64_t(0)) - 1;
  }
  const int64_t switch_step = sw.is_object() ? sw.value("step", int64_t(-1)) : -1;
  std::ofstream svg(loss_svg_path);
  if (!(svg << loss_svg(loss, switch_step, fault_step))) {
    return unavailable(loss_svg_path + ": cannot write");
  }
  const double n = double(std::max<int64_t>(1, executed));
  std::ostringstream o;
  o << "plan      phase 1: " << trainer::plan_text(plan.first)
    << "\n          why: " << plan.why_first << "\n          phase 2 (from step "
    << plan.switch_step + 1 << ", batch " << plan.second_batch
    << "): " << trainer::plan_text(plan.second) << "\n          why: " << plan.why_second << "\n";
  o << "steps     " << loss.size() << " (" << executed << " executed, replay included), "
    << fmt("%.1f s", wall) << " of training; loss "
    << fmt("%.4f", loss.empty() ? 0 : loss.begin()->second) << " -> "
    << fmt("%.4f", loss.empty() ? 0 : loss.rbegin()->second) << "\n";
  o << "step time " << fmt("%.2f ms", 1e3 * sum_step / n) << " (rank 0, mean) = compute "
    << fmt("%.2f", 1e3 * sum_compute / n) << " + TP " << fmt("%.2f", 1e3 * sum_tp / n) << " + PP "
    << fmt("%.2f", 1e3 * sum_pp / n) << " + exposed DP " << fmt("%.2f ms", 1e3 * sum_exposed / n)
    << "\noverlap   DP gradient traffic " << fmt("%.2f ms", 1e3 * sum_dp / n)
    << " per step on the communication stream, " << fmt("%.0f%%", 100 * overlap / n)
    << " hidden behind the backward pass (mean overlap ratio)\n";
  o << "ckpt      " << snapshots << " snapshots, stall " << fmt("%.2f ms", 1e3 * stall)
    << " in all (" << fmt("%.2f ms", snapshots ? 1e3 * stall / double(snapshots) : 0.0)
    << " each: the wait for the previous save plus the snapshot copy); rank 0 stored " << full_saves
    << " full saves (" << bytes_text(full_bytes) << ") and " << delta_saves << " deltas ("
    << bytes_text(delta_bytes) << ", " << delta_changed << " of " << delta_chunks
    << " chunks changed: Adam moves every parameter each step)\n";
  for (const nlohmann::json& rec : recoveries) {
    const double d = rec.value("detection_s", 0.0), r = rec.value("reformation_s", 0.0),
                 t = rec.value("transfer_s", 0.0), p = rec.value("replay_s", 0.0);
    const bool restarted = rec.value("restarted", false);
    o << "recovery  rank " << rec.value("rank", -1)
      << (restarted ? " (restarted): kill -> its first completed step: "
                    : " (survivor): kill -> first completed step after it: ")
      << fmt("%.3f s", d + r + t + p) << " = "
      << (restarted ? "detection + restart " : "detection ") << fmt("%.3f", d) << " + re-formation "
      << fmt("%.3f", r) << " + state transfer " << fmt("%.3f", t) << " + replay "
      << fmt("%.3f s", p) << " (restored step " << rec.value("restored_step", int64_t(-1)) << " "
      << (rec.value("from_memory", false) ? "from memory" : "from storage") << ")\n";
  }
  if (sw.is_object()) {
    o << "switch    " << sw.value("from", std::string()) << " -> " << sw.value("to", std::string())
      << " before step " << switch_step + 1 << ", state moved in memory in "
      << fmt("%.3f s", sw.value("move_s", sw.value("seconds", 0.0)));
    if (sw.contains("save_wait_s")) {
      o << fmt(" (after %.3f s waiting for the snapshot's save to finish)",
               sw.value("save_wait_s", 0.0));
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace tessera::tools::demo
