#include "reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tessera::cts {
namespace {

static_assert(std::endian::native == std::endian::little,
              "load_element/store_element copy the low bytes of a uint64_t");

constexpr FloatFormat kF16{11, 15, 16};
constexpr FloatFormat kBf16{8, 127, 16};
constexpr FloatFormat kF32{24, 127, 32};
constexpr FloatFormat kF64{53, 1023, 64};

uint64_t sign_mask(const FloatFormat& f) {
  return 1ull << (f.width - 1);
}
uint64_t infinity_bits(const FloatFormat& f) {
  return ((1ull << (f.width - f.precision)) - 1) << (f.precision - 1);
}
uint64_t mantissa_mask(const FloatFormat& f) {
  return (1ull << (f.precision - 1)) - 1;
}
uint64_t quiet_nan_bits(const FloatFormat& f) {
  return infinity_bits(f) | (1ull << (f.precision - 2));
}

int integer_width(tsr_dtype dtype) {
  return static_cast<int>(dtype_size(dtype)) * 8;
}

uint64_t low_bits(uint64_t value, tsr_dtype dtype) {
  int width = integer_width(dtype);
  return width == 64 ? value : value & ((1ull << width) - 1);
}

void integer_limits(tsr_dtype dtype, int64_t* lo, int64_t* hi) {
  switch (dtype) {
    case TSR_DTYPE_I32:
      *lo = std::numeric_limits<int32_t>::min();
      *hi = std::numeric_limits<int32_t>::max();
      return;
    case TSR_DTYPE_U8:
      *lo = 0;
      *hi = 255;
      return;
    default:
      *lo = std::numeric_limits<int64_t>::min();
      *hi = std::numeric_limits<int64_t>::max();
      return;
  }
}

}  // namespace

size_t dtype_size(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return 4;
    case TSR_DTYPE_F16: return 2;
    case TSR_DTYPE_BF16: return 2;
    case TSR_DTYPE_F64: return 8;
    case TSR_DTYPE_I32: return 4;
    case TSR_DTYPE_I64: return 8;
    case TSR_DTYPE_U8: return 1;
    default: return 0;
  }
}

bool is_float(tsr_dtype dtype) {
  return dtype == TSR_DTYPE_F32 || dtype == TSR_DTYPE_F16 || dtype == TSR_DTYPE_BF16 ||
         dtype == TSR_DTYPE_F64;
}

const char* dtype_name(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return "F32";
    case TSR_DTYPE_F16: return "F16";
    case TSR_DTYPE_BF16: return "Bf16";
    case TSR_DTYPE_F64: return "F64";
    case TSR_DTYPE_I32: return "I32";
    case TSR_DTYPE_I64: return "I64";
    case TSR_DTYPE_U8: return "U8";
    default: return "UnknownDtype";
  }
}

const char* op_name(tsr_reduce_op op) {
  switch (op) {
    case TSR_REDUCE_SUM: return "sum";
    case TSR_REDUCE_PROD: return "prod";
    case TSR_REDUCE_MIN: return "min";
    case TSR_REDUCE_MAX: return "max";
    case TSR_REDUCE_AVG: return "avg";
    default: return "unknown-op";
  }
}

const FloatFormat& float_format(tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_F16: return kF16;
    case TSR_DTYPE_BF16: return kBf16;
    case TSR_DTYPE_F64: return kF64;
    default: return kF32;
  }
}

