// The trainer's plan inputs (examples/trainer/layout.h): `tessera-train --plan-json FILE` (the
// output of `tessera plan --json`, or a bare plan object) and `--plan "tp=2,pp=2,..."`. An
// accepted plan has degrees in 1..kMaxPlanDegree whose product (the world size) is at most
// kMaxPlanRanks, and no negative value.
#include "fuzz_target.h"
#include "layout.h"

namespace {

void check_plan(const tessera::Result<tessera::trainer::TrainPlan>& plan) {
  if (!plan.ok()) return;
  using tessera::trainer::kMaxPlanDegree;
  FUZZ_CHECK(plan->tp >= 1 && plan->pp >= 1 && plan->dp >= 1, "accepted a degree below 1");
  FUZZ_CHECK(plan->tp <= kMaxPlanDegree && plan->pp <= kMaxPlanDegree && plan->dp <= kMaxPlanDegree,
             "accepted a degree above kMaxPlanDegree");
  FUZZ_CHECK(int64_t{plan->tp} * plan->pp * plan->dp <= tessera::trainer::kMaxPlanRanks,
             "accepted a world above kMaxPlanRanks");
  FUZZ_CHECK(plan->zero >= 0 && plan->mbs >= 0, "accepted a negative zero or mbs");
  for (int blocks : plan->stage_blocks) FUZZ_CHECK(blocks >= 1, "accepted an empty stage");
  (void)tessera::trainer::plan_text(*plan);
}

}  // namespace

TESSERA_FUZZ_TARGET(plan_json) {
  const std::string_view text = tessera::fuzz::as_text(data, size);
  check_plan(tessera::trainer::plan_from_json(text, "plan.json"));
  check_plan(tessera::trainer::parse_plan(text));
  return 0;
}
