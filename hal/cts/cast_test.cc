// cast_async for every dtype pair against the CTS's reference (reference.h), plus hand-picked
// values whose expected encodings are written out here, so that the reference code is checked
// too: ties to even, double rounding, saturation, NaN and infinity.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fixture.h"
#include "reference.h"
#include "support.h"

namespace tessera::cts {
namespace {

constexpr uint8_t kGuard = 0xCD;
constexpr size_t kGuardBytes = 32;

// Casts `source` (encodings of `src`) on device 0; returns the encodings of `dst`, or fails.
::testing::AssertionResult run_cast(tsr_dtype src, tsr_dtype dst,
                                    const std::vector<uint64_t>& source,
                                    std::vector<uint64_t>* out) {
  OwnedStream stream;
  auto ok = status_is(TSR_OK, OwnedStream::create(0, &stream), "stream_create");
  if (!ok) return ok;
  const size_t count = source.size();
  std::vector<uint8_t> packed(std::max<size_t>(1, count * dtype_size(src)));
  for (size_t i = 0; i < count; ++i) store_element(packed.data(), i, source[i], src);
  const size_t dst_bytes = count * dtype_size(dst);
  DeviceMemory device_src;
  DeviceMemory device_dst;
  if (!(ok = status_is(TSR_OK, DeviceMemory::allocate(0, packed.size(), &device_src),
                       "device_malloc")) ||
      !(ok = status_is(TSR_OK, DeviceMemory::allocate(0, dst_bytes + kGuardBytes, &device_dst),
                       "device_malloc")) ||
      !(ok = copy_and_wait(device_src.get(), packed.data(), packed.size(), stream))) {
    return ok;
  }
  std::vector<uint8_t> result(dst_bytes + kGuardBytes, kGuard);
  if (!(ok = copy_and_wait(device_dst.get(), result.data(), result.size(), stream))) return ok;
  if (!(ok = status_is(
            TSR_OK,
            api().cast_async(device_dst.get(), dst, device_src.get(), src, count, stream.get()),
            "cast_async")) ||
      !(ok = status_is(TSR_OK, stream.synchronize(), "stream_synchronize after cast_async")) ||
      !(ok = copy_and_wait(result.data(), device_dst.get(), result.size(), stream))) {
    return ok;
  }
  if (!(ok = all_bytes_are(result.data() + dst_bytes, kGuardBytes, kGuard))) {
    return ok << " (cast_async wrote past its " << count << " destination elements)";
  }
  out->resize(count);
  for (size_t i = 0; i < count; ++i) (*out)[i] = load_element(result.data(), i, dst);
  return ::testing::AssertionSuccess();
}

// Compares `actual` with the reference for every element; reports the first few differences.
void expect_cast_results(tsr_dtype src, tsr_dtype dst, const std::vector<uint64_t>& source,
                         const std::vector<uint64_t>& actual) {
  int reported = 0;
  size_t wrong = 0;
  for (size_t i = 0; i < source.size(); ++i) {
    bool nan_expected = false;
    const uint64_t expected = cast_reference(source[i], src, dst, &nan_expected);
    const bool good = nan_expected ? is_nan(actual[i], dst) : actual[i] == expected;
    if (good) continue;
    ++wrong;
    if (reported++ < 5) {
      ADD_FAILURE() << dtype_name(src) << " " << format_element(source[i], src) << " -> "
                    << dtype_name(dst) << ": got " << format_element(actual[i], dst)
                    << ", expected " << (nan_expected ? "a NaN" : format_element(expected, dst));
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << source.size() << " elements differ";
}

std::vector<uint64_t> make_sources(std::mt19937_64& rng, tsr_dtype src, tsr_dtype dst) {
  std::vector<uint64_t> out;
  if (is_float(src)) {
    const double inf = std::numeric_limits<double>::infinity();
    for (double v : {0.0,          -0.0,          1.0,     -1.0,        0.5,    -0.5,  2.7,
                     -2.7,         1.5,           2.5,     -2.5,        100.25, 255.0, 255.5,
                     256.0,        -129.0,        65504.0, 65520.0,     1e10,   -1e10, 2147483647.0,
                     2147483648.0, -2147483649.0, 9.3e18,  -9.3e18,     3e38,   1e300, 1e-300,
                     6e-8,         inf,           -inf,    std::nan("")}) {
      out.push_back(encode_double(v, src));
    }
    const int width = float_format(src).width;
    for (int i = 0; i < 500; ++i) {  // moderate values, many with fractions
      const double v = static_cast<double>(static_cast<int64_t>(rng() % 2000001) - 1000000) /
                       (1 << (rng() % 16));
      out.push_back(encode_double(v, src));
    }
    for (int i = 0; i < 500; ++i) {  // any encoding: subnormals, huge, NaN payloads, infinities
      out.push_back(width == 64 ? rng() : rng() & ((1ull << width) - 1));
    }
    return out;
  }
  std::vector<int64_t> candidates = {0,
                                     1,
                                     -1,
                                     2,
                                     127,
                                     128,
                                     255,
                                     256,
                                     -128,
                                     -129,
                                     65504,
                                     65519,
                                     65520,
                                     65535,
                                     (1 << 24) + 1,
                                     2147483647,
                                     -2147483647 - 1,
                                     (int64_t{1} << 53) + 1,
                                     std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min()};
  for (int i = 0; i < 1000; ++i) candidates.push_back(static_cast<int64_t>(rng() >> (rng() % 64)));
  // Every value, including those the destination cannot hold: integer narrowing is modular
  // (backend_abi.h), which the reference implements.
  for (int64_t v : candidates) out.push_back(encode_int(v, src));
  return out;
}

void register_pairs() {
  for (tsr_dtype src : kAllDtypes) {
    for (tsr_dtype dst : kAllDtypes) {
      const std::string name = std::string("Converts") + dtype_name(src) + "To" + dtype_name(dst);
      register_generated_test("Cast", name, __FILE__, __LINE__, {"cast_async"}, [src, dst] {
        SCOPED_TRACE(CtsTest::seed_note());
        auto rng = CtsTest::make_rng();
        const auto source = make_sources(rng, src, dst);
        std::vector<uint64_t> actual;
        ASSERT_TRUE(run_cast(src, dst, source, &actual));
        expect_cast_results(src, dst, source, actual);
      });
    }
  }
}

struct Case {
  tsr_dtype src;
  uint64_t src_bits;
  tsr_dtype dst;
  uint64_t expected;  // exact encoding; kAnyNan for "some NaN"
  const char* what;
};
constexpr uint64_t kAnyNan = ~0ull;

void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    std::vector<uint64_t> actual;
    ASSERT_TRUE(run_cast(c.src, c.dst, {c.src_bits}, &actual)) << c.what;
    if (c.expected == kAnyNan) {
      EXPECT_TRUE(is_nan(actual[0], c.dst))
          << c.what << ": got " << format_element(actual[0], c.dst) << ", expected a NaN";
    } else {
      EXPECT_EQ(actual[0], c.expected) << c.what << ": got " << format_element(actual[0], c.dst)
                                       << ", expected " << format_element(c.expected, c.dst);
    }
  }
}

constexpr tsr_dtype F32 = TSR_DTYPE_F32, F16 = TSR_DTYPE_F16, BF16 = TSR_DTYPE_BF16,
                    F64 = TSR_DTYPE_F64, I32 = TSR_DTYPE_I32, I64 = TSR_DTYPE_I64,
                    U8 = TSR_DTYPE_U8;

uint64_t f64_bits(double v) {
  return encode_double(v, F64);
}

void rounds_f32_ties_to_even() {
  check_cases({
      {F32, 0x3f801000, F16, 0x3c00, "1 + 2^-11 (tie) -> 1"},
      {F32, 0x3f803000, F16, 0x3c02, "1 + 3*2^-11 (tie) -> 1 + 2^-9"},
      {F32, 0x3f801001, F16, 0x3c01, "just above a tie rounds up"},
      {F32, 0xbf801000, F16, 0xbc00, "-(1 + 2^-11) (tie) -> -1"},
      {F32, 0x45001000, F16, 0x6800, "2049 (tie) -> 2048"},
      {F32, 0x45003000, F16, 0x6802, "2051 (tie) -> 2052"},
      {F32, 0x477fef00, F16, 0x7bff, "65519 -> 65504, the largest f16"},
      {F32, 0x477ff000, F16, 0x7c00, "65520 (tie at the top) -> +inf"},
      {F32, 0x33000000, F16, 0x0000, "2^-25 (tie with 0) -> 0"},
      {F32, 0x33c00000, F16, 0x0002, "3*2^-25 (subnormal tie) -> 2^-23"},
      {F32, 0x33000100, F16, 0x0001, "just above 2^-25 -> 2^-24"},
      {F32, 0x3f808000, BF16, 0x3f80, "1 + 2^-8 (tie) -> 1"},
      {F32, 0x3f818000, BF16, 0x3f82, "1 + 3*2^-8 (tie) -> 1 + 2^-6"},
      {F32, 0x3f808001, BF16, 0x3f81, "just above a tie rounds up"},
      {F32, 0xbf808000, BF16, 0xbf80, "-(1 + 2^-8) (tie) -> -1"},
      {F32, 0x7f7f8000, BF16, 0x7f80, "tie at the top -> +inf"},
      {F32, 0x7f7fffff, BF16, 0x7f80, "the largest f32 -> +inf"},
      {F32, 0x00018000, BF16, 0x0002, "subnormal tie -> even"},
      {F32, 0x00008000, BF16, 0x0000, "smallest subnormal tie -> 0"},
  });
}

void rounds_once() {
  check_cases({
      {F64, f64_bits(1 + std::ldexp(1, -11) + std::ldexp(1, -40)), F16, 0x3c01,
       "f64 1 + 2^-11 + 2^-40 (via f32 it would tie and round down)"},
      {F64, f64_bits(1 + std::ldexp(1, -8) + std::ldexp(1, -40)), BF16, 0x3f81,
       "f64 1 + 2^-8 + 2^-40 (via f32 it would tie and round down)"},
      {I64, encode_int((1 << 24) + (1 << 16) + 1, I64), BF16, 0x4b81,
       "i64 2^24 + 2^16 + 1 (via f32 it would tie and round down)"},
      {I32, encode_int(2049, I32), F16, 0x6800, "i32 2049 (tie) -> 2048"},
      {I32, encode_int(70000, I32), F16, 0x7c00, "i32 70000 -> +inf"},
      {I64, encode_int((int64_t{1} << 53) + 1, I64), F64, f64_bits(std::ldexp(1, 53)),
       "i64 2^53 + 1 (tie) -> 2^53"},
  });
}

void saturates_float_to_int() {
  const uint64_t i32_max = 0x7fffffff, i32_min = 0x80000000;
  const uint64_t i64_max = 0x7fffffffffffffff, i64_min = 0x8000000000000000;
  const double inf = std::numeric_limits<double>::infinity();
  check_cases({
      {F32, encode_double(1e10, F32), I32, i32_max, "1e10 -> INT32_MAX"},
      {F32, encode_double(-1e10, F32), I32, i32_min, "-1e10 -> INT32_MIN"},
      {F32, encode_double(2147483648.0, F32), I32, i32_max, "2^31 -> INT32_MAX"},
      {F32, encode_double(inf, F32), I32, i32_max, "+inf -> INT32_MAX"},
      {F32, encode_double(-inf, F32), I32, i32_min, "-inf -> INT32_MIN"},
      {F32, encode_double(NAN, F32), I32, 0, "NaN -> 0"},
      {F32, encode_double(NAN, F32), I64, 0, "NaN -> 0"},
      {F32, encode_double(NAN, F32), U8, 0, "NaN -> 0"},
      {F16, 0x7e00, I32, 0, "f16 NaN -> 0"},
      {F32, encode_double(2.99, F32), I32, 2, "2.99 truncates to 2"},
      {F32, encode_double(-2.99, F32), I32, 0xfffffffe, "-2.99 truncates to -2"},
      {F32, encode_double(-0.9, F32), I32, 0, "-0.9 truncates to 0"},
      {F32, encode_double(300, F32), U8, 255, "300 -> 255"},
      {F32, encode_double(255.9, F32), U8, 255, "255.9 -> 255"},
      {F32, encode_double(-5, F32), U8, 0, "-5 -> 0"},
      {F16, 0x7c00, U8, 255, "f16 +inf -> 255"},
      {BF16, 0xff80, I64, i64_min, "bf16 -inf -> INT64_MIN"},
      {F64, f64_bits(9.3e18), I64, i64_max, "9.3e18 -> INT64_MAX"},
      {F64, f64_bits(-9.3e18), I64, i64_min, "-9.3e18 -> INT64_MIN"},
      {F64, f64_bits(-9223372036854775808.0), I64, i64_min, "-2^63 is exact"},
      {F64, f64_bits(2147483647.9), I32, i32_max, "2147483647.9 -> INT32_MAX"},
      {F64, f64_bits(-2147483648.9), I32, i32_min, "-2147483648.9 -> INT32_MIN"},
  });
}

void wraps_integer_to_integer() {
  check_cases({
      {I64, 0x100000005ull, I32, 5, "2^32 + 5 -> 5"},
      {I64, 0x80000000ull, I32, 0x80000000, "2^31 -> INT32_MIN"},
      {I32, 0xffffffffull, U8, 0xff, "-1 -> 255"},
      {I32, 0x100, U8, 0, "256 -> 0"},
      {I32, 0x12c, U8, 0x2c, "300 -> 44"},
      {U8, 0xff, I32, 0xff, "255 -> 255 (u8 is unsigned)"},
      {I32, 0x80000000ull, I64, 0xffffffff80000000ull, "INT32_MIN sign-extends"},
  });
}

void keeps_inf_and_nan() {
  check_cases({
      {F32, 0x7f800001, BF16, kAnyNan, "a NaN with only low payload bits stays NaN in bf16"},
      {F32, 0x7f800001, F16, kAnyNan, "a NaN with only low payload bits stays NaN in f16"},
      {F32, 0xffc00000, BF16, kAnyNan, "negative quiet NaN"},
      {F64, 0x7ff0000000000001, F32, kAnyNan, "f64 NaN with low payload"},
      {F64, 0x7ff0000000000001, F16, kAnyNan, "f64 NaN with low payload"},
      {F64, 0x7ff0000000000001, BF16, kAnyNan, "f64 NaN with low payload"},
      {F16, 0x7c01, F32, kAnyNan, "f16 NaN"},
      {BF16, 0x7f81, F64, kAnyNan, "bf16 NaN"},
      {F32, 0x7f800000, F16, 0x7c00, "+inf"},
      {F32, 0xff800000, BF16, 0xff80, "-inf"},
      {F16, 0xfc00, F64, 0xfff0000000000000, "-inf widens"},
      {F32, encode_double(1e5, F32), F16, 0x7c00, "1e5 overflows f16 to +inf"},
      {F32, encode_double(-1e5, F32), F16, 0xfc00, "-1e5 overflows f16 to -inf"},
      {F64, f64_bits(1e39), F32, 0x7f800000, "1e39 overflows f32 to +inf"},
      {F64, f64_bits(1e39), BF16, 0x7f80, "1e39 overflows bf16 to +inf"},
      {F32, 0x80000000, F16, 0x8000, "-0 stays -0"},
  });
}

void rejects_bad_arguments() {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 1024, &block));
  CTS_EXPECT_OK(api().cast_async(block.get(), F16, block.get() + 512, F32, 0, stream.get()))
      << "count 0 is a no-op";
  CTS_EXPECT_STATUS(
      TSR_INVALID_ARGUMENT,
      api().cast_async(block.get(), TSR_DTYPE_COUNT, block.get() + 512, F32, 16, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT, api().cast_async(block.get(), F32, block.get() + 512,
                                                           TSR_DTYPE_COUNT, 16, stream.get()));
  CTS_EXPECT_OK(stream.synchronize());
}

[[maybe_unused]] const bool kRegistered = [] {
  register_pairs();
  register_generated_test("Cast", "RoundsF32TiesToEvenForF16AndBf16", __FILE__, __LINE__,
                          {"cast_async"}, rounds_f32_ties_to_even);
  register_generated_test("Cast", "RoundsF64AndI64ToHalfPrecisionOnce", __FILE__, __LINE__,
                          {"cast_async"}, rounds_once);
  register_generated_test("Cast", "SaturatesFloatToIntegerAndMapsNanToZero", __FILE__, __LINE__,
                          {"cast_async"}, saturates_float_to_int);
  register_generated_test("Cast", "WrapsIntegerToIntegerLikeACCast", __FILE__, __LINE__,
                          {"cast_async"}, wraps_integer_to_integer);
  register_generated_test("Cast", "KeepsInfinityAndNanBetweenFloatTypes", __FILE__, __LINE__,
                          {"cast_async"}, keeps_inf_and_nan);
  register_generated_test("Cast", "RejectsUnknownDtypesAndTreatsZeroCountAsANoOp", __FILE__,
                          __LINE__, {"cast_async"}, rejects_bad_arguments);
  return true;
}();

}  // namespace
}  // namespace tessera::cts
