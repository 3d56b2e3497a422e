#include "tessera/common/status.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

Result<int> half_of(int x) {
  if (x % 2 != 0) return invalid_argument("field 'x': " + std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> quarter_of(int x) {
  TSR_ASSIGN_OR_RETURN(int half, half_of(x));
  TSR_ASSIGN_OR_RETURN(int quarter, half_of(half));
  return quarter;
}

Status check_even(int x) {
  TSR_RETURN_IF_ERROR(half_of(x).status());
  return Status();
}

TEST(Status, DefaultIsOkAndPrintsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.to_string(), "OK");
}

TEST(Status, PrintsCodeNameAndMessage) {
  Status status = not_found("backend 'cuda': library missing");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.to_string(), "NOT_FOUND: backend 'cuda': library missing");
}

TEST(Status, AcceleratorCodesHaveNames) {
  EXPECT_EQ(status_code_name(StatusCode::kNoDriver), "NO_DRIVER");
  EXPECT_EQ(status_code_name(StatusCode::kNoDevice), "NO_DEVICE");
  EXPECT_EQ(status_code_name(StatusCode::kVersionMismatch), "VERSION_MISMATCH");
  EXPECT_EQ(status_code_name(StatusCode::kNotReady), "NOT_READY");
  EXPECT_EQ(status_code_name(static_cast<StatusCode>(777)), "UNKNOWN");
}

TEST(Status, WithContextPrefixesTheMessageAndKeepsOkOk) {
  EXPECT_EQ(data_loss("bad crc").with_context("shard 3").to_string(),
            "DATA_LOSS: shard 3: bad crc");
  EXPECT_TRUE(Status().with_context("anything").ok());
}

TEST(Result, CarriesValueOrStatus) {
  Result<int> good = half_of(8);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  Result<int> bad = half_of(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(Result, RefusesAnOkStatusWithoutValue) {
  Result<int> r{Status()};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Result, MacrosPropagateTheFirstFailure) {
  EXPECT_EQ(*quarter_of(12), 3);
  Result<int> r = quarter_of(6);  // 6 -> 3, then 3 is odd
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3 is odd"), std::string::npos);
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_FALSE(check_even(5).ok());
}

}  // namespace
}  // namespace tessera
