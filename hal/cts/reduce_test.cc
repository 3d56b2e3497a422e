// reduce_async for every dtype x operator x source count, against the CTS's own float64 / 64-bit
// reference (reference.h). Float inputs are chosen so that the prescribed accumulation is exact
// (multiples of 1/2 below a bound, products of +-{1, 1.5} x 2^k), which makes SUM, PROD, MIN and
// MAX exact to the bit; AVG gets 2 ulp for its final division and rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fixture.h"
#include "reference.h"
#include "support.h"

namespace tessera::cts {
namespace {

constexpr int kSourceCounts[] = {1, 2, 3, 8, 64};
constexpr size_t kElementCounts[] = {1, 7, 1000, 65537};
// Many sources and many elements are each covered; their product is capped, since 64 sources of
// 65537 elements (half a GiB of inputs, reference and copies over the whole matrix) made this
// group two thirds of a CTS run without reaching any code path the smaller cases miss.
constexpr size_t kMaxSourceElements = 8 * 65537;
constexpr uint8_t kGuard = 0xCD;
constexpr size_t kGuardBytes = 64;

const char* verb(tsr_reduce_op op) {
  switch (op) {
    case TSR_REDUCE_SUM: return "Sums";
    case TSR_REDUCE_PROD: return "Multiplies";
    case TSR_REDUCE_MIN: return "TakesTheMinimumOf";
    case TSR_REDUCE_MAX: return "TakesTheMaximumOf";
    default: return "Averages";
  }
}

std::string sources_phrase(int n) {
  switch (n) {
    case 1: return "OneSource";
    case 2: return "TwoSources";
    case 3: return "ThreeSources";
    case 8: return "EightSources";
    default: return "SixtyFourSources";
  }
}

// Below this magnitude every multiple of 1/2 is exact in the dtype and in its accumulator.
double exact_halves_limit(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F16: return 1024;  // 11 significand bits
    case TSR_DTYPE_BF16: return 128;  // 8 significand bits
    case TSR_DTYPE_F32: return 1 << 22;
    default: return 1ull << 50;
  }
}

uint64_t random_half(std::mt19937_64& rng, double limit, tsr_dtype dtype) {
  const auto k_max = static_cast<int64_t>(2 * limit);
  const int64_t k = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * k_max + 1)) - k_max;
  return encode_double(static_cast<double>(k) * 0.5, dtype);
}

// Inputs [source][element] for which the expected result is exact (see the file comment).
std::vector<uint64_t> make_inputs(std::mt19937_64& rng, tsr_dtype dtype, tsr_reduce_op op,
                                  int sources, size_t count) {
  std::vector<uint64_t> values(static_cast<size_t>(sources) * count);
  auto at = [&](int s, size_t i) -> uint64_t& { return values[s * count + i]; };
  for (size_t i = 0; i < count; ++i) {
    if (is_float(dtype) && op == TSR_REDUCE_PROD) {
      // Keep every partial product within 2^+-6 and use 1.5 at most twice: exact even in bf16.
      int exponent = 0;
      int three_halves = 0;
      for (int s = 0; s < sources; ++s) {
        int step = static_cast<int>(rng() % 3) - 1;
        if (std::abs(exponent + step) > 6) step = -step;
        exponent += step;
        double value = std::ldexp(1.0, step);
        if (three_halves < 2 && rng() % 8 == 0) {
          value *= 1.5;
          ++three_halves;
        }
        at(s, i) = encode_double(rng() % 2 ? -value : value, dtype);
      }
    } else if (is_float(dtype)) {
      const bool sums = op == TSR_REDUCE_SUM || op == TSR_REDUCE_AVG;
      const double limit = exact_halves_limit(dtype) / (sums ? sources : 1);
      for (int s = 0; s < sources; ++s) at(s, i) = random_half(rng, limit, dtype);
    } else {
      for (int s = 0; s < sources; ++s) {
        uint64_t bits = rng();
        if (op == TSR_REDUCE_PROD && rng() % 8 != 0) bits |= 1;  // odd: products stay non-zero
        if (op == TSR_REDUCE_AVG && dtype == TSR_DTYPE_I64) {
          bits = static_cast<uint64_t>(static_cast<int64_t>(bits >> 8) - (int64_t{1} << 55));
        }
        at(s, i) = encode_int(static_cast<int64_t>(bits), dtype);
      }
    }
  }
  return values;
}

