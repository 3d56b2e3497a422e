// The validity rules are one table (runtime/planner/src/rules.h): the search's fixed values and
// validate_plan name the same broken rule, combinations of fixed values get their own reason
// instead of "no valid plan", and no size is divided by or multiplied past 64 bits.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "../../runtime/planner/src/rules.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/search.h"

namespace tessera::plan {
namespace {

ClusterSpec a100(int64_t devices) {
  return *with_devices(*cluster_preset("dgx-a100-80gb"), devices);
}

TEST(Rules, EveryRuleHasAUniqueNameAndAMessage) {
  std::set<std::string> names;
  for (const rules::Rule& r : rules::table()) {
    EXPECT_TRUE(names.insert(r.name).second) << "duplicate rule " << r.name;
    EXPECT_NE(r.holds, nullptr) << r.name;
    EXPECT_NE(r.message, nullptr) << r.name;
    EXPECT_EQ(r.needs & ~rules::kAll, 0) << r.name;
  }
}

// Each case: fixed values that break one rule, and the same values as a whole plan (the other
// sizes chosen valid), which validate_plan must refuse with the same message.
TEST(Rules, FixedValuesAndWholePlansNameTheSameRule) {
  const auto dense = *ir::model_preset("llama2-7b");
  const auto moe = *ir::model_preset("mixtral-8x7b");
  const Workload w{96, 4096, Dtype::kBf16};
  struct Case {
    const ir::Model* model;
    std::string fix;
    Plan plan;  // tp pp dp cp ep vp mbs num_microbatches zero
    std::string expect;
  };
  auto plan = [](int tp, int pp, int dp, int cp, int ep, int vp, int mbs, int zero) {
    Plan p;
    p.tp = tp, p.pp = pp, p.dp = dp, p.cp = cp, p.ep = ep, p.vp = vp, p.mbs = mbs, p.zero = zero;
    p.num_microbatches = 96 / (int64_t{dp} * mbs);
    return p;
  };
  for (const Case& c : {
           Case{&dense, "tp=3", plan(3, 1, 16, 1, 1, 1, 1, 0),
                "tp=3 does not divide num_attention_heads 32"},
           Case{&dense, "tp=8,pp=2,dp=2,cp=1", plan(8, 2, 2, 1, 1, 1, 1, 0),
                "tp*pp*dp*cp = 32 but the cluster has 48 devices"},
           Case{&dense, "dp=16,mbs=4", plan(1, 3, 16, 1, 1, 1, 4, 0),
                "global batch 96 is not a multiple of dp*mbs = 64"},
           Case{&dense, "pp=2,vp=2,dp=24,mbs=4", plan(1, 2, 24, 1, 1, 2, 4, 0),
                "vp=2 needs the 1 micro-batches to be a multiple of pp=2"},
           Case{&dense, "pp=1,vp=2", plan(1, 1, 48, 1, 1, 2, 1, 0), "vp=2 needs pp > 1"},
           Case{&dense, "pp=2,zero=3", plan(1, 2, 24, 1, 1, 1, 1, 3),
                "zero=3 with pp>1 is not modelled by the planner"},
           Case{&moe, "ep=8,dp=4", plan(4, 3, 4, 1, 8, 1, 1, 0), "ep=8 does not divide dp=4"},
       }) {
    SearchConstraints k;
    ASSERT_TRUE(parse_fixes(c.fix, &k).ok()) << c.fix;
    auto searched = search_plans(*c.model, a100(48), w, k, CostOptions{});
    ASSERT_FALSE(searched.ok()) << c.fix;
    EXPECT_EQ(searched.status().code(), StatusCode::kInvalidArgument) << c.fix;
    EXPECT_EQ(searched.status().message().find(c.expect), 0u)
        << c.fix << ": " << searched.status().message();
    const Status whole = validate_plan(*c.model, a100(48), w, c.plan, CostOptions{});
    EXPECT_EQ(whole.message(), searched.status().message()) << c.fix;
  }
}

// Values set through the C++ API (not parse_fixes) reach the rules unchecked: a zero size must
// be refused by name, not divided by (SIGFPE), and a huge vp must not wrap pp*vp to zero.
TEST(Rules, OutOfRangeSizesAreRefusedBeforeAnyRuleDividesByThem) {
  const auto m = *ir::model_preset("llama2-7b");
  const Workload w{64, 4096, Dtype::kBf16};
  SearchConstraints zero_tp;
  zero_tp.tp = 0;
  auto r = search_plans(m, a100(8), w, zero_tp, CostOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tp=0: must be at least 1");
  SearchConstraints bad_zero;
  bad_zero.zero = 4;
  r = search_plans(m, a100(8), w, bad_zero, CostOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "zero=4: must be 0..3");

  Plan p;
  p.pp = 8;
  p.vp = 1 << 29;  // pp*vp = 2^32: zero in 32-bit arithmetic
  p.num_microbatches = 64;
  const Status s = validate_plan(m, a100(8), w, p, CostOptions{});
  EXPECT_EQ(s.message(),
            "vp=536870912: 32 layers do not split evenly into pp*vp = 4294967296 chunks");
}

}  // namespace
}  // namespace tessera::plan
