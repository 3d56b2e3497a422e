// backends/cuda/numerics.cuh compiled by hipcc: the four bfloat16 intrinsics it uses. HIP 5.x has
// no CUDA-style bf16 API (hip_bfloat16.h is a class), so they are written from the definition:
// bf16 is the top half of an f32; conversion rounds to nearest even and keeps NaN a (quiet) NaN.
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

struct tsr_hip_bfloat16 {
  uint16_t bits;
};
__host__ __device__ inline tsr_hip_bfloat16 __ushort_as_bfloat16(uint16_t x) {
  return tsr_hip_bfloat16{x};
}
__host__ __device__ inline uint16_t __bfloat16_as_ushort(tsr_hip_bfloat16 x) {
  return x.bits;
}
__host__ __device__ inline float __bfloat162float(tsr_hip_bfloat16 x) {
  return __uint_as_float(uint32_t(x.bits) << 16);
}
__host__ __device__ inline tsr_hip_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return tsr_hip_bfloat16{uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return tsr_hip_bfloat16{uint16_t(u >> 16)};
}
