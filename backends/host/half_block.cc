#include "half_block.h"

#include "dispatch.h"
#include "half.h"

// TESSERA_HOST_NO_DISPATCH (see dispatch.h) also turns off the F16C/AVX2 paths here, so the
// portable code can be tested on a machine that has those instructions.
#if defined(__x86_64__) && !defined(TESSERA_HOST_NO_DISPATCH)
#include <cpuid.h>
#include <immintrin.h>
#define TESSERA_HOST_X86 1
#else
#define TESSERA_HOST_X86 0
#endif

namespace tessera::host {
namespace {

// ---- portable versions: the scalar functions of half.h, auto-vectorised ----------------------

TESSERA_HOST_KERNEL void widen_f16_portable(float* __restrict out, const uint16_t* __restrict in,
                                            size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}
TESSERA_HOST_KERNEL void narrow_f16_portable(uint16_t* __restrict out, const float* __restrict in,
                                             size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

#if TESSERA_HOST_X86
// ---- F16C: one instruction per 8 elements, rounding to nearest even -------------------------
// The hardware matches half.h: RNE, overflow to infinity, f16 subnormals kept, NaN stays NaN
// (vcvtps2ph keeps the top payload bits where half.h writes the canonical 0x7e00; the ABI does
// not specify payloads). An f32 denormal input rounds to a signed f16 zero with or without DAZ.

__attribute__((target("avx,f16c"))) void widen_f16_f16c(float* __restrict out,
                                                        const uint16_t* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

__attribute__((target("avx,f16c"))) void narrow_f16_f16c(uint16_t* __restrict out,
                                                         const float* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

// ---- bf16 narrowing with SSE2 (baseline) ------------------------------------------------------
// GCC's own narrowing of 32-bit lanes to 16 is a long shuffle sequence on SSE2; an arithmetic
// shift keeps each lane in int16 range so one packssdw does it exactly.
inline __m128i bf16_round4(__m128i bits) {
  const __m128i magnitude = _mm_and_si128(bits, _mm_set1_epi32(0x7fffffff));
  const __m128i nan = _mm_cmpgt_epi32(magnitude, _mm_set1_epi32(0x7f800000));
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(bits, 16), _mm_set1_epi32(1));
  const __m128i rounded = _mm_add_epi32(_mm_add_epi32(bits, _mm_set1_epi32(0x7fff)), lsb);
  const __m128i quiet = _mm_or_si128(bits, _mm_set1_epi32(0x00400000));
  const __m128i chosen = _mm_or_si128(_mm_and_si128(nan, quiet), _mm_andnot_si128(nan, rounded));
  return _mm_srai_epi32(chosen, 16);
}

void narrow_bf16_sse2(uint16_t* __restrict out, const float* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i lo = bf16_round4(_mm_castps_si128(_mm_loadu_ps(in + i)));
    __m128i hi = bf16_round4(_mm_castps_si128(_mm_loadu_ps(in + i + 4)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi32(lo, hi));
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

__attribute__((target("avx2"))) inline __m256i bf16_round8(__m256i bits) {
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  return _mm256_srai_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
}

__attribute__((target("avx2"))) void narrow_bf16_avx2(uint16_t* __restrict out,
                                                      const float* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i lo = bf16_round8(_mm256_castps_si256(_mm256_loadu_ps(in + i)));
    __m256i hi = bf16_round8(_mm256_castps_si256(_mm256_loadu_ps(in + i + 8)));
    // packs works per 128-bit lane: [lo0-3 hi0-3 lo4-7 hi4-7] -> reorder the 64-bit quarters.
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  narrow_bf16_sse2(out + i, in + i, n - i);
}
#endif

using WidenFn = void (*)(float*, const uint16_t*, size_t);
using NarrowFn = void (*)(uint16_t*, const float*, size_t);

struct F16Paths {
  WidenFn widen;
  NarrowFn narrow;
  const char* isa;
};

NarrowFn select_narrow_bf16() {
#if TESSERA_HOST_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return &narrow_bf16_avx2;
  return &narrow_bf16_sse2;
#else
  return [](uint16_t* out, const float* in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
  };
#endif
}

F16Paths select_f16() {
#if TESSERA_HOST_X86
  // "avx" also checks that the OS saves YMM state; F16C is read from CPUID leaf 1 directly
  // because not every compiler's __builtin_cpu_supports knows it.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx") && f16c) {
    return {&widen_f16_f16c, &narrow_f16_f16c, "F16C"};
  }
#endif
  return {&widen_f16_portable, &narrow_f16_portable, "portable"};
}

const F16Paths& f16_paths() {
  static const F16Paths paths = select_f16();
  return paths;
}

}  // namespace

void widen_f16(float* out, const uint16_t* in, size_t n) {
  f16_paths().widen(out, in, n);
}
void narrow_f16(uint16_t* out, const float* in, size_t n) {
  f16_paths().narrow(out, in, n);
}

TESSERA_HOST_KERNEL void widen_bf16(float* __restrict out, const uint16_t* __restrict in,
                                    size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);  // vectorises well everywhere
}

void narrow_bf16(uint16_t* out, const float* in, size_t n) {
  static const NarrowFn narrow = select_narrow_bf16();
  narrow(out, in, n);
}

const char* half_block_isa() {
  return f16_paths().isa;
}

}  // namespace tessera::host
