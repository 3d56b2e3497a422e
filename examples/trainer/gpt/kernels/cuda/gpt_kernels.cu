// The GPT trainer's kernels for CUDA (contract: ../../kernels.h): built into gpt_kernels.fatbin
// (SASS per architecture, PTX for the newest) and gpt_kernels.ptx (PTX for the oldest, for the
// PTX path), both embedded into tessera_gpt_kernels. The kernels themselves are ../gpu/*.inc,
// written once for CUDA and OpenCL C; this file maps their portability words onto CUDA.
//
// Launch: any grid, block.x of 1..256 threads (TSR_GPT_MAX_BLOCK); the reductions use a static
// 256-float __shared__ array, so the launch's dynamic shared bytes are not read (passing some is
// harmless). Compiled with -fmad=false, like the SPIR-V image's -ffp-contract=off, so the f32
// arithmetic is the one written (no fused multiply-adds).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define TSR_KERNEL extern "C" __global__ void
#define TSR_DEVICE static __device__ __forceinline__
#define TSR_GLOBAL
#define TSR_SHARED
#define TSR_SCRATCH(name) __shared__ float name[TSR_GPT_MAX_BLOCK]
#define TSR_LOCAL_ID ((uint64_t)threadIdx.x)
#define TSR_LOCAL_SIZE ((uint64_t)blockDim.x)
#define TSR_GROUP_ID ((uint64_t)blockIdx.x)
#define TSR_GROUP_COUNT ((uint64_t)gridDim.x)
#define TSR_BARRIER() __syncthreads()
#define TSR_EXP(x) expf(x)
#define TSR_LOG(x) logf(x)
#define TSR_SQRT(x) sqrtf(x)
#define TSR_TANH(x) tanhf(x)
#define TSR_POW(x, y) powf(x, y)
#define TSR_SIN(x) sinf(x)
#define TSR_COS(x) cosf(x)
#define TSR_FMAX(x, y) fmaxf(x, y)
#define TSR_NEG_INF (-__int_as_float(0x7f800000))

// bf16 through cuda_bf16.h: __float2bfloat16_rn rounds to nearest even (NaN stays NaN).
static __device__ __forceinline__ float tsr_bf16_to_f32(uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}
static __device__ __forceinline__ uint16_t tsr_f32_to_bf16(float v) {
  const __nv_bfloat16_raw raw = __float2bfloat16_rn(v);
  return raw.x;
}
// f16 through cuda_fp16.h: __float2half_rn rounds to nearest even, overflow gives infinity.
static __device__ __forceinline__ float tsr_f16_to_f32(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
static __device__ __forceinline__ uint16_t tsr_f32_to_f16(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

#include "../gpu/gpt_attention.inc"  // each kernel file includes gpt_common.inc
#include "../gpu/gpt_layers.inc"
#include "../gpu/gpt_loss_moe_optim.inc"
