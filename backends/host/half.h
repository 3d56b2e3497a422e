// Conversions between f32 and the 16-bit floats (IEEE binary16 "f16" and bfloat16), rounding to
// nearest even, with NaN, infinities and subnormals handled exactly.
//
// Every function is branch-free (selects, not branches) so that GCC vectorises the loops that call
// them with plain SSE2, the x86-64 baseline, without -march flags. They rely on the default
// floating-point environment (round-to-nearest); flush-to-zero and denormals-are-zero do not
// change the results, because the float arithmetic below only ever sees normal numbers or inputs
// whose correct result is zero anyway.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::host {

inline uint32_t f32_bits(float value) {
  return std::bit_cast<uint32_t>(value);
}
inline float f32_from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// f16 -> f32 is exact.
inline float f16_to_f32(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t shifted = uint32_t(half & 0x7fffu) << 13;  // exponent and mantissa, f32-aligned
  const uint32_t exponent = shifted & 0x0f800000u;
  // Normal: rebias the exponent by 127 - 15.
  const uint32_t normal = shifted + 0x38000000u;
  // Inf/NaN: exponent 31 -> 255 (NaN payloads kept).
  const uint32_t inf_nan = shifted + 0x70000000u;
  // Zero/subnormal: read the mantissa as 2^-14 * (1 + m/1024), then subtract the implicit 2^-14:
  // exact, and both operands are normal floats.
  const uint32_t subnormal = f32_bits(f32_from_bits(shifted + 0x38800000u) - 6.103515625e-05f);
  const uint32_t magnitude =
      exponent == 0x0f800000u ? inf_nan : (exponent == 0 ? subnormal : normal);
  return f32_from_bits(sign | magnitude);
}

// f32 -> f16, round to nearest even; overflow gives infinity, NaN gives a quiet NaN (0x7e00).
inline uint16_t f32_to_f16(float value) {
  const uint32_t bits = f32_bits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // >= 65536 (or Inf/NaN): infinity or NaN. [65520, 65536) rounds up to infinity below.
  const uint32_t inf_nan = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // < 2^-14: subnormal or zero. Adding 0.5 (whose ulp is 2^-24, the f16 subnormal step) makes the
  // FPU round the value to a multiple of 2^-24, ties to even; the low bits are then the result.
  const uint32_t subnormal = f32_bits(f32_from_bits(magnitude) + 0.5f) - 0x3f000000u;
  // Normal: rebias by 15 - 127 and round the 13 dropped bits to nearest even; a carry out of the
  // mantissa bumps the exponent, up to infinity, as it should.
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t normal = (magnitude + 0xc8000fffu + odd) >> 13;
  const uint32_t result =
      magnitude >= 0x47800000u ? inf_nan : (magnitude < 0x38800000u ? subnormal : normal);
  return uint16_t(result | sign);
}

// bf16 -> f32 is exact: bf16 is the top half of an f32.
inline float bf16_to_f32(uint16_t half) {
  return f32_from_bits(uint32_t(half) << 16);
}

// f32 -> bf16, round to nearest even; NaN stays NaN (quietened, sign and top payload kept).
inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = f32_bits(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  return uint16_t((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// f64 -> f32 rounding to odd: truncate, and set the last bit when anything was dropped. A value
// rounded to odd with 2+ spare bits, then rounded to nearest even into a narrower format, gives
// the correctly rounded result; rounding f64 -> f32 -> f16 to nearest twice would not.
inline float f64_to_f32_round_odd(double value) {
  const float nearest = float(value);
  const double back = double(nearest);
  const bool inexact = back != value && value == value;  // NaN is never "inexact"
  const bool away = std::fabs(back) > std::fabs(value);  // rounded away from zero
  const uint32_t bits = f32_bits(nearest) - ((inexact && away) ? 1u : 0u);
  return f32_from_bits(bits | (inexact ? 1u : 0u));
}

// i64 -> f32 rounding to odd (see above): i64 -> f32 directly would be correct, but i64 -> f32 ->
// bf16 double-rounds. Exact for |v| < 2^24.
inline float i64_to_f32_round_odd(int64_t value) {
  const uint64_t magnitude = value < 0 ? 0 - uint64_t(value) : uint64_t(value);
  if (magnitude < (uint64_t(1) << 24)) return float(value);
  const int shift = 64 - std::countl_zero(magnitude) - 24;  // keep 24 significant bits
  uint64_t kept = magnitude >> shift;
  kept |= (magnitude & ((uint64_t(1) << shift) - 1)) != 0 ? 1u : 0u;              // sticky bit
  const float result = float(kept) * f32_from_bits(uint32_t(127 + shift) << 23);  // exact
  return value < 0 ? -result : result;
}

}  // namespace tessera::host