enum class Destination { kSeparate, kFirstSource, kLastSource };

// Runs one reduction of `values` and compares every element with the reference.
void check_reduce(tsr_dtype dtype, tsr_reduce_op op, int sources, size_t count,
                  const std::vector<uint64_t>& values, Destination destination,
                  const OwnedStream& stream) {
  SCOPED_TRACE(std::string(op_name(op)) + " of " + dtype_name(dtype) + ", " +
               std::to_string(sources) + " sources, " + std::to_string(count) + " elements");
  const size_t size = dtype_size(dtype);
  const size_t source_bytes = count * size;
  std::vector<uint8_t> packed(std::max<size_t>(1, sources * source_bytes));
  for (size_t k = 0; k < values.size(); ++k) store_element(packed.data(), k, values[k], dtype);
  DeviceMemory device_sources;
  DeviceMemory device_dst;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, packed.size(), &device_sources));
  ASSERT_TRUE(copy_and_wait(device_sources.get(), packed.data(), packed.size(), stream));
  std::vector<const void*> pointers(sources);
  for (int s = 0; s < sources; ++s) pointers[s] = device_sources.get() + s * source_bytes;

  uint8_t* dst = nullptr;
  size_t guard_bytes = 0;
  if (destination == Destination::kSeparate) {
    CTS_ASSERT_OK(DeviceMemory::allocate(0, source_bytes + kGuardBytes, &device_dst));
    const std::vector<uint8_t> guard(source_bytes + kGuardBytes, kGuard);
    ASSERT_TRUE(copy_and_wait(device_dst.get(), guard.data(), guard.size(), stream));
    dst = device_dst.get();
    guard_bytes = kGuardBytes;
  } else {
    dst = static_cast<uint8_t*>(
        const_cast<void*>(pointers[destination == Destination::kFirstSource ? 0 : sources - 1]));
  }

  CTS_ASSERT_OK(api().reduce_async(dst, pointers.data(), sources, count, dtype, op, stream.get()));
  std::fill(pointers.begin(), pointers.end(), nullptr);  // the backend must have copied them
  CTS_ASSERT_OK(stream.synchronize());

  std::vector<uint8_t> result(source_bytes + guard_bytes);
  ASSERT_TRUE(copy_and_wait(result.data(), dst, result.size(), stream));
  EXPECT_TRUE(all_bytes_are(result.data() + source_bytes, guard_bytes, kGuard))
      << "reduce_async wrote past the " << count << " destination elements";

  const uint64_t tolerance = is_float(dtype) && op == TSR_REDUCE_AVG ? 2 : 0;
  int reported = 0;
  size_t wrong = 0;
  std::vector<uint64_t> column(sources);
  for (size_t i = 0; i < count; ++i) {
    for (int s = 0; s < sources; ++s) column[s] = values[s * count + i];
    const uint64_t expected = reduce_reference(column.data(), sources, dtype, op);
    const uint64_t actual = load_element(result.data(), i, dtype);
    const bool good =
        is_float(dtype) ? ulp_distance(expected, actual, dtype) <= tolerance : expected == actual;
    if (good) continue;
    ++wrong;
    if (reported++ < 5) {
      std::string inputs;
      for (int s = 0; s < std::min(sources, 8); ++s) {
        inputs += (s ? ", " : "") + format_element(column[s], dtype);
      }
      ADD_FAILURE() << "element " << i << ": got " << format_element(actual, dtype) << ", expected "
                    << format_element(expected, dtype) << " (tolerance " << tolerance
                    << " ulp); sources: " << inputs << (sources > 8 ? ", ..." : "");
    }
  }
  EXPECT_EQ(wrong, 0u) << "elements differ from the reference";
}

