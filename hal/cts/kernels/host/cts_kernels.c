/*
 * The CTS kernels in the host format (TSR_MODULE_HOST_ELF): the same two kernels every format's
 * image holds (hal/cts/kernels/CMakeLists.txt), plus one the host format alone can express:
 *
 *   tsr_cts_vector_add(const float* a, const float* b, float* c, uint32_t n)
 *       c[i] = a[i] + b[i] for i < n, i = block_index.x * block.x + thread.x
 *   tsr_cts_block_sum(const float* x, float* partial, uint32_t n)
 *       partial[b] = sum of x[i], i in [b * chunk, min(n, (b + 1) * chunk)),
 *       chunk = ceil(n / grid.x); a tree reduction over block.x lanes in shared memory
 *       (shared_bytes >= 4 * block.x), as the GPU kernels do it
 *   tsr_cts_fail()
 *       returns 7 with a message: a kernel that fails its stream
 *
 * A host kernel is called once per block and runs the block's threads itself. Plain C that sees
 * backend_abi.h only, like a backend.
 */
#include <stddef.h>
#include <stdint.h>

#include "tessera/hal/backend_abi.h"

#define CTS_EXPORT __attribute__((visibility("default")))

static const void* arg_pointer(const tsr_host_kernel_call* call, size_t i) {
  const void* value;
  __builtin_memcpy(&value, call->args[i], sizeof value);
  return value;
}

static uint32_t arg_u32(const tsr_host_kernel_call* call, size_t i) {
  uint32_t value;
  __builtin_memcpy(&value, call->args[i], sizeof value);
  return value;
}

static int vector_add(const tsr_host_kernel_call* call, const char** message) {
  (void)message;
  const float* a = (const float*)arg_pointer(call, 0);
  const float* b = (const float*)arg_pointer(call, 1);
  float* c = (float*)arg_pointer(call, 2);
  const uint64_t n = arg_u32(call, 3);
  const uint64_t first = (uint64_t)call->block_index.x * call->block.x;
  for (uint32_t thread = 0; thread < call->block.x; ++thread) {
    const uint64_t i = first + thread;
    if (i < n) c[i] = a[i] + b[i];
  }
  return 0;
}

static int block_sum(const tsr_host_kernel_call* call, const char** message) {
  const float* x = (const float*)arg_pointer(call, 0);
  float* partial = (float*)arg_pointer(call, 1);
  const uint64_t n = arg_u32(call, 2);
  const uint32_t lanes = call->block.x;
  if ((uint64_t)call->shared_bytes < (uint64_t)lanes * sizeof(float) || call->shared == NULL) {
    *message = "tsr_cts_block_sum: shared_bytes must be at least 4 * block.x";
    return 1;
  }
  float* scratch = (float*)call->shared;
  const uint64_t chunk = (n + call->grid.x - 1) / call->grid.x;
  const uint64_t begin = (uint64_t)call->block_index.x * chunk;
  const uint64_t end = begin + chunk < n ? begin + chunk : n;
  for (uint32_t lane = 0; lane < lanes; ++lane) {
    float sum = 0.0f;
    for (uint64_t i = begin + lane; i < end; i += lanes) sum += x[i];
    scratch[lane] = sum;
  }
  for (uint32_t stride = lanes / 2; stride > 0; stride /= 2) {
    for (uint32_t lane = 0; lane < stride; ++lane) scratch[lane] += scratch[lane + stride];
  }
  partial[call->block_index.x] = scratch[0];
  return 0;
}

static int fail_on_purpose(const tsr_host_kernel_call* call, const char** message) {
  (void)call;
  *message = "tsr_cts_fail: failing on purpose";
  return 7;
}

static const size_t kVectorAddArgs[] = {sizeof(void*), sizeof(void*), sizeof(void*),
                                        sizeof(uint32_t)};
static const size_t kBlockSumArgs[] = {sizeof(void*), sizeof(void*), sizeof(uint32_t)};

static const tsr_host_kernel_desc kKernels[] = {
    {"tsr_cts_vector_add", vector_add, 4, kVectorAddArgs},
    {"tsr_cts_block_sum", block_sum, 3, kBlockSumArgs},
    {"tsr_cts_fail", fail_on_purpose, 0, NULL},
};

static const tsr_host_module kModule = {
    sizeof(tsr_host_module),
    TSR_BACKEND_ABI_MAJOR,
    sizeof kKernels / sizeof kKernels[0],
    kKernels,
};

CTS_EXPORT const tsr_host_module* tessera_host_module_v1(void) {
  return &kModule;
}
