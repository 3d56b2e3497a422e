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
  // zero 3 as planned (the GPT trainer runs it; the MLP trainer refuses it by name).
  EXPECT_EQ(plan_text(*json), "tp=2 pp=2 dp=1 zero=3 mbs=4 stages=2+2");
  EXPECT_FALSE(parse_plan("foo=1").ok());
}

TEST(PlanParse, CarriesVirtualStagesAndSequenceParallelism) {
  auto text = parse_plan("tp=2,pp=2,dp=1,vp=2,sp=1");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->vp, 2);
  EXPECT_TRUE(text->sp);
  EXPECT_EQ(plan_text(*text), "tp=2 pp=2 dp=1 zero=0 mbs=all vp=2 sp=1");
  EXPECT_FALSE(parse_plan("sp=2").ok());
  EXPECT_FALSE(parse_plan("vp=0").ok());
  EXPECT_FALSE(plan_from_json(R"({"tp": 2, "sp": 2})", "plan.json").ok());
  EXPECT_FALSE(plan_from_json(R"({"tp": 2, "sp": "1"})", "plan.json").ok());
  auto as_bool = plan_from_json(R"({"tp": 2, "sp": true})", "plan.json");
  ASSERT_TRUE(as_bool.ok()) << as_bool.status().message();
  EXPECT_TRUE(as_bool->sp);
  auto json = plan_from_json(R"({"tp": 2, "pp": 2, "dp": 1, "vp": 2, "sp": 1})", "plan.json");
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_EQ(json->vp, 2);
  EXPECT_TRUE(json->sp);
  const plan::Plan back = to_planner_plan(*json, 8);
  EXPECT_EQ(back.vp, 2);
  EXPECT_TRUE(back.sp);
  auto ep = plan_from_json(R"({"tp": 1, "pp": 1, "dp": 2, "ep": 2})", "plan.json");
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("ep=1"), std::string::npos) << ep.status().message();
}

// The MLP trainer refuses what only the GPT trainer runs, naming it (never runs zero 3 as 1).
TEST(PlanParse, TheMlpTrainerRefusesWhatOnlyTheGptTrainerRuns) {
  const ModelSpec spec;  // 4 blocks
  for (const char* text : {"tp=2,pp=2,vp=2", "tp=2,sp=1", "dp=2,zero=3"}) {
    auto plan = parse_plan(text);
    ASSERT_TRUE(plan.ok()) << text;
    const Status s = validate_plan(*plan, spec, 8, plan->world());
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find("GPT trainer"), std::string::npos) << s.message();
  }
  auto fine = parse_plan("tp=2,pp=2");
  ASSERT_TRUE(fine.ok());
  EXPECT_TRUE(validate_plan(*fine, spec, 8, 4).ok());
}

}  // namespace
}  // namespace tessera::trainer