void register_matrix() {
  for (tsr_dtype dtype : kAllDtypes) {
    for (tsr_reduce_op op : kAllOps) {
      for (int sources : kSourceCounts) {
        const std::string name =
            std::string(verb(op)) + dtype_name(dtype) + "Across" + sources_phrase(sources);
        register_generated_test(
            "Reduce", name, __FILE__, __LINE__, {"reduce_async"}, [dtype, op, sources] {
              SCOPED_TRACE(CtsTest::seed_note());
              auto rng = CtsTest::make_rng();
              OwnedStream stream;
              CTS_ASSERT_OK(OwnedStream::create(0, &stream));
              for (size_t count : kElementCounts) {
                if (static_cast<size_t>(sources) * count > kMaxSourceElements) continue;
                const auto values = make_inputs(rng, dtype, op, sources, count);
                check_reduce(dtype, op, sources, count, values, Destination::kSeparate, stream);
              }
            });
      }
    }
  }
}

void propagates_nan() {
  SCOPED_TRACE(CtsTest::seed_note());
  auto rng = CtsTest::make_rng();
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  constexpr int kSources = 3;
  constexpr size_t kCount = 1000;
  for (tsr_dtype dtype : {TSR_DTYPE_F32, TSR_DTYPE_F16, TSR_DTYPE_BF16, TSR_DTYPE_F64}) {
    for (tsr_reduce_op op : {TSR_REDUCE_MIN, TSR_REDUCE_MAX}) {
      auto values = make_inputs(rng, dtype, op, kSources, kCount);
      // A NaN in every fourth element, moving through the sources (first, middle, last).
      for (size_t i = 0; i < kCount; i += 4) {
        values[((i / 4) % kSources) * kCount + i] = encode_double(NAN, dtype);
      }
      check_reduce(dtype, op, kSources, kCount, values, Destination::kSeparate, stream);
    }
  }
}

void sums_in_place(Destination destination) {
  SCOPED_TRACE(CtsTest::seed_note());
  auto rng = CtsTest::make_rng();
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  for (tsr_dtype dtype : kAllDtypes) {
    const auto values = make_inputs(rng, dtype, TSR_REDUCE_SUM, 3, 1000);
    check_reduce(dtype, TSR_REDUCE_SUM, 3, 1000, values, destination, stream);
  }
}

void rejects_bad_arguments() {
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  DeviceMemory block;
  CTS_ASSERT_OK(DeviceMemory::allocate(0, 65 * 64, &block));
  std::vector<const void*> pointers(65);
  for (int s = 0; s < 65; ++s) pointers[s] = block.get() + 64 * s;
  void* dst = block.get();
  CTS_EXPECT_STATUS(
      TSR_INVALID_ARGUMENT,
      api().reduce_async(dst, pointers.data(), 0, 16, TSR_DTYPE_F32, TSR_REDUCE_SUM, stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().reduce_async(dst, pointers.data(), 65, 16, TSR_DTYPE_F32, TSR_REDUCE_SUM,
                                       stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().reduce_async(dst, pointers.data(), 2, 16, TSR_DTYPE_COUNT, TSR_REDUCE_SUM,
                                       stream.get()));
  CTS_EXPECT_STATUS(TSR_INVALID_ARGUMENT,
                    api().reduce_async(dst, pointers.data(), 2, 16, TSR_DTYPE_F32,
                                       TSR_REDUCE_OP_COUNT, stream.get()));
  CTS_EXPECT_OK(
      api().reduce_async(dst, pointers.data(), 2, 0, TSR_DTYPE_F32, TSR_REDUCE_SUM, stream.get()))
      << "count 0 is a no-op";
  CTS_EXPECT_OK(stream.synchronize());
}

[[maybe_unused]] const bool kRegistered = [] {
  register_matrix();
  register_generated_test("Reduce", "PropagatesNanThroughMinAndMax", __FILE__, __LINE__,
                          {"reduce_async"}, propagates_nan);
  register_generated_test("Reduce", "SumsInPlaceIntoTheFirstSource", __FILE__, __LINE__,
                          {"reduce_async"}, [] { sums_in_place(Destination::kFirstSource); });
  register_generated_test("Reduce", "SumsInPlaceIntoTheLastSource", __FILE__, __LINE__,
                          {"reduce_async"}, [] { sums_in_place(Destination::kLastSource); });
  register_generated_test("Reduce", "RejectsBadSourceCountsDtypesAndOperators", __FILE__, __LINE__,
                          {"reduce_async"}, rejects_bad_arguments);
  return true;
}();

}  // namespace
}  // namespace tessera::cts