uint64_t round_to_format(bool negative, uint64_t magnitude, int exponent,
                         const FloatFormat& format) {
  const uint64_t sign = negative ? sign_mask(format) : 0;
  if (magnitude == 0) return sign;
  const int p = format.precision;
  const int emin = 1 - format.emax;
  const int msb = 63 - std::countl_zero(magnitude);
  const int value_exponent = msb + exponent;  // the value lies in [2^e, 2^(e+1))
  // Exponent of the last significand bit: fixed at the bottom of the subnormal range.
  int quantum = std::max(value_exponent, emin) - (p - 1);
  const int shift = quantum - exponent;
  uint64_t m;
  if (shift <= 0) {
    m = magnitude << -shift;  // exact: fits in p bits by the choice of quantum
  } else if (shift > 64) {
    m = 0;  // below half a quantum: rounds to zero
  } else {
    const unsigned __int128 wide = magnitude;
    m = static_cast<uint64_t>(wide >> shift);
    const unsigned __int128 rest = wide - (static_cast<unsigned __int128>(m) << shift);
    const unsigned __int128 half = static_cast<unsigned __int128>(1) << (shift - 1);
    if (rest > half || (rest == half && (m & 1) != 0)) ++m;
  }
  if ((m >> p) != 0) {  // rounding carried into the next binade
    m >>= 1;
    ++quantum;
  }
  if (m == 0) return sign;
  const uint64_t hidden = 1ull << (p - 1);
  if (m < hidden) return sign | m;  // subnormal: biased exponent 0
  const int result_exponent = quantum + (p - 1);
  if (result_exponent > format.emax) return sign | infinity_bits(format);
  const uint64_t biased = static_cast<uint64_t>(result_exponent + format.emax);
  return sign | (biased << (p - 1)) | (m - hidden);
}

uint64_t encode_double(double value, tsr_dtype dtype) {
  const FloatFormat& f = float_format(dtype);
  const bool negative = std::signbit(value);
  if (std::isnan(value)) return quiet_nan_bits(f);
  if (std::isinf(value)) return (negative ? sign_mask(f) : 0) | infinity_bits(f);
  if (value == 0) return negative ? sign_mask(f) : 0;
  int binary_exponent = 0;
  const double fraction = std::frexp(std::fabs(value), &binary_exponent);  // in [0.5, 1)
  const auto magnitude = static_cast<uint64_t>(std::ldexp(fraction, 53));  // exact
  return round_to_format(negative, magnitude, binary_exponent - 53, f);
}

double decode_float(uint64_t bits, tsr_dtype dtype) {
  const FloatFormat& f = float_format(dtype);
  const bool negative = (bits & sign_mask(f)) != 0;
  const uint64_t biased = (bits & infinity_bits(f)) >> (f.precision - 1);
  const uint64_t mantissa = bits & mantissa_mask(f);
  const uint64_t max_biased = infinity_bits(f) >> (f.precision - 1);
  double magnitude;
  if (biased == max_biased) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (biased == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.emax - (f.precision - 1));
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (1ull << (f.precision - 1))),
                           static_cast<int>(biased) - f.emax - (f.precision - 1));
  }
  return negative ? -magnitude : magnitude;
}

uint64_t encode_int(int64_t value, tsr_dtype dtype) {
  if (!is_float(dtype)) return low_bits(static_cast<uint64_t>(value), dtype);
  const bool negative = value < 0;
  // Magnitude without overflow for INT64_MIN.
  const uint64_t magnitude =
      negative ? static_cast<uint64_t>(-(value + 1)) + 1 : static_cast<uint64_t>(value);
  return round_to_format(negative, magnitude, 0, float_format(dtype));
}

int64_t decode_int(uint64_t bits, tsr_dtype dtype) {
  switch (dtype) {
    case TSR_DTYPE_I32: return static_cast<int32_t>(static_cast<uint32_t>(bits));
    case TSR_DTYPE_U8: return static_cast<int64_t>(bits & 0xff);
    default: return static_cast<int64_t>(bits);
  }
}

bool is_nan(uint64_t bits, tsr_dtype dtype) {
  if (!is_float(dtype)) return false;
  const FloatFormat& f = float_format(dtype);
  return (bits & infinity_bits(f)) == infinity_bits(f) && (bits & mantissa_mask(f)) != 0;
}

