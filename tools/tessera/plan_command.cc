// `tessera plan`: the fastest parallel plans for a model on a cluster, with the contract of
// issue 6 (docs/PLANNER.md). Exit 0 with plans; 2 and one line on stderr for bad input or when
// nothing fits (then the line gives the smallest requirement, the budget and that plan).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "calibrate.h"
#include "commands.h"
#include "format.h"
#include "tessera/common/untrusted.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/explain.h"
#include "tessera/plan/replan.h"
#include "tessera/plan/request.h"
#include "tessera/plan/search.h"
#include "tessera/plan/timeline.h"

namespace tessera::tools {
namespace {

constexpr double kGiB = 1073741824.0;

struct PlanOptions {
  std::string model, cluster, devices, global_batch, seq_len, dtype = "bf16", fix, top = "5";
  std::string timeline, phases, attention = "flash", zero3 = "flat";
  std::string device, calibration, calibration_out = "tessera-calibration.json";
  bool json = false, explain = false, calibrate = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tessera plan: %s\n", message.c_str());
  throw CLI::RuntimeError(2);
}

template <typename T>
T check(Result<T> result) {
  if (!result.ok()) fail(result.status().message());
  return std::move(result).value();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string plans_table(const std::vector<plan::Estimate>& plans) {
  Table table({"#", "TP", "PP", "DP", "CP", "EP", "VP", "MBS", "ZERO", "RECOMPUTE", "SP", "STEP s",
               "TOKENS/s", "TFLOP/s", "MFU", "MEM GiB"});
  for (size_t i = 0; i < plans.size(); ++i) {
    const plan::Estimate& e = plans[i];
    const plan::Plan& p = e.plan;
    table.add(
        {std::to_string(i + 1), std::to_string(p.tp), std::to_string(p.pp), std::to_string(p.dp),
         std::to_string(p.cp), std::to_string(p.ep), std::to_string(p.vp), std::to_string(p.mbs),
         std::to_string(p.zero), std::string(plan::recompute_name(p.recompute)), p.sp ? "1" : "0",
         fixed(e.step_time_s, 3), fixed(e.tokens_per_s, 0), fixed(e.model_tflops_per_device, 1),
         fixed(100 * e.mfu, 1) + "%", fixed(e.memory.total() / kGiB, 1)});
  }
  return table.to_string();
}

// --calibrate: measure, write the file, print what was measured.
void run_calibrate(const PlanOptions& o) {
  const plan::Calibration c = check(measure_calibration(o.device, o.dtype));
  std::ofstream file(o.calibration_out);
  if (!(file << plan::calibration_to_json(c))) {
    fail(o.calibration_out + ": cannot write the calibration file");
  }
  if (o.json) {
    if (o.model.empty()) std::cout << plan::calibration_to_json(c);  // one JSON document only
    return;
  }
  std::cout << "calibrated " << c.backend << " (" << c.device << ", " << c.devices
            << " device(s)) -> " << o.calibration_out << "\n";
  for (const auto& p : c.gemm) {
    std::cout << "  gemm " << c.dtype << " " << p.n << "^3: " << fixed(p.tflops * 1e3, 1)
              << " GFLOP/s\n";
  }
  std::cout << "  fit: peak " << fixed(c.peak_tflops * 1e3, 1) << " GFLOP/s, knee "
            << fixed(c.knee, 1) << "\n  device-to-device copy: " << fixed(c.d2d_copy_gbps, 1)
            << " GB/s\n";
}

void run_plan(const PlanOptions& o) {
  if (o.calibrate) {
    run_calibrate(o);
    if (o.model.empty()) return;
  }
  plan::PlanRequest request{.model = o.model,
                            .cluster = o.cluster,
                            .devices = o.devices,
                            .global_batch = o.global_batch,
                            .seq_len = o.seq_len,
                            .dtype = o.dtype,
                            .fix = o.fix,
                            .top = o.top,
                            .phases = o.phases,
                            .attention = o.attention,
                            .zero3 = o.zero3,
                            .calibration = o.calibrate ? o.calibration_out : o.calibration};
  const plan::PlanRun run = check(plan::run_plan_request(request));
  if (run.phases) {
    std::cout << (o.json ? plan::plan_run_json(run) : plan::phases_text(*run.phases));
    return;
  }
  const ir::Model& model = run.model;
  const plan::ClusterSpec& cluster = run.cluster;
  const plan::Workload& w = run.workload;
  const plan::SearchResult& r = run.result;
  const plan::Dtype dtype = run.dtype;
  if (!o.timeline.empty()) {
    const plan::Estimate& best = r.plans.front();
    const std::string svg = plan::timeline_svg(best, plan::simulate_pipeline(best),
                                               model.name + ": " + plan::plan_summary(best.plan));
    std::ofstream file(o.timeline);
    if (!(file << svg)) fail(o.timeline + ": cannot write the timeline");
  }
  if (o.json) {
    std::cout << plan::plan_run_json(run);
    return;
  }
  const plan::ClusterSpec& c = cluster;
  // Names come from files: printable() keeps their control characters off the terminal.
  std::cout << "model    " << printable(model.name) << ": "
            << fixed(ir::model_params(model) / 1e9, 2) << " B parameters, " << model.num_blocks
            << " layers, hidden " << model.hidden << ", " << model.heads << " heads ("
            << model.kv_heads << " kv), vocab " << model.vocab
            << (model.experts ? ", " + std::to_string(model.experts) + " experts" : "") << "\n";
  // What the loader read but left out of the cost (ignored keys, approximations).
  for (const std::string& note : model.notes) std::cout << "note     " << printable(note) << "\n";
  std::cout << "cluster  " << printable(c.name) << ": " << c.hosts << " x " << c.devices_per_host
            << " " << printable(c.device.name) << " (" << fixed(c.device.memory_gib, 0) << " GiB, "
            << fixed(c.device.peak_flops(dtype) / 1e12, 0) << " TFLOP/s " << o.dtype << "), "
            << printable(c.intra_host.link) << " " << fixed(c.intra_host.busbw_gbps, 0)
            << " GB/s busbw, " << c.inter_host.nics_per_host << " x "
            << printable(c.inter_host.link) << " " << fixed(c.inter_host.busbw_gbps, 1) << " GB/s\n"
            << "step     " << w.global_batch << " sequences x " << w.seq_len << " tokens\n"
            << "search   " << r.candidates << " candidates, " << r.evaluated << " priced, "
            << r.feasible << " fit in " << fixed(r.plans.front().memory_budget_bytes / kGiB, 1)
            << " GiB, " << fixed(r.elapsed_ms, 1) << " ms\n\n"
            << plans_table(r.plans);
  if (o.explain) {
    std::cout << plan::explanation_text(
        plan::explain_best(model, cluster, w, r.plans, run.options));
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Find the fastest data/tensor/pipeline/context/expert-parallel plan that fits");
  cmd->add_option(
      "--model", o->model, "Model preset (" + [] {
        std::string names;
        for (const auto& n : ir::model_preset_names()) names += (names.empty() ? "" : ", ") + n;
        return names;
      }() + ") or a config.json / layer-list file");
  cmd->add_option("--cluster", o->cluster,
                  "Cluster preset (dgx-a100-80gb, dgx-h100, ascend-910b-8, mi250x-8) or JSON file");
  cmd->add_option("--devices", o->devices, "Devices to plan for (resizes the cluster)");
  cmd->add_option("--global-batch", o->global_batch, "Sequences per step");
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence");
  cmd->add_option("--dtype", o->dtype,
                  "bf16 (default) or fp16; --calibrate alone also takes f32 (its GEMMs then "
                  "price a 16-bit plan, with a note saying so)");
  cmd->add_option("--fix", o->fix,
                  "Fixed values: tp pp dp vp mbs zero(0-3) recompute(none|selective|full) "
                  "sp(0|1) cp ep, e.g. tp=8,zero=1");
  cmd->add_option("--top", o->top, "Plans to show (default 5)");
  cmd->add_option("--attention", o->attention,
                  "flash (fused attention, default) or materialized (the s x s scores are stored, "
                  "as in Megatron-LM 2021)");
  cmd->add_option("--zero3", o->zero3,
                  "How ZeRO-3 runs: flat (default: DeepSpeed's per-module collectives over all "
                  "data-parallel ranks, one NIC's share per device, backward gathers not "
                  "prefetched under full recomputation) or hierarchical (whole blocks, the "
                  "host's NICs, prefetched both ways: MiCS, ZeRO++ hpZ, FSDP hybrid)");
  cmd->add_flag("--json", o->json, "Print JSON for machines");
  cmd->add_flag("--explain", o->explain, "Explain why the best plan wins and what bounds it");
  cmd->add_option("--timeline", o->timeline, "Write the best plan's step as an SVG Gantt chart");
  cmd->add_flag("--calibrate", o->calibrate,
                "Measure GEMM speed (--dtype inputs, fp32 accumulation; n = 128 .. 8192 while "
                "a GEMM takes under 50 ms) and copy speed on a local device through the HAL and "
                "write a calibration file (alone, or before planning with it)");
  cmd->add_option("--device", o->device, "Device to calibrate, e.g. host:0 (default: the first)");
  cmd->add_option("--calibration-out", o->calibration_out,
                  "Where --calibrate writes (default tessera-calibration.json)");
  cmd->add_option("--calibration", o->calibration,
                  "Use measured figures from a calibration file; without --cluster, plan for the "
                  "calibrated local devices");
  cmd->add_option("--phases", o->phases,
                  "Plan each phase of a JSON file and say when switching layouts pays");
  // Unknown arguments reach the callback so they too get exit code 2 and one line.
  cmd->allow_extras();
  cmd->fallthrough(false);
  cmd->callback([o, cmd] {
    if (!cmd->remaining().empty()) fail("unexpected argument '" + cmd->remaining().front() + "'");
    run_plan(*o);
  });
}

}  // namespace tessera::tools
