// The CTS kernels for CUDA (hal/cts/kernels/README.md; semantics in backend_abi.h's module
// section and docs/PORTING.md): built into cts_kernels.fatbin (SASS for a few architectures and
// PTX for the newest) and cts_kernels.ptx. Tiny on purpose: nvcc compiles them once per
// architecture at build time.
#include <stdint.h>

// c[i] = a[i] + b[i] for the global index i < n.
extern "C" __global__ void tsr_cts_vector_add(const float* a, const float* b, float* c,
                                              uint32_t n) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// partial[b] = sum of x over block b's chunk [b * chunk, min(n, (b + 1) * chunk)), chunk =
// ceil(n / gridDim.x). blockDim.x is a power of two; dynamic shared memory holds blockDim.x floats
// for the tree reduction.
extern "C" __global__ void tsr_cts_block_sum(const float* x, float* partial, uint32_t n) {
  extern __shared__ float scratch[];
  const uint64_t chunk = (uint64_t(n) + gridDim.x - 1) / gridDim.x;
  const uint64_t begin = uint64_t(blockIdx.x) * chunk;
  const uint64_t end = begin + chunk < n ? begin + chunk : n;
  float sum = 0.0f;
  for (uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sum += x[i];
  scratch[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = scratch[0];
}