uint64_t ulp_distance(uint64_t a, uint64_t b, tsr_dtype dtype) {
  if (is_nan(a, dtype) || is_nan(b, dtype)) {
    return is_nan(a, dtype) && is_nan(b, dtype) ? 0 : std::numeric_limits<uint64_t>::max();
  }
  const FloatFormat& f = float_format(dtype);
  // Map encodings onto a line where neighbours differ by one; +0 and -0 both land on 0.
  auto ordered = [&](uint64_t bits) -> __int128 {
    const auto magnitude = static_cast<__int128>(bits & ~sign_mask(f));
    return (bits & sign_mask(f)) != 0 ? -magnitude : magnitude;
  };
  const __int128 d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

uint64_t load_element(const void* base, size_t index, tsr_dtype dtype) {
  const size_t size = dtype_size(dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const uint8_t*>(base) + index * size, size);
  return bits;
}

void store_element(void* base, size_t index, uint64_t bits, tsr_dtype dtype) {
  const size_t size = dtype_size(dtype);
  std::memcpy(static_cast<uint8_t*>(base) + index * size, &bits, size);
}

std::string format_element(uint64_t bits, tsr_dtype dtype) {
  char text[96];
  if (is_float(dtype)) {
    std::snprintf(text, sizeof text, "0x%llx (%.17g)", static_cast<unsigned long long>(bits),
                  decode_float(bits, dtype));
  } else {
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(decode_int(bits, dtype)));
  }
  return text;
}

uint64_t reduce_reference(const uint64_t* values, int count, tsr_dtype dtype, tsr_reduce_op op) {
  if (is_float(dtype)) {
    double acc = decode_float(values[0], dtype);
    bool saw_nan = std::isnan(acc);
    for (int i = 1; i < count; ++i) {
      const double v = decode_float(values[i], dtype);
      saw_nan = saw_nan || std::isnan(v);
      switch (op) {
        case TSR_REDUCE_SUM:
        case TSR_REDUCE_AVG: acc += v; break;
        case TSR_REDUCE_PROD: acc *= v; break;
        case TSR_REDUCE_MIN: acc = v < acc ? v : acc; break;
        case TSR_REDUCE_MAX: acc = v > acc ? v : acc; break;
        default: break;
      }
    }
    if (saw_nan) acc = std::numeric_limits<double>::quiet_NaN();
    if (op == TSR_REDUCE_AVG) acc /= count;
    return encode_double(acc, dtype);
  }
  // Integers: wrap-around arithmetic in uint64_t, cut to the dtype's width at the end; both SUM
  // and PROD modulo 2^64 agree with the same operations modulo 2^width.
  uint64_t wrapped = static_cast<uint64_t>(decode_int(values[0], dtype));
  int64_t extreme = decode_int(values[0], dtype);
  for (int i = 1; i < count; ++i) {
    const int64_t v = decode_int(values[i], dtype);
    switch (op) {
      case TSR_REDUCE_SUM:
      case TSR_REDUCE_AVG: wrapped += static_cast<uint64_t>(v); break;
      case TSR_REDUCE_PROD: wrapped *= static_cast<uint64_t>(v); break;
      case TSR_REDUCE_MIN: extreme = std::min(extreme, v); break;
      case TSR_REDUCE_MAX: extreme = std::max(extreme, v); break;
      default: break;
    }
  }
  switch (op) {
    case TSR_REDUCE_MIN:
    case TSR_REDUCE_MAX: return encode_int(extreme, dtype);
    case TSR_REDUCE_AVG:  // 64-bit accumulation, C++ division truncates toward zero
      return encode_int(static_cast<int64_t>(wrapped) / count, dtype);
    default: return low_bits(wrapped, dtype);
  }
}

uint64_t cast_reference(uint64_t src_bits, tsr_dtype src, tsr_dtype dst, bool* any_nan) {
  *any_nan = false;
  if (is_float(src)) {
    const double v = decode_float(src_bits, src);
    if (is_float(dst)) {
      *any_nan = std::isnan(v);
      return encode_double(v, dst);
    }
    if (std::isnan(v)) return 0;
    int64_t lo = 0;
    int64_t hi = 0;
    integer_limits(dst, &lo, &hi);
    const double t = std::trunc(v);
    int64_t result;
    if (t >= std::ldexp(1.0, 63) || t >= static_cast<double>(hi)) {
      result = hi;  // for i64 the first test matters: (double)INT64_MAX rounds up to 2^63
    } else if (t <= static_cast<double>(lo)) {
      result = lo;
    } else {
      result = static_cast<int64_t>(t);
    }
    return encode_int(result, dst);
  }
  const int64_t v = decode_int(src_bits, src);
  // Integer to float rounds; integer to integer is modular, a C cast (backend_abi.h).
  return encode_int(v, dst);
}

}  // namespace tessera::cts
