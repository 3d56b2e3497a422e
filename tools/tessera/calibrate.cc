#include "calibrate.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

#include "tessera/hal/gemm_desc.h"
#include "tessera/hal/hal.h"

namespace tessera::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `runs` timed calls of `body` (which enqueues work) after one warm-up call.
Result<double> median_seconds(const hal::Stream& stream, int runs,
                              const std::function<Status()>& body) {
  TSR_RETURN_IF_ERROR(body());
  TSR_RETURN_IF_ERROR(stream.synchronize());
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    TSR_RETURN_IF_ERROR(body());
    TSR_RETURN_IF_ERROR(stream.synchronize());
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

Result<double> copy_gbps(const hal::Device& device, const hal::Stream& stream) {
  constexpr size_t kBytes = size_t{64} << 20;
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer src, device.allocate(kBytes));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer dst, device.allocate(kBytes));
  TSR_RETURN_IF_ERROR(stream.memset(src.data(), 1, kBytes));
  TSR_ASSIGN_OR_RETURN(double s, median_seconds(stream, 5, [&] {
                         return stream.copy(dst.data(), src.data(), kBytes);
                       }));
  return static_cast<double>(kBytes) / s / 1e9;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

Result<double> gemm_tflops(const hal::Device& device, const hal::Stream& stream, int64_t n,
                           int32_t dtype_ab) {
  const size_t elements = static_cast<size_t>(n * n);
  const size_t in_size = dtype_ab == TSR_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer a, device.allocate(elements * in_size));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device.allocate(elements * in_size));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer c, device.allocate(elements * sizeof(float)));
  // Values only need to be finite: 1/64 keeps every product and sum exact and small (f32 bits
  // 0x3C800000; bf16 is its top half, fp16 2^-6 is 0x2400).
  std::vector<float> f32(dtype_ab == TSR_DTYPE_F32 ? elements : 0, 1.0f / 64);
  std::vector<uint16_t> half(dtype_ab == TSR_DTYPE_F32 ? 0 : elements,
                             dtype_ab == TSR_DTYPE_BF16 ? uint16_t{0x3C80} : uint16_t{0x2400});
  const void* ones = dtype_ab == TSR_DTYPE_F32 ? static_cast<const void*>(f32.data())
                                               : static_cast<const void*>(half.data());
  TSR_RETURN_IF_ERROR(stream.copy(a.data(), ones, elements * in_size));
  TSR_RETURN_IF_ERROR(stream.copy(b.data(), ones, elements * in_size));
  TSR_RETURN_IF_ERROR(stream.synchronize());
  // 16-bit inputs accumulate into an fp32 C, as training's GEMMs do (the planner prices those).
  const tsr_gemm_desc desc = hal::gemm_desc(false, false, n, n, n, a.data(), n, b.data(), n,
                                            c.data(), n, 0.0, dtype_ab, TSR_DTYPE_F32);
  const int runs = n >= 2048 ? 3 : 5;
  TSR_ASSIGN_OR_RETURN(double s, median_seconds(stream, runs, [&] { return stream.gemm(desc); }));
  return 2.0 * static_cast<double>(n) * n * n / s / 1e12;
}

Result<plan::Calibration> measure_calibration(const std::string& device_id,
                                              const std::string& dtype) {
  TSR_ASSIGN_OR_RETURN(auto platform, hal::Platform::create());
  if (platform->devices().empty()) {
    return not_found("calibration: no devices (run `tessera devices` to see why)");
  }
  hal::Device device = platform->devices().front();
  if (!device_id.empty()) {
    TSR_ASSIGN_OR_RETURN(device, platform->device(device_id));
  }
  if (!device.has(TSR_CAP_GEMM)) {
    return unimplemented("calibration: " + device.id() + " has no GEMM (gemm_async is NULL)");
  }
  TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
  plan::Calibration c;
  c.backend = device.backend_name();
  c.device = device.properties().name;
  c.devices = static_cast<int>(platform->devices(c.backend).size());
  c.memory_gib = static_cast<double>(device.properties().total_memory) / (1ull << 30);
  int32_t dtype_ab = TSR_DTYPE_F32;
  if (dtype == "bf16") {
    dtype_ab = TSR_DTYPE_BF16;
  } else if (dtype == "fp16") {
    dtype_ab = TSR_DTYPE_F16;
  } else if (dtype != "f32") {
    return invalid_argument("calibration: dtype must be bf16, fp16 or f32, got '" + dtype + "'");
  }
  c.dtype = dtype;
  c.measured_at = utc_now();
  // Doubling sizes until one GEMM takes kLongGemm: a CPU stops near 2048, a GPU reaches kMaxN,
  // past the knee of its tensor cores (an H100's is ~250 by the balance argument, docs/PLANNER.md).
  constexpr double kLongGemm = 0.05;
  constexpr int64_t kMaxN = 8192;
  for (int64_t n = 128; n <= kMaxN; n *= 2) {
    auto tflops_or = gemm_tflops(device, stream, n, dtype_ab);
    if (!tflops_or.ok()) {
      return tflops_or.status().with_context(
          "calibration: " + dtype + " GEMM " + std::to_string(n) + "^3 on " + device.id() +
          (dtype == "f32" ? "" : " (a device without 16-bit GEMMs: --dtype f32)"));
    }
    const double tflops = *tflops_or;
    c.gemm.push_back({n, tflops});
    if (2.0 * static_cast<double>(n) * n * n / (tflops * 1e12) > kLongGemm) break;
  }
  TSR_ASSIGN_OR_RETURN(c.d2d_copy_gbps, copy_gbps(device, stream));
  TSR_RETURN_IF_ERROR(plan::fit_gemm_curve(&c));
  return c;
}

}  // namespace tessera::tools
