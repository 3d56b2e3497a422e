// The trainer's plan inputs (`--plan`, `--plan-json`) refuse out-of-range values by name instead
// of truncating them into an int or leaving them for later checks (found by the plan_json fuzz
// target, tests/fuzz/regressions/plan_json).
#include <gtest/gtest.h>

#include "layout.h"

namespace tessera::trainer {
namespace {

TEST(PlanParse, RefusesAZeroDegreeFromJson) {
  auto plan = plan_from_json(R"({"tp": 2, "pp": 2, "dp": 0, "zero": 1})", "plan.json");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("plan.json: field 'dp' = 0 is not in 1.."),
            std::string::npos)
      << plan.status().message();
}

TEST(PlanParse, RefusesADegreeThatWouldBeTruncatedIntoAnInt) {
  // 4294967298 = 2^32 + 2 used to become tp=2.
  auto plan = plan_from_json(R"({"tp": 4294967298, "pp": 1, "dp": 1})", "plan.json");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("field 'tp' = 4294967298"), std::string::npos)
      << plan.status().message();
  EXPECT_FALSE(parse_plan("tp=4294967298").ok());
  EXPECT_FALSE(plan_from_json(R"({"tp": 1, "pp": 1, "dp": 1, "mbs": -4})", "plan.json").ok());
  EXPECT_FALSE(plan_from_json(R"({"tp": 1, "pp": 2, "stage_layers": [-1, 3]})", "p.json").ok());
}

TEST(PlanParse, RefusesAWorldThatOverflows) {
  auto plan = parse_plan("tp=65536,pp=65536,dp=2");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("ranks, more than"), std::string::npos)
      << plan.status().message();
  EXPECT_FALSE(parse_plan("dp=0").ok());
  EXPECT_FALSE(parse_plan("zero=4").ok());
}

TEST(PlanParse, AcceptsTheSizesItAlwaysDid) {
  auto text = parse_plan("tp=2,pp=2,dp=1,zero=1,mbs=4,stages=2+2");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(plan_text(*text), "tp=2 pp=2 dp=1 zero=1 mbs=4 stages=2+2");
  auto json = plan_from_json(R"({"plans": [{"tp": 2, "pp": 2, "dp": 1, "zero": 3, "mbs": 4,
                                            "stage_layers": [2, 2]}]})",
                             "plan.json");
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_EQ(plan_text(*json), "tp=2 pp=2 dp=1 zero=1 mbs=4 stages=2+2");
  EXPECT_FALSE(parse_plan("foo=1").ok());
}

}  // namespace
}  // namespace tessera::trainer
