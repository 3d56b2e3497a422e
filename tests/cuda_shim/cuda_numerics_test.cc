// The arithmetic of the CUDA backend's kernels (backends/cuda/numerics.cuh: element formats,
// reducers, conversions) run on the CPU, where no GPU is needed, against the conformance suite's
// independent IEEE reference (hal/cts/reference.h). The kernels call exactly these functions; on
// the device the few intrinsics they wrap (__double2float_rz, __ll2float_rz, ...) replace the host
// equivalents checked here. tessera-cts checks the real kernels on a GPU (bench/gpu_check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics.cuh"
#include "reference.h"

namespace tessera::cuda::kernels {
namespace {

using cts::decode_float;
using cts::dtype_name;
using cts::encode_double;

template <typename D>
typename D::S from_bits(uint64_t bits) {
  typename D::S value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
template <typename S>
uint64_t to_bits(S value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

// Calls f.template operator()<D>() with the format type for `dtype`.
template <typename F>
void with_format(tsr_dtype dtype, F&& f) {
  switch (dtype) {
    case TSR_DTYPE_F32: f(F32{}); break;
    case TSR_DTYPE_F16: f(F16{}); break;
    case TSR_DTYPE_BF16: f(BF16{}); break;
    case TSR_DTYPE_F64: f(F64{}); break;
    case TSR_DTYPE_I32: f(I32{}); break;
    case TSR_DTYPE_I64: f(I64{}); break;
    default: f(U8{}); break;
  }
}

// What cast.cu computes for one element.
uint64_t cast_one(uint64_t bits, tsr_dtype from, tsr_dtype to) {
  if (from == to) return bits;  // identity casts copy the bits
  uint64_t out = 0;
  with_format(from, [&](auto src) {
    using From = decltype(src);
    with_format(to, [&](auto dst) {
      using To = decltype(dst);
      out = to_bits(Dest<To>::from(Source<From>::value(from_bits<From>(bits))));
    });
  });
  return out;
}

std::vector<uint64_t> interesting_values(tsr_dtype dtype, std::mt19937_64& rng) {
  std::vector<uint64_t> values;
  if (cts::is_float(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    for (double v :
         {0.0,     -0.0,  1.0,   -1.5, 0.1,   65504.0, 65520.0,      1e5,           -1e5,
          3.4e38,  1e39,  1e-8,  6e-8, 1e-40, 1e-45,   2147483647.5, -2147483648.9, 9.3e18,
          -9.3e18, 255.9, 256.0, -0.7, inf,   -inf,    std::nan("")}) {
      values.push_back(encode_double(v, dtype));
    }
    const uint64_t mask =
        cts::dtype_size(dtype) == 8 ? ~0ull : (1ull << (8 * cts::dtype_size(dtype))) - 1;
    for (int i = 0; i < 4000; ++i) values.push_back(rng() & mask);  // any encoding
    for (int i = 0; i < 4000; ++i) {
      values.push_back(encode_double(
          std::ldexp(double(int64_t(rng() % 2000001) - 1000000), int(rng() % 80) - 60), dtype));
    }
  } else {
    for (int64_t v : {int64_t(0), int64_t(1), int64_t(-1), int64_t(255), int64_t(256),
                      int64_t(16777217), int64_t(2147483647), int64_t(-2147483647) - 1,
                      std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                      int64_t(9007199254740993), int64_t(-9007199254740993)}) {
      values.push_back(cts::encode_int(v, dtype));
    }
    for (int i = 0; i < 4000; ++i) {
      const int shift = int(rng() % 64);
      values.push_back(cts::encode_int(int64_t(rng() >> shift) * (rng() % 2 ? 1 : -1), dtype));
    }
  }
  return values;
}

TEST(CudaNumerics, CastsEveryDtypePairLikeTheReference) {
  std::mt19937_64 rng(12345);
  for (tsr_dtype from : cts::kAllDtypes) {
    const std::vector<uint64_t> values = interesting_values(from, rng);
    for (tsr_dtype to : cts::kAllDtypes) {
      int reported = 0;
      for (uint64_t bits : values) {
        bool any_nan = false;
        const uint64_t expected = cts::cast_reference(bits, from, to, &any_nan);
        const uint64_t actual = cast_one(bits, from, to);
        const bool good = any_nan ? cts::is_nan(actual, to) : actual == expected;
        if (!good && reported++ < 3) {
          ADD_FAILURE() << dtype_name(from) << " " << cts::format_element(bits, from) << " -> "
                        << dtype_name(to) << ": got " << cts::format_element(actual, to)
                        << ", expected " << cts::format_element(expected, to);
        }
      }
    }
  }
}

// What reduce.cu computes for one element.
uint64_t reduce_one(const std::vector<uint64_t>& column, tsr_dtype dtype, tsr_reduce_op op) {
  uint64_t out = 0;
  with_format(dtype, [&](auto format) {
    using D = decltype(format);
    auto run = [&](auto reducer) {
      using R = decltype(reducer);
      auto acc = R::init(from_bits<D>(column[0]));
      for (size_t s = 1; s < column.size(); ++s) acc = R::combine(acc, from_bits<D>(column[s]));
      out = to_bits(R::finish(acc, int(column.size())));
    };
    switch (op) {
      case TSR_REDUCE_SUM: run(Reducer<D, TSR_REDUCE_SUM>{}); break;
      case TSR_REDUCE_PROD: run(Reducer<D, TSR_REDUCE_PROD>{}); break;
      case TSR_REDUCE_MIN: run(Reducer<D, TSR_REDUCE_MIN>{}); break;
      case TSR_REDUCE_MAX: run(Reducer<D, TSR_REDUCE_MAX>{}); break;
      default: run(Reducer<D, TSR_REDUCE_AVG>{}); break;
    }
  });
  return out;
}

double exact_limit(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F16: return 1024;
    case TSR_DTYPE_BF16: return 128;
    case TSR_DTYPE_F32: return 1 << 22;
    default: return double(1ull << 50);
  }
}

TEST(CudaNumerics, ReducesEveryDtypeAndOperatorLikeTheReference) {
  std::mt19937_64 rng(54321);
  for (tsr_dtype dtype : cts::kAllDtypes) {
    for (tsr_reduce_op op : cts::kAllOps) {
      for (int n : {1, 2, 3, 8, 64}) {
        int reported = 0;
        for (int trial = 0; trial < 300; ++trial) {
          std::vector<uint64_t> column(static_cast<size_t>(n));
          for (int s = 0; s < n; ++s) {
            if (cts::is_float(dtype) && op == TSR_REDUCE_PROD) {
              column[s] = encode_double((rng() % 2 ? -1.0 : 1.0) * (s % 7 == 3 ? 1.5 : 1.0) *
                                            std::ldexp(1.0, int(rng() % 3) - 1) / (s % 2 ? 2 : 1),
                                        dtype);
            } else if (cts::is_float(dtype)) {
              const double limit = exact_limit(dtype) / n;
              const int64_t k = int64_t(rng() % uint64_t(4 * limit + 1)) - int64_t(2 * limit);
              column[s] = encode_double(double(k) * 0.5, dtype);
            } else {
              column[s] = cts::encode_int(int64_t(rng()), dtype);
            }
          }
          if (cts::is_float(dtype) && trial % 50 == 7)
            column[size_t(trial) % n] = encode_double(NAN, dtype);
          const uint64_t expected = cts::reduce_reference(column.data(), n, dtype, op);
          const uint64_t actual = reduce_one(column, dtype, op);
          const bool float_op = cts::is_float(dtype);
          const uint64_t tolerance = float_op && op == TSR_REDUCE_AVG ? 2 : 0;
          const bool good = float_op ? cts::ulp_distance(expected, actual, dtype) <= tolerance
                                     : expected == actual;
          if (!good && reported++ < 3) {
            ADD_FAILURE() << cts::op_name(op) << " of " << n << " " << dtype_name(dtype) << ": got "
                          << cts::format_element(actual, dtype) << ", expected "
                          << cts::format_element(expected, dtype);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::cuda::kernels
