#include "tessera/plan/calibration.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::plan {
namespace {

Calibration synthetic(double peak, double knee, std::initializer_list<int64_t> sizes) {
  Calibration c;
  c.backend = "host";
  c.device = "host device 0";
  c.devices = 4;
  c.memory_gib = 16;
  c.d2d_copy_gbps = 12.5;
  for (int64_t n : sizes) {
    const double x = static_cast<double>(n) / (static_cast<double>(n) + knee);
    c.gemm.push_back({n, peak * x * x * x});
  }
  return c;
}

TEST(Calibration, FitRecoversThePeakAndKneeOfAnExactCurve) {
  Calibration c = synthetic(0.2, 300, {512, 1024, 2048, 4096, 8192});
  ASSERT_TRUE(fit_gemm_curve(&c).ok());
  EXPECT_NEAR(c.peak_tflops, 0.2, 0.2 * 1e-3);
  EXPECT_NEAR(c.knee, 300, 300 * 1e-3);
}

TEST(Calibration, FitIgnoresOverheadDominatedPointsAndCapsThePeak) {
  // Far from saturation: the exact curve's peak (10 TFLOP/s) is 4x beyond the best point, so the
  // fit must stop at 1.5x the best measured figure and still pass near the measurements.
  Calibration c = synthetic(10, 4000, {1024, 2048, 4096});
  c.gemm.insert(c.gemm.begin(), GemmPoint{64, 1e-6});  // launch overhead only
  ASSERT_TRUE(fit_gemm_curve(&c).ok());
  const double best = c.gemm.back().tflops;
  EXPECT_NEAR(c.peak_tflops, 1.5 * best, 1e-9);
  // The capped curve cannot pass through every point; it must stay near the largest, which
  // matters most for the large GEMMs the planner prices.
  const double n = static_cast<double>(c.gemm.back().n);
  EXPECT_NEAR(c.peak_tflops * std::pow(n / (n + c.knee), 3) / best, 1.0, 0.3);
}

TEST(Calibration, FitNeedsTwoSizes) {
  Calibration c = synthetic(1, 100, {1024});
  EXPECT_EQ(fit_gemm_curve(&c).code(), StatusCode::kInvalidArgument);
}

TEST(Calibration, JsonRoundTripsTheMeasuredFigures) {
  Calibration c = synthetic(0.2, 300, {256, 512, 1024});
  ASSERT_TRUE(fit_gemm_curve(&c).ok());
  c.measured_at = "2026-11-30T05:00:00Z";
  auto back = calibration_from_json(calibration_to_json(c), "cal.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(calibration_to_json(*back), calibration_to_json(c));
}

// Found by the planner_input fuzz target (tests/fuzz/regressions/planner_input): an optional
// string of another type threw json::type_error out of calibration_from_json.
TEST(Calibration, AStringFieldOfAnotherTypeIsAnErrorNamingIt) {
  auto c = calibration_from_json(R"({"version": 1, "backend": 7, "devices": 1})", "cal.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "cal.json: field 'backend' must be a string, got 7");
}

TEST(Calibration, BadFilesNameTheFileAndTheField) {
  auto missing = calibration_from_json(R"({"version": 1, "devices": 1, "memory_gib": 8,
                                           "gemm": []})",
                                       "cal.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "cal.json: field 'd2d_copy_gbps' missing");
  auto version = calibration_from_json(R"({"version": 7})", "cal.json");
  EXPECT_NE(version.status().message().find("'version' must be 1"), std::string::npos);
  auto point = calibration_from_json(R"({"version": 1, "devices": 1, "memory_gib": 8,
      "d2d_copy_gbps": 3, "gemm": [{"n": 128, "tflops": -1}]})",
                                     "cal.json");
  EXPECT_EQ(point.status().message(), "cal.json: field 'gemm[0].tflops' must be positive");
  EXPECT_FALSE(calibration_from_json("{not json", "cal.json").ok());
}

TEST(Calibration, ReplacesTheDeviceFiguresAndFeedsTheKneeToTheCostModel) {
  Calibration c = synthetic(0.2, 300, {512, 1024, 2048});
  ASSERT_TRUE(fit_gemm_curve(&c).ok());
  auto cluster = cluster_preset("dgx-a100-80gb");
  ASSERT_TRUE(cluster.ok());
  CostOptions options;
  apply_calibration(c, &*cluster, &options);
  EXPECT_DOUBLE_EQ(cluster->device.peak_tflops_bf16, c.peak_tflops);
  EXPECT_DOUBLE_EQ(cluster->device.gemm_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(cluster->device.memory_bandwidth_gbps, 25.0);
  EXPECT_DOUBLE_EQ(options.gemm_knee, c.knee);
  EXPECT_EQ(cluster->devices_per_host, 8) << "the cluster's shape is kept";
}

TEST(Calibration, DescribesTheLocalDevicesAsOneHost) {
  Calibration c = synthetic(0.2, 300, {512, 1024, 2048});
  ASSERT_TRUE(fit_gemm_curve(&c).ok());
  ClusterSpec cluster = cluster_from_calibration(c);
  EXPECT_EQ(cluster.hosts, 1);
  EXPECT_EQ(cluster.devices_per_host, 4);
  EXPECT_DOUBLE_EQ(cluster.device.memory_gib, 16);
  EXPECT_DOUBLE_EQ(cluster.intra_host.bandwidth_gbps, 12.5);
}

}  // namespace
}  // namespace tessera::plan
