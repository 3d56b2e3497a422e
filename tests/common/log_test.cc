#include "tessera/common/log.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace tessera::log {
namespace {

TEST(Log, ParsesLevelNamesCaseInsensitively) {
  Level level;
  ASSERT_TRUE(parse_level("INFO", &level));
  EXPECT_EQ(level, Level::kInfo);
  ASSERT_TRUE(parse_level("warning", &level));
  EXPECT_EQ(level, Level::kWarn);
  EXPECT_FALSE(parse_level("loud", &level));
}

TEST(Log, FiltersByLevelAndSubsystem) {
  configure(Level::kInfo, "hal,coll");
  EXPECT_TRUE(enabled(Level::kInfo, "hal"));
  EXPECT_FALSE(enabled(Level::kDebug, "hal"));
  EXPECT_FALSE(enabled(Level::kError, "ckpt"));
  configure(Level::kDebug, "^hal");
  EXPECT_FALSE(enabled(Level::kInfo, "hal"));
  EXPECT_TRUE(enabled(Level::kDebug, "ckpt"));
  configure(Level::kWarn, "");
  EXPECT_TRUE(enabled(Level::kError, "anything"));
}

TEST(Log, DoesNotEvaluateDisabledMessages) {
  configure(Level::kError, "");
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  TSR_LOG(kDebug, "hal") << count();
  EXPECT_EQ(evaluated, 0);
  configure(Level::kWarn, "");
}

// The variables as a program checks them at start: an unknown level or subsystem is an error
// naming the variable and the value, not a warning and a default.
TEST(Log, CheckEnvironmentRefusesUnknownLevelsAndSubsystemsByName) {
  unsetenv("TESSERA_LOG");
  unsetenv("TESSERA_LOG_SUBSYS");
  EXPECT_TRUE(check_environment().ok());
  setenv("TESSERA_LOG", "whatever", 1);
  Status s = check_environment();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TESSERA_LOG='whatever': expected error, warn"), std::string::npos)
      << s.message();
  setenv("TESSERA_LOG", "Debug", 1);
  EXPECT_TRUE(check_environment().ok());
  for (const char* good : {"hal,coll", "^ckpt", " overlap , trainer", "topo,plan,launch"}) {
    setenv("TESSERA_LOG_SUBSYS", good, 1);
    EXPECT_TRUE(check_environment().ok()) << good;
  }
  for (const char* bad : {"hal,colll", "^nccl", "*"}) {
    setenv("TESSERA_LOG_SUBSYS", bad, 1);
    s = check_environment();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string("TESSERA_LOG_SUBSYS='") + bad + "'"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("is not a subsystem"), std::string::npos) << s.message();
  }
  unsetenv("TESSERA_LOG");
  unsetenv("TESSERA_LOG_SUBSYS");
}

}  // namespace
}  // namespace tessera::log
