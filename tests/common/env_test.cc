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
