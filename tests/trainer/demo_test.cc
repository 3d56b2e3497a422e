// `tessera demo`: flags that cannot take effect are refused before anything runs, and the loss
// chart reads without the log (ticked, labelled axes). The full demo run is a ctest of its own
// (TesseraDemo.RecoversAndSwitchesPlanAndEndsBitwiseEqual).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "demo/demo.h"
#include "support.h"

namespace tessera::tools::demo {
namespace {

struct Ran {
  int exit_code = -1;
  std::string output;
};

Ran run_demo(const std::string& args) {
  const std::string dir = trainer::testing::fresh_dir("demo");
  const std::string cmd = std::string(TESSERA_LAUNCH_BIN) + " demo --out " + dir + "/out " + args +
                          " > " + dir + "/log.txt 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          trainer::testing::read_file(dir + "/log.txt")};
}

TEST(TesseraDemo, RefusesAFaultStepThatIsNeverReached) {
  const Ran r = run_demo("--steps 8 --fault-step 8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fault-step 8 is never reached: --steps 8 trains steps 0..7"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("will SIGKILL"), std::string::npos) << "no kill announced\n" << r.output;
}

TEST(TesseraDemo, RefusesContradictoryFaultFlags) {
  Ran r = run_demo("--steps 8 --fault-step 2 --no-fault");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fault-step and --no-fault contradict each other"), std::string::npos)
      << r.output;
  r = run_demo("--steps 8 --fault-step -3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fault-step -3 is never reached"), std::string::npos) << r.output;
}

TEST(LossChart, TicksAreRoundNumbersCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 24, 9), (std::vector<double>{0, 5, 10, 15, 20}));
  const std::vector<double> loss = nice_ticks(0.5, 2.5, 6);
  ASSERT_EQ(loss.size(), 5u);
  EXPECT_DOUBLE_EQ(loss.front(), 0.5);
  EXPECT_DOUBLE_EQ(loss.back(), 2.5);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LossChart, BothAxesCarryTicksAndLabels) {
  std::map<int64_t, double> loss;
  for (int64_t s = 0; s < 24; ++s) loss[s] = 2.4 - 0.07 * double(s);
  const std::string svg = loss_svg(loss, /*switch_step=*/16, /*fault_step=*/8);
  // Steps: 0, 5, 10, 15, 20 (completed steps); loss: round values over [0.7, 2.4].
  EXPECT_EQ(count(svg, "class='xtick'"), 5u) << svg;
  EXPECT_NE(svg.find("text-anchor='middle'>20</text>"), std::string::npos) << svg;
  EXPECT_GE(count(svg, "class='ytick'"), 3u) << svg;
  EXPECT_NE(svg.find("text-anchor='end'>1.0</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">step (completed)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_NE(svg.find("rank killed before step 9"), std::string::npos);
  EXPECT_NE(svg.find("plan switch before step 17"), std::string::npos);
}

}  // namespace
}  // namespace tessera::tools::demo
