// Measuring a device for the planner (`tessera plan --calibrate`): square GEMMs at several sizes
// and device-to-device copy bandwidth, through the HAL. The planner reads the result as a value.
#pragma once

#include <string>

#include "tessera/common/status.h"
#include "tessera/hal/hal.h"
#include "tessera/plan/calibration.h"

namespace tessera::tools {

// `device_id`: "host:0", "cuda:1", or empty for the first device of the first enabled backend.
// `dtype`: the GEMMs' inputs, "bf16" or "fp16" (16-bit inputs into an fp32 C: the GEMMs the
// planner prices for that training dtype) or "f32". Square GEMMs at n = 128, 256, ... until one
// takes over 50 ms or n = 8192. Each figure is the median of several timed runs after a warm-up.
Result<plan::Calibration> measure_calibration(const std::string& device_id,
                                              const std::string& dtype = "bf16");

// TFLOP/s of an n x n x n GEMM in device memory on `stream`, inputs of `dtype_ab` (a tsr_dtype:
// F32, BF16 or F16) into an f32 C: the median of a few timed runs after a warm-up (what
// measure_calibration does per size; `tessera demo` uses one f32 size).
Result<double> gemm_tflops(const hal::Device& device, const hal::Stream& stream, int64_t n,
                           int32_t dtype_ab = TSR_DTYPE_F32);

}  // namespace tessera::tools
