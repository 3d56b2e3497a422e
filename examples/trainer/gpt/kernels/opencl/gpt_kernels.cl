// The GPT trainer's kernels in OpenCL C for SPIR-V (contract: ../../kernels.h): clang -target
// spir64 -> llvm-spirv -> gpt_kernels.spv, embedded into tessera_gpt_kernels for zeModuleCreate.
// The kernels themselves are ../gpu/*.inc, written once for CUDA and OpenCL C; this file maps
// their portability words onto OpenCL C. Parameter types follow the contract: pointers are
// global (8 bytes on spir64), uint64_t is ulong, int64_t long, uint32_t uint, int32_t int.
//
// Launch convention (Level Zero): any group count, a group size of 1..256 in x (zeKernelSet-
// GroupSize; not necessarily a power of two). A Level Zero launch has no dynamic shared bytes
// (they would be an extra __local argument), so the reductions use a fixed 256-float local
// array per kernel (TSR_GPT_MAX_BLOCK) and the launch's shared_bytes is not read. Built with
// -ffp-contract=off: the f32 arithmetic is the one written (no fused multiply-adds).

typedef ulong uint64_t;
typedef long int64_t;
typedef uint uint32_t;
typedef int int32_t;
typedef ushort uint16_t;

#define TSR_KERNEL kernel void
#define TSR_DEVICE static inline __attribute__((always_inline))
#define TSR_GLOBAL global
#define TSR_SHARED local
#define TSR_SCRATCH(name) local float name[TSR_GPT_MAX_BLOCK]
#define TSR_LOCAL_ID ((uint64_t)get_local_id(0))
#define TSR_LOCAL_SIZE ((uint64_t)get_local_size(0))
#define TSR_GROUP_ID ((uint64_t)get_group_id(0))
#define TSR_GROUP_COUNT ((uint64_t)get_num_groups(0))
#define TSR_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define TSR_EXP(x) exp(x)
#define TSR_LOG(x) log(x)
#define TSR_SQRT(x) sqrt(x)
#define TSR_TANH(x) tanh(x)
#define TSR_POW(x, y) pow(x, y)
#define TSR_SIN(x) sin(x)
#define TSR_COS(x) cos(x)
#define TSR_FMAX(x, y) fmax(x, y)
#define TSR_NEG_INF (-INFINITY)

// bf16 is the top half of an f32. Storing rounds to nearest even; a NaN stays a (quiet) NaN
// rather than rounding up into infinity.
TSR_DEVICE float tsr_bf16_to_f32(uint16_t bits) {
  return as_float((uint)bits << 16);
}
TSR_DEVICE uint16_t tsr_f32_to_bf16(float v) {
  uint bits = as_uint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}
// f16 through vload_half / vstore_half_rte (core OpenCL C, no cl_khr_fp16 needed): exact
// widening, narrowing rounds to nearest even (overflow gives infinity).
TSR_DEVICE float tsr_f16_to_f32(uint16_t bits) {
  return vload_half(0, (const private half*)&bits);
}
TSR_DEVICE uint16_t tsr_f32_to_f16(float v) {
  uint16_t bits;
  vstore_half_rte(v, 0, (private half*)&bits);
  return bits;
}

#include "../gpu/gpt_attention.inc"  // each kernel file includes gpt_common.inc
#include "../gpu/gpt_layers.inc"
#include "../gpu/gpt_loss_moe_optim.inc"
