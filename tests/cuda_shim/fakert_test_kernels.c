/* A tiny host-format kernel image (backend_abi.h, TSR_MODULE_HOST_ELF) for module_shim_test.cc:
 * the CTS's two kernels with the contract's semantics, and one that fails, to drive the CUDA
 * backend's module entries through fakert's fake driver. One call per block. */
#include <stdint.h>

#include "tessera/hal/backend_abi.h"

static int vector_add(const tsr_host_kernel_call* call, const char** message) {
  const float* a = *(const float* const*)call->args[0];
  const float* b = *(const float* const*)call->args[1];
  float* c = *(float* const*)call->args[2];
  const uint32_t n = *(const uint32_t*)call->args[3];
  (void)message;
  for (uint32_t t = 0; t < call->block.x; ++t) {
    const uint64_t i = (uint64_t)call->block_index.x * call->block.x + t;
    if (i < n) c[i] = a[i] + b[i];
  }
  return 0;
}

static int block_sum(const tsr_host_kernel_call* call, const char** message) {
  const float* x = *(const float* const*)call->args[0];
  float* partial = *(float* const*)call->args[1];
  const uint32_t n = *(const uint32_t*)call->args[2];
  const uint64_t chunk = ((uint64_t)n + call->grid.x - 1) / call->grid.x;
  const uint64_t begin = (uint64_t)call->block_index.x * chunk;
  const uint64_t end = begin + chunk < n ? begin + chunk : n;
  float sum = 0.0f;
  if (call->shared_bytes < sizeof(float) * call->block.x) {
    *message = "tsr_cts_block_sum needs shared_bytes >= 4 * block.x";
    return 1;
  }
  for (uint64_t i = begin; i < end; ++i) sum += x[i];
  ((float*)call->shared)[0] = sum; /* touches the block's scratch, as the GPU kernels do */
  partial[call->block_index.x] = ((float*)call->shared)[0];
  return 0;
}

static int always_fails(const tsr_host_kernel_call* call, const char** message) {
  (void)call;
  *message = "tsr_test_fail fails on purpose";
  return 7;
}

static const size_t kVectorAddArgs[] = {sizeof(void*), sizeof(void*), sizeof(void*),
                                        sizeof(uint32_t)};
static const size_t kBlockSumArgs[] = {sizeof(void*), sizeof(void*), sizeof(uint32_t)};
static const tsr_host_kernel_desc kKernels[] = {
    {"tsr_cts_vector_add", vector_add, 4, kVectorAddArgs},
    {"tsr_cts_block_sum", block_sum, 3, kBlockSumArgs},
    {"tsr_test_fail", always_fails, 0, 0},
};
static const tsr_host_module kModule = {sizeof(tsr_host_module), TSR_BACKEND_ABI_MAJOR,
                                        sizeof kKernels / sizeof kKernels[0], kKernels};

__attribute__((visibility("default"))) const tsr_host_module* tessera_host_module_v1(void) {
  return &kModule;
}
