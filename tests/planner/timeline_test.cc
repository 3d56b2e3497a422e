// The simulated schedule reproduces the bubble formulas the performance model uses.
#include <gtest/gtest.h>

#include "tessera/plan/timeline.h"

namespace tessera::plan {
namespace {

Estimate equal_stages(int p, int v, int64_t m, double fwd, double bwd, double p2p) {
  Estimate e;
  e.plan.pp = p;
  e.plan.vp = v;
  e.plan.num_microbatches = m;
  e.p2p_s = p2p;
  for (int i = 0; i < p; ++i) {
    e.stage_time_s.push_back(fwd + bwd + (p > 1 ? 2.0 * v * p2p : 0));
    e.stage_fwd_s.push_back(fwd);
  }
  e.time.dp_comm_s = 0.5;
  e.time.optimizer_s = 0.25;
  return e;
}

TEST(Timeline, OneFOneBTakesMPlusPMinusOneStageTimes) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{8, 8}, std::pair{2, 16}, std::pair{1, 4}}) {
    const Timeline t = simulate_pipeline(equal_stages(p, 1, m, 1.0, 2.0, 0.0));
    EXPECT_EQ(t.ops.size(), static_cast<size_t>(2 * p * m));
    EXPECT_DOUBLE_EQ(t.pipeline_s, (m + p - 1) * 3.0) << "p=" << p << " m=" << m;
    EXPECT_DOUBLE_EQ(t.step_s, t.pipeline_s + 0.75);
  }
}

TEST(Timeline, InterleavingShrinksTheBubbleByV) {
  for (int v : {2, 4}) {
    const int p = 4;
    const int64_t m = 8;
    const Timeline t = simulate_pipeline(equal_stages(p, v, m, 1.0, 2.0, 0.0));
    EXPECT_EQ(t.ops.size(), static_cast<size_t>(2 * p * m * v));
    EXPECT_NEAR(t.pipeline_s, m * 3.0 + (p - 1) * 3.0 / v, 1e-9) << "v=" << v;
  }
}

TEST(Timeline, TransfersDelayButNeverReorderDependencies) {
  const Estimate e = equal_stages(4, 1, 8, 1.0, 2.0, 0.1);
  const Timeline t = simulate_pipeline(e);
  EXPECT_GT(t.pipeline_s, 33.0);
  for (const TimelineOp& op : t.ops) {
    EXPECT_GE(op.start_s, op.ready_s);
    EXPECT_GT(op.end_s, op.start_s);
  }
  const std::string svg = timeline_svg(e, t, "test plan");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("stage 3"), std::string::npos);
  EXPECT_NE(svg.find("backward mb 7"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
