// `tessera demo` internals: probing and planning (plan.cc), running the trainer under the
// launcher with a progress bar (run.cc), and the report: summary (report.cc), loss curve
// (loss_chart.cc).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "layout.h"  // examples/trainer: the plan the trainer runs
#include "model.h"
#include "tessera/common/status.h"
#include "tessera/ir/model.h"
#include "tessera/plan/plan.h"

namespace tessera::tools::demo {

// `v` with `digits` decimals ("%.*f").
inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct DemoOptions {
  int ranks = 4;
  int devices = 0;                   // devices to plan for; 0: ranks
  std::string model = "gpt";         // "gpt": the decoder of demo-llama.json; "mlp"
  std::string model_size = "small";  // the MLP's size
  int64_t seq = 32;                  // tokens per sequence (gpt)
  int64_t steps = 24;
  int64_t global_batch = 32;
  int64_t fault_step = -1;  // -1: a third of the way
  bool no_fault = false;
  int hosts = 1;  // 2: across two namespace hosts, one of them lost (hosts.cc; root)
  // The GPT decoder's HAL backend: auto (cuda, hip or level_zero where one lists a device, else
  // host: trainer::pick_backend) or a name; the MLP runs on host.
  std::string backend = "auto";
  std::string out = "tessera-demo";
};

struct Probe {
  std::string backend;   // the backend probed (the one the ranks train on)
  std::string device;    // "host:0 (x86_64)"
  int host_devices = 0;  // devices of that backend
  unsigned cores = 0;
  double gemm_gflops = 0;  // f32, measured
};

// The model the demo trains, as the planner and tessera-train see it.
struct DemoModel {
  std::string description;  // one line for the header
  ir::Model ir;
  int64_t blocks = 0;
  int64_t seq = 1;                         // tokens per sample for the planner (the MLP: 1)
  bool tp2_ok = true;                      // tp = 2 divides everything the trainer splits
  std::vector<std::string> trainer_flags;  // --gpt-config F --seq N --backend B, or --model-size S
  std::string backend = "host";            // the devices the ranks train on
};

struct DemoPlan {
  trainer::TrainPlan first, second;
  plan::Estimate first_estimate, second_estimate;
  std::string why_first, why_second;
  int64_t switch_step = 0, second_batch = 0;
};

// Device 0 of `backend` and its GEMM rate (the planner's calibration for the demo).
Result<Probe> probe_machine(const std::string& backend);
// A plan as tessera-train's --plan flag spells it ("tp=2,pp=1,dp=2,zero=0,mbs=0[,stages=a+b]").
std::string plan_flag(const trainer::TrainPlan& p);
Result<DemoPlan> plan_demo(const DemoOptions& o, const DemoModel& model, const Probe& probe);

struct RunResult {
  int exit_code = -1;
  std::string log;
  double seconds = 0;
};
// `tessera launch -n ranks [--max-restarts 1] tessera-train args`, with the trainer's progress
// drawn as a bar (when `bar`) and its recovery and switch lines passed through.
RunResult run_trainer(const std::string& launcher, const std::string& train, int ranks,
                      const std::vector<std::string>& args, bool restarts, const std::string& trace,
                      int64_t steps, bool bar);

// `tessera demo --hosts 2` (hosts.cc): the training across two namespace hosts with one host
// lost, against a fault-free run. ran: false when the hosts could not be made (`why` says why:
// not root, no namespaces, no script); then nothing ran. passed: the final parameters are within
// the tolerance of the fault-free run's.
struct HostsResult {
  bool ran = false, passed = false;
  std::string why, report;
};
HostsResult run_across_hosts(const DemoOptions& o, const DemoModel& model, const DemoPlan& plan,
                             const std::filesystem::path& out, const std::string& bin_dir);

// The summary text and the loss curve SVG, from the trainer's metrics file.
Result<std::string> summarize(const std::string& metrics_path, const DemoPlan& plan,
                              const std::string& loss_svg_path);

// The loss curve (loss_chart.cc): `loss` by 0-based step, the point of step s drawn at s + 1
// completed steps; markers before step switch_step + 1 and fault_step + 1 (-1: none). Both axes
// carry ticks and labels.
std::string loss_svg(const std::map<int64_t, double>& loss, int64_t switch_step,
                     int64_t fault_step);
// Round tick values (1, 2 or 5 x 10^k apart) covering [lo, hi], at most about `max_ticks`.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);

}  // namespace tessera::tools::demo
