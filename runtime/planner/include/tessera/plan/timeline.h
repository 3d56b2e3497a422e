// One training step of a plan's pipeline schedule, simulated op by op (Megatron-LM's 1F1B and
// interleaved orders, pipeline transfers as delays between stages), and drawn as an SVG Gantt
// chart: stages as rows; forward, backward, transfers, idle (bubbles), then the exposed
// gradient reduction and the optimizer. Thread-safe (values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/plan/plan.h"

namespace tessera::plan {

struct TimelineOp {
  int stage = 0;
  int chunk = 0;  // virtual stage on the device (0 without interleaving)
  int64_t microbatch = 0;
  bool backward = false;
  double start_s = 0, end_s = 0;
  double ready_s = 0;  // when its input arrived (transfer end); start_s >= ready_s
};

struct Timeline {
  int stages = 0;
  std::vector<TimelineOp> ops;  // in scheduling order
  double pipeline_s = 0;        // last op's end
  double step_s = 0;            // pipeline + exposed gradient reduction + optimizer
};

// Simulates the schedule from the estimate's per-stage forward/backward times and p2p delay.
Timeline simulate_pipeline(const Estimate& estimate);

// The SVG document (self-contained, ~100 bytes per op).
std::string timeline_svg(const Estimate& estimate, const Timeline& timeline,
                         const std::string& title);

}  // namespace tessera::plan
