#include "tessera/common/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace tessera::env {
namespace {

TEST(Env, ParsesBytesWithBinaryUnits) {
  EXPECT_EQ(*parse_bytes("0"), 0u);
  EXPECT_EQ(*parse_bytes("123"), 123u);
  EXPECT_EQ(*parse_bytes("64K"), 64u << 10);
  EXPECT_EQ(*parse_bytes("16m"), 16u << 20);
  EXPECT_EQ(*parse_bytes("2G"), 2ull << 30);
  EXPECT_EQ(*parse_bytes("16GiB"), 16ull << 30);
  EXPECT_EQ(*parse_bytes("512MB"), 512ull << 20);
  EXPECT_EQ(*parse_bytes("1T"), 1ull << 40);
}

TEST(Env, RejectsMalformedBytesWithTheReason) {
  auto r = parse_bytes("12X");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown unit 'X'"), std::string::npos);
  EXPECT_FALSE(parse_bytes("").ok());
  EXPECT_FALSE(parse_bytes("G").ok());
  EXPECT_FALSE(parse_bytes("-5").ok());
  EXPECT_EQ(parse_bytes("99999999999T").status().code(), StatusCode::kOutOfRange);
}

TEST(Env, NamesTheVariableWhenItsValueIsBad) {
  setenv("TESSERA_TEST_BYTES", "lots", 1);
  auto r = get_bytes("TESSERA_TEST_BYTES", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TESSERA_TEST_BYTES"), std::string::npos);
  unsetenv("TESSERA_TEST_BYTES");
  EXPECT_EQ(*get_bytes("TESSERA_TEST_BYTES", 7), 7u);
  setenv("TESSERA_TEST_INT", "42", 1);
  EXPECT_EQ(*get_int("TESSERA_TEST_INT", 0), 42);
  unsetenv("TESSERA_TEST_INT");
}

// Sets a variable for one test and restores its absence after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

bool says(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(Env, NumbersMustBeFiniteDecimalsWithNothingAfter) {
  EXPECT_EQ(*parse_number("0.5"), 0.5);
  EXPECT_EQ(*parse_number("64"), 64.0);
  EXPECT_EQ(*parse_number("1e3"), 1000.0);
  EXPECT_EQ(*parse_number("-2"), -2.0);
  for (const char* bad :
       {"inf", "-inf", "nan", "infinity", "abc", "", " 1", "1 ", "+1", "0x10", "1e999", "4MB"}) {
    EXPECT_FALSE(parse_number(bad).ok()) << bad;
  }
}

TEST(Env, TypedGettersRefuseMalformedNegativeNonFiniteAndOutOfRangeValuesByName) {
  const char* kVar = "TESSERA_TEST_VALUE";
  for (const char* bad : {"inf", "nan", "abc", "", "-1", "0", "65", "1e400"}) {
    ScopedEnv env(kVar, bad);
    auto r = get_number(kVar, 1, 0.001, 64);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(says(r.status(), std::string(kVar) + "='" + bad + "'")) << r.status().message();
    EXPECT_TRUE(says(r.status(), "in [0.001, 64]")) << r.status().message();
  }
  for (const char* bad : {"-3", "1.5", "x", "", "1025", "1"}) {
    ScopedEnv env(kVar, bad);
    auto r = get_int(kVar, 8, 2, 1024);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(says(r.status(), std::string(kVar) + "='" + bad +
                                     "': expected an integer in "
                                     "[2, 1024]"))
        << r.status().message();
  }
  {
    ScopedEnv env(kVar, "5");
    EXPECT_EQ(*get_int(kVar, 0, 1), 5);
    EXPECT_EQ(*get_number(kVar, 0, 0, 10), 5.0);
  }
  {
    ScopedEnv env(kVar, "2G");
    auto r = get_bytes(kVar, 0, 8, 64 << 20);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(says(r.status(), "expected a size in [8 B, 64 MiB]")) << r.status().message();
    EXPECT_EQ(*get_bytes(kVar, 0), 2ull << 30);
  }
}

TEST(Env, BooleansAndChoicesAcceptTheirWordsOnly) {
  const char* kVar = "TESSERA_TEST_VALUE";
  EXPECT_EQ(*get_bool(kVar, true), true);
  for (const char* yes : {"1", "true", "ON", "yes"}) {
    ScopedEnv env(kVar, yes);
    EXPECT_EQ(*get_bool(kVar, false), true) << yes;
  }
  for (const char* no : {"0", "false", "off", "No"}) {
    ScopedEnv env(kVar, no);
    EXPECT_EQ(*get_bool(kVar, true), false) << no;
  }
  for (const char* bad : {"2", "", "enable", "1 "}) {
    ScopedEnv env(kVar, bad);
    auto r = get_bool(kVar, false);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(says(r.status(), std::string(kVar) + "='" + bad + "': expected 0 or 1"));
  }
  EXPECT_EQ(*get_choice(kVar, {"auto", "shm"}, "auto"), "auto");
  ScopedEnv env(kVar, "tcp");
  auto r = get_choice(kVar, {"auto", "shm"}, "auto");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(says(r.status(), "TESSERA_TEST_VALUE='tcp': expected one of auto, shm"))
      << r.status().message();
}

TEST(Env, SplitTrimsAndDropsEmptyParts) {
  auto parts = split(" host, cuda,,level_zero ", ",");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "host");
  EXPECT_EQ(parts[1], "cuda");
  EXPECT_EQ(parts[2], "level_zero");
  EXPECT_TRUE(split("", ",").empty());
  EXPECT_EQ(split("/a:/b", ":").size(), 2u);
}

}  // namespace
}  // namespace tessera::env
