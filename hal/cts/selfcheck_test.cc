// Checks of the CTS itself, run with every backend (they need no device): the reference
// rounding agrees with the compiler's f32 conversion and with hand-computed f16/bf16 encodings,
// and the expectations parser accepts the documented format and names malformed lines.
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "expectations.h"
#include "fixture.h"
#include "null_entry_lines.h"
#include "reference.h"

namespace tessera::cts {
namespace {

class Reference : public CtsTest {};
class ExpectationsFile : public CtsTest {};

TEST_F(Reference, RoundsToF32LikeTheCompiler) {
  SCOPED_TRACE(seed_note());
  auto rng = make_rng();
  for (int i = 0; i < 200000; ++i) {
    // Random doubles over the f32 range and past it, subnormals included.
    const double mantissa = std::ldexp(static_cast<double>(rng() >> 11), -53) + 0.5;
    const int exponent = static_cast<int>(rng() % 298) - 170;  // below f32 overflow (UB)
    const double v = (rng() % 2 ? -1 : 1) * std::ldexp(mantissa, exponent);
    const uint32_t compiler = std::bit_cast<uint32_t>(static_cast<float>(v));
    ASSERT_EQ(encode_double(v, TSR_DTYPE_F32), compiler) << "value " << v;
  }
}

TEST_F(Reference, RoundTripsEveryF16AndBf16Encoding) {
  for (tsr_dtype dtype : {TSR_DTYPE_F16, TSR_DTYPE_BF16}) {
    for (uint64_t bits = 0; bits < 65536; ++bits) {
      if (is_nan(bits, dtype)) continue;
      ASSERT_EQ(encode_double(decode_float(bits, dtype), dtype), bits)
          << dtype_name(dtype) << " 0x" << std::hex << bits;
    }
  }
}

TEST_F(Reference, KnowsHandComputedEncodings) {
  EXPECT_EQ(encode_double(1.0, TSR_DTYPE_F16), 0x3c00u);
  EXPECT_EQ(encode_double(-2.0, TSR_DTYPE_F16), 0xc000u);
  EXPECT_EQ(encode_double(65504.0, TSR_DTYPE_F16), 0x7bffu);
  EXPECT_EQ(encode_double(std::ldexp(1.0, -24), TSR_DTYPE_F16), 0x0001u);
  EXPECT_EQ(encode_double(1.0 / 3, TSR_DTYPE_F16), 0x3555u);
  EXPECT_EQ(encode_double(1.0, TSR_DTYPE_BF16), 0x3f80u);
  EXPECT_EQ(encode_double(M_PI, TSR_DTYPE_BF16), 0x4049u);
  EXPECT_EQ(encode_double(1.0 / 3, TSR_DTYPE_BF16), 0x3eabu);
  EXPECT_EQ(encode_int(-1, TSR_DTYPE_I32), 0xffffffffu);
  EXPECT_EQ(decode_int(0xffffffffu, TSR_DTYPE_I32), -1);
  EXPECT_EQ(ulp_distance(0x0000, 0x8000, TSR_DTYPE_F16), 0u);
  EXPECT_EQ(ulp_distance(0x0001, 0x8001, TSR_DTYPE_F16), 2u);
}

TEST_F(ExpectationsFile, ParsesTheDocumentedFormat) {
  auto parsed = Expectations::parse(
      "# header\n\nunsupported Ipc.* : no IPC on this chip\n"
      "  xfail Cast.Rounds*Once:converts through f32  \n",
      "x.txt");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const Expectations& e = parsed.value();
  ASSERT_EQ(e.entries().size(), 2u);
  EXPECT_EQ(e.entries()[1].reason, "converts through f32");
  EXPECT_EQ(e.entries()[1].line, 4);
  ASSERT_NE(e.find("Ipc.SharesDeviceMemoryWithAChildProcess"), nullptr);
  EXPECT_EQ(e.find("Cast.RoundsF64AndI64ToHalfPrecisionOnce")->kind, Expectation::Kind::kXfail);
  EXPECT_EQ(e.find("Copy.CopiesHostToDevice"), nullptr);
  EXPECT_TRUE(glob_match("Reduce.*F16*", "Reduce.SumsF16AcrossOneSource"));
  EXPECT_FALSE(glob_match("Reduce.Sums?", "Reduce.Sums"));
}

TEST_F(ExpectationsFile, NamesTheFileAndLineOfAMalformedEntry) {
  for (const char* bad :
       {"skip Ipc.* : unknown kind", "unsupported Ipc.* :", "xfail Ipc.*", "unsupported : reason",
        "xfail NoDot : reason", "xfail Two Patterns : reason"}) {
    auto parsed = Expectations::parse(std::string("# ok\n") + bad + "\n", "bad.txt");
    ASSERT_FALSE(parsed.ok()) << "accepted: " << bad;
    EXPECT_NE(parsed.status().message().find("bad.txt:2"), std::string::npos)
        << parsed.status().message();
  }
}

TEST_F(ExpectationsFile, SuggestsOneLinePerSuiteOnlyWhenEveryTestOfItCallsANullEntry) {
  const std::vector<std::string> tests = {"Reduce.A",        "Reduce.B",      "Stream.Plain",
                                          "Stream.Callback", "Stream.Listed", "Copy.Plain"};
  auto null_entries = [](const std::string& test) -> std::vector<std::string> {
    if (test.starts_with("Reduce.")) return {"reduce_async"};
    if (test == "Stream.Callback") return {"stream_add_callback", "event_elapsed_time"};
    if (test == "Stream.Listed") return {"stream_add_callback"};
    return {};
  };
  auto unlisted = [](const std::string& test) { return test != "Stream.Listed"; };
  const std::vector<NullEntryLine> lines = suggest_null_entry_lines(tests, null_entries, unlisted);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(expectation_text(lines[0]), "unsupported Reduce.* : reduce_async is NULL");
  EXPECT_EQ(lines[0].tests, 2);
  // Stream.Plain can run, so no Stream.* line; the listed test needs none.
  EXPECT_EQ(expectation_text(lines[1]),
            "unsupported Stream.Callback : stream_add_callback, event_elapsed_time are NULL");
  EXPECT_TRUE(suggest_null_entry_lines(tests, null_entries, [](const std::string&) {
                return false;
              }).empty());
}

}  // namespace
}  // namespace tessera::cts
