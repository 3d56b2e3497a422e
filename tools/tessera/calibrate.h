// Measuring a device for the planner (`tessera plan --calibrate`): square GEMMs at several sizes
// and device-to-device copy bandwidth, through the HAL. The planner reads the result as a value.
#pragma once

#include <string>

#include "tessera/common/status.h"
#include "tessera/hal/hal.h"
#include "tessera/plan/calibration.h"

namespace tessera::tools {

// `device_id`: "host:0", "cuda:1", or empty for the first device of the first enabled backend.
// Each figure is the median of several timed runs after one warm-up run.
Result<plan::Calibration> measure_calibration(const std::string& device_id);

// TFLOP/s of an n x n x n fp32 GEMM in device memory on `stream`: the median of a few timed runs
// after a warm-up (what measure_calibration does per size; `tessera demo` uses one size).
Result<double> gemm_tflops(const hal::Device& device, const hal::Stream& stream, int64_t n);

}  // namespace tessera::tools
