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

Result<double> gemm_tflops(const hal::Device& device, const hal::Stream& stream, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * n) * sizeof(float);
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer a, device.allocate(bytes));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer b, device.allocate(bytes));
  TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer c, device.allocate(bytes));
  // Values only need to be finite: 1/64 keeps every product and sum exact and small.
  std::vector<float> ones(static_cast<size_t>(n * n), 1.0f / 64);
  TSR_RETURN_IF_ERROR(stream.copy(a.data(), ones.data(), bytes));
  TSR_RETURN_IF_ERROR(stream.copy(b.data(), ones.data(), bytes));
  TSR_RETURN_IF_ERROR(stream.synchronize());
  const tsr_gemm_desc desc =
      hal::f32_gemm_desc(false, false, n, n, n, static_cast<const float*>(a.data()), n,
                         static_cast<const float*>(b.data()), n, static_cast<float*>(c.data()), n);
  const int runs = n >= 2048 ? 2 : (n >= 1024 ? 3 : 5);
  TSR_ASSIGN_OR_RETURN(double s, median_seconds(stream, runs, [&] { return stream.gemm(desc); }));
  return 2.0 * static_cast<double>(n) * n * n / s / 1e12;
}

Result<plan::Calibration> measure_calibration(const std::string& device_id) {
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
  c.dtype = "f32";
  c.measured_at = utc_now();
  for (int64_t n : {128, 256, 512, 1024, 2048}) {
    TSR_ASSIGN_OR_RETURN(double tflops, gemm_tflops(device, stream, n));
    c.gemm.push_back({n, tflops});
  }
  TSR_ASSIGN_OR_RETURN(c.d2d_copy_gbps, copy_gbps(device, stream));
  TSR_RETURN_IF_ERROR(plan::fit_gemm_curve(&c));
  return c;
}

}  // namespace tessera::tools
