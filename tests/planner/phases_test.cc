// Phase files (`tessera plan --phases`): malformed fields are errors naming the phase and field.
#include <gtest/gtest.h>

#include "tessera/plan/replan.h"

namespace tessera::plan {
namespace {

// Found by the planner_input fuzz target (tests/fuzz/regressions/planner_input): a name of
// another type threw json::type_error out of parse_phases.
TEST(Phases, ANameThatIsNotAStringIsAnErrorNamingThePhase) {
  double overhead = 0;
  auto phases =
      parse_phases(R"({"phases": [{"name": 5, "steps": 1, "global_batch": 8, "seq_len": 128}]})",
                   "phases.json", Dtype::kBf16, &overhead);
  ASSERT_FALSE(phases.ok());
  EXPECT_EQ(phases.status().message(), "phases.json: phases[0]: field 'name' must be a string");
  auto unnamed = parse_phases(R"({"phases": [{"steps": 1, "global_batch": 8, "seq_len": 128}]})",
                              "phases.json", Dtype::kBf16, &overhead);
  ASSERT_TRUE(unnamed.ok()) << unnamed.status().message();
  EXPECT_EQ(unnamed->at(0).name, "phase 0");
}

}  // namespace
}  // namespace tessera::plan
