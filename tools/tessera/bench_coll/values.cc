#include "values.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace tessera::tools::bench_coll {
namespace {

using hal::DType;
using hal::ReduceOp;

template <typename T>
T read_as(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void write_as(void* base, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &v, sizeof(T));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (x < 0x38800000u) {                        // below 2^-14: subnormal half (or zero)
    return sign | uint16_t(std::nearbyint(std::fabs(f) * 16777216.0f));
  }
  x += 0xfffu + ((x >> 13) & 1u);  // round to nearest, ties to even
  x -= 112u << 23;                 // exponent bias 127 -> 15
  return sign | uint16_t(x >> 13);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN stays NaN
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Every integer in [0, limit] is exact in the type and sums up to it do not overflow.
int64_t exact_limit(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 2048;
    case DType::kBF16: return 256;
    case DType::kU8: return 255;
    case DType::kF32: return int64_t(1) << 24;
    case DType::kI32: return int64_t(1) << 30;
    default: return int64_t(1) << 52;
  }
}

// How many factors of two a product may hold and stay exact (and finite, and not wrap).
int max_twos(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 14;
    case DType::kU8: return 7;
    case DType::kI32: return 30;
    case DType::kI64: return 62;
    default: return 100;
  }
}

bool is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

// Maps the raw bits of a float element to integers ordered like the values, so that the distance
// between two of them counts ulps.
int64_t ordered_bits(const void* base, size_t i, DType dtype) {
  int64_t bits = 0;
  int64_t sign_bit = 0;
  switch (dtype) {
    case DType::kF32:
      bits = read_as<uint32_t>(base, i);
      sign_bit = int64_t(1) << 31;
      break;
    case DType::kF64: {
      const uint64_t raw = read_as<uint64_t>(base, i);
      const int64_t magnitude = int64_t(raw & ~(uint64_t(1) << 63));
      return (raw >> 63) ? -magnitude : magnitude;
    }
    default:  // f16, bf16
      bits = read_as<uint16_t>(base, i);
      sign_bit = int64_t(1) << 15;
      break;
  }
  const int64_t magnitude = bits & (sign_bit - 1);
  return (bits & sign_bit) ? -magnitude : magnitude;
}

}  // namespace

double load(const void* base, size_t i, DType dtype) {
  switch (dtype) {
    case DType::kF32: return read_as<float>(base, i);
    case DType::kF64: return read_as<double>(base, i);
    case DType::kF16: return f16_to_f32(read_as<uint16_t>(base, i));
    case DType::kBF16: return std::bit_cast<float>(uint32_t(read_as<uint16_t>(base, i)) << 16);
    case DType::kI32: return read_as<int32_t>(base, i);
    case DType::kI64: return double(read_as<int64_t>(base, i));
    case DType::kU8: return read_as<uint8_t>(base, i);
  }
  return 0;
}

void store(void* base, size_t i, DType dtype, double value) {
  switch (dtype) {
    case DType::kF32: write_as(base, i, float(value)); break;
    case DType::kF64: write_as(base, i, value); break;
    case DType::kF16: write_as(base, i, f32_to_f16(float(value))); break;
    case DType::kBF16: write_as(base, i, f32_to_bf16(float(value))); break;
    case DType::kI32: write_as(base, i, int32_t(value)); break;
    case DType::kI64: write_as(base, i, int64_t(value)); break;
    case DType::kU8: write_as(base, i, uint8_t(value)); break;
  }
}

double reduction_input(ReduceOp op, DType dtype, int nranks, int rank, size_t i) {
  const int64_t limit = exact_limit(dtype);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      const int64_t k = std::clamp<int64_t>(limit / std::max(nranks, 1), 1, 16);
      return double(1 + (int64_t(rank) * 7 + int64_t(i % 1024)) % k);
    }
    case ReduceOp::kProd:
      return (rank < max_twos(dtype) && (size_t(rank) + i) % 2 == 0) ? 2.0 : 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return double(1 +
                    (int64_t(rank) * 7 + int64_t(i % 1024) * 3) % std::min<int64_t>(limit, 100));
  }
  return 0;
}

double reduction_expected(ReduceOp op, DType dtype, int nranks, size_t i) {
  double acc = reduction_input(op, dtype, nranks, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const double v = reduction_input(op, dtype, nranks, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  switch (dtype) {
    case DType::kF64: return acc / nranks;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return double(float(acc) / float(nranks));  // store() rounds f16/bf16
    default: return double(int64_t(acc) / nranks);
  }
}

double movement_input(DType dtype, int rank, size_t i) {
  const int64_t modulus = std::min<int64_t>(exact_limit(dtype), 251);
  return double(1 + (int64_t(rank) * 131 + int64_t(i % 4096)) % modulus);
}

bool element_matches(const void* base, size_t i, DType dtype, double expected, int ulps) {
  unsigned char want[8];
  store(want, 0, dtype, expected);
  const size_t bytes = hal::dtype_size(dtype);
  if (std::memcmp(static_cast<const unsigned char*>(base) + i * bytes, want, bytes) == 0) {
    return true;
  }
  if (ulps == 0 || !is_float(dtype)) return false;
  const int64_t distance = ordered_bits(base, i, dtype) - ordered_bits(want, 0, dtype);
  return distance >= -ulps && distance <= ulps;
}

}  // namespace tessera::tools::bench_coll
