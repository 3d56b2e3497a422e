// explain_best / explanation_text (`tessera plan --explain`): the planner's account of why its
// best plan wins, as data and as the text the CLI prints.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"
#include "tessera/plan/explain.h"
#include "tessera/plan/search.h"

namespace tessera::plan {
namespace {

SearchResult searched(const ir::Model& m, const ClusterSpec& c, const Workload& w,
                      const std::string& fix) {
  SearchConstraints k;
  EXPECT_TRUE(parse_fixes(fix, &k).ok());
  auto r = search_plans(m, c, w, k, CostOptions{});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return *r;
}

TEST(Explain, NamesTheLargestTimeComponentAndPricesEveryValidSingleChange) {
  const auto m = *ir::model_preset("llama2-13b");
  const ClusterSpec c = *with_devices(*cluster_preset("dgx-a100-80gb"), 32);
  const Workload w{64, 4096, Dtype::kBf16};
  const SearchResult r = searched(m, c, w, "pp=4");
  ASSERT_GE(r.plans.size(), 2u);
  const Explanation x = explain_best(m, c, w, r.plans, CostOptions{});
  const TimeBreakdown& t = x.best.time;
  EXPECT_EQ(x.bound_seconds, std::max({t.compute_s, t.bubble_s, t.tp_comm_s, t.cp_comm_s,
                                       t.ep_comm_s, t.pp_comm_s, t.dp_comm_s, t.optimizer_s}));
  ASSERT_TRUE(x.runner_up.has_value());
  EXPECT_DOUBLE_EQ(x.runner_up_slowdown, r.plans[1].step_time_s / r.plans[0].step_time_s - 1);
  // Every change is re-priced: the fastest plan that fits is the best, so none that fits is
  // faster by more than rounding (the search and evaluate may partition differently).
  ASSERT_FALSE(x.changes.empty());
  for (const SingleChange& ch : x.changes) {
    EXPECT_GT(ch.memory_bytes, 0) << ch.label;
    if (ch.fits) {
      EXPECT_GT(ch.slowdown, -1e-9) << ch.label;
    }
    EXPECT_NE(plan_summary(x.best.plan).find(ch.label.substr(0, ch.label.find('=') + 1)),
              std::string::npos)
        << ch.label << " is not one of the plan's values";
    EXPECT_EQ(plan_summary(x.best.plan).find(" " + ch.label + " "), std::string::npos)
        << ch.label << " is no change";
  }
  const std::string text = explanation_text(x);
  EXPECT_EQ(text.rfind("\nWhy plan 1 (" + plan_summary(x.best.plan) + "):\n", 0), 0u) << text;
  EXPECT_NE(text.find("  bound by " + x.bound_by + " ("), std::string::npos) << text;
  for (const SingleChange& ch : x.changes) {
    EXPECT_NE(text.find("    " + ch.label + ": "), std::string::npos) << ch.label;
  }
  EXPECT_NE(text.find("  runner-up ("), std::string::npos) << text;
}

// Changes that break a rule are left out: with tp=1 there is no sp toggle, with mbs=1 no mbs=0,
// and ZeRO-3 is refused with pp > 1.
TEST(Explain, LeavesOutChangesThatBreakARule) {
  const auto m = *ir::model_preset("llama2-7b");
  const ClusterSpec c = *with_devices(*cluster_preset("dgx-a100-80gb"), 8);
  const Workload w{64, 4096, Dtype::kBf16};
  const SearchResult r = searched(m, c, w, "tp=1,pp=2,mbs=1");
  const Explanation x = explain_best(m, c, w, {r.plans.front()}, CostOptions{});
  for (const SingleChange& ch : x.changes) {
    EXPECT_NE(ch.label.rfind("sp=", 0), 0u);
    EXPECT_NE(ch.label, "mbs=0");
    EXPECT_NE(ch.label, "zero=3");
  }
  EXPECT_FALSE(x.runner_up.has_value());
  EXPECT_EQ(explanation_text(x).find("runner-up"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
