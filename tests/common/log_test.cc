#include "tessera/common/log.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera::log
