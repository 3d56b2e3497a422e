// backends/cuda/numerics.cuh compiled by hipcc: CUDA's half-precision intrinsics are HIP's.
#pragma once
#include <hip/hip_fp16.h>
