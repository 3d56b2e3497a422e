// What every host GPT kernel shares: bf16 and f16 loads and round-to-nearest-even stores, the
// dtype dispatch that refuses other types by name, the grid-stride walk over an index space, and
// the error text a kernel returns. Internal to the host module (hidden visibility).
//
// A kernel is a C++ function taking the contract's arguments (kernels.h, after the stream) and
// returning nullptr on success or a message (the module's entry copies it at once). It reads the
// launch geometry from `current_call()`, which the entry sets for the calling thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tessera/hal/backend_abi.h"

namespace tessera::gpt::host {

using Bf16 = uint16_t;
// IEEE binary16 bits, a distinct type so that load/store overload on it (Bf16 is the plain
// uint16_t). Same size and alignment as the 16-bit element it wraps.
struct F16 {
  uint16_t bits;
};
static_assert(sizeof(F16) == 2 && alignof(F16) == 2);

// The launch being run on this thread (one call per block; blocks run one at a time).
const tsr_host_kernel_call& current_call();
void set_current_call(const tsr_host_kernel_call* call);

// printf-style text kept in a per-thread buffer until the next message on this thread.
const char* error(const char* format, ...) __attribute__((format(printf, 1, 2)));

inline float load(const float* p) {
  return *p;
}
inline float load(const Bf16* p) {
  const uint32_t bits = uint32_t(*p) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline void store(float* p, float value) {
  *p = value;
}
// Round to nearest even; NaN stays a (quiet) NaN rather than rounding into infinity.
inline void store(Bf16* p, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    *p = Bf16((bits >> 16) | 0x0040u);
    return;
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  *p = Bf16(bits >> 16);
}

// f16 <-> f32, the same arithmetic as the host backend's (backends/host/half.h, which the kernel
// image cannot link): exact widening; narrowing rounds to nearest even, overflow (>= 65520) gives
// infinity, NaN a quiet NaN (0x7e00), subnormals exact. Relies on round-to-nearest.
inline float load(const F16* p) {
  const uint32_t sign = uint32_t(p->bits & 0x8000u) << 16;
  const uint32_t shifted = uint32_t(p->bits & 0x7fffu) << 13;  // exponent and mantissa, f32-aligned
  const uint32_t exponent = shifted & 0x0f800000u;
  uint32_t magnitude = shifted + 0x38000000u;                      // normal: rebias 127 - 15
  if (exponent == 0x0f800000u) magnitude = shifted + 0x70000000u;  // inf/NaN: exponent 255
  if (exponent == 0) {  // zero/subnormal: 2^-14 * (1 + m/1024) - 2^-14, exact
    float sub;
    const uint32_t biased = shifted + 0x38800000u;
    std::memcpy(&sub, &biased, sizeof sub);
    sub -= 6.103515625e-05f;
    std::memcpy(&magnitude, &sub, sizeof magnitude);
  }
  const uint32_t bits = sign | magnitude;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline void store(F16* p, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  uint32_t result;
  if (magnitude >= 0x47800000u) {  // >= 65536, inf or NaN ([65520, 65536) rounds up below)
    result = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (magnitude < 0x38800000u) {  // < 2^-14: adding 0.5 rounds to a multiple of 2^-24
    float m;
    std::memcpy(&m, &magnitude, sizeof m);
    m += 0.5f;
    std::memcpy(&result, &m, sizeof result);
    result -= 0x3f000000u;
  } else {  // normal: rebias by 15 - 127, round the 13 dropped bits to nearest even
    result = (magnitude + 0xc8000fffu + ((magnitude >> 13) & 1u)) >> 13;
  }
  p->bits = uint16_t(result | sign);
}

// Calls body(type_tag) with float{}, Bf16{} or F16{} for `dtype`; other dtypes are refused naming
// `kernel`, the argument and the value.
template <typename Body>
const char* with_dtype(const char* kernel, const char* argument, uint32_t dtype, Body&& body) {
  if (dtype == TSR_DTYPE_F32) return body(float{});
  if (dtype == TSR_DTYPE_BF16) return body(Bf16{});
  if (dtype == TSR_DTYPE_F16) return body(F16{});
  return error("%s: %s %u is not f32 (%d), bf16 (%d) or f16 (%d)", kernel, argument, dtype,
               int(TSR_DTYPE_F32), int(TSR_DTYPE_BF16), int(TSR_DTYPE_F16));
}

// This block's place in the launch, all three dimensions flattened (x fastest).
struct Lanes {
  uint64_t first;    // the index of this block's thread 0
  uint64_t threads;  // threads per block
  uint64_t stride;   // threads in the whole grid
};
inline Lanes lanes() {
  const tsr_host_kernel_call& c = current_call();
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  const uint64_t block =
      c.block_index.x +
      uint64_t(c.grid.x) * (c.block_index.y + uint64_t(c.grid.y) * c.block_index.z);
  const uint64_t blocks = uint64_t(c.grid.x) * c.grid.y * c.grid.z;
  return {block * threads, threads, blocks * threads};
}
// Whether this launch is one thread in one block: the kernel may then walk its index space in
// any order that gives each item the same arithmetic (cache-friendly loops).
inline bool single_lane() {
  return lanes().stride == 1;
}

// body(i) for every i < n this block owns, as a GPU grid-stride loop does it. One block of one
// thread (GptKernels' host geometry) is a plain loop the compiler can vectorise.
template <typename Body>
void grid_stride(uint64_t n, Body&& body) {
  const Lanes l = lanes();
  if (l.stride == 1) {
    for (uint64_t i = 0; i < n; ++i) body(i);
    return;
  }
  for (uint64_t t = 0; t < l.threads; ++t) {
    for (uint64_t i = l.first + t; i < n; i += l.stride) body(i);
  }
}

// A dot product in eight interleaved partial sums, combined in a fixed order: deterministic,
// and in a shape the compiler vectorises without reassociating anything itself.
template <typename A, typename B>
float dot(const A* a, const B* b, uint64_t n) {
  float partial[8] = {};
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int lane = 0; lane < 8; ++lane) partial[lane] += load(a + i + lane) * load(b + i + lane);
  }
  for (; i < n; ++i) partial[i % 8] += load(a + i) * load(b + i);
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

}  // namespace tessera::gpt::host
