// Calibration: what the local devices measured, as a value the planner can read. The measuring
// itself happens in the tool (`tessera plan --calibrate`, which drives the HAL); the planner only
// reads the file, so it never touches live devices.
//
// File (JSON, version 1):
//   {"version": 1, "backend": "host", "device": "host device 0", "devices": 4, "memory_gib": 23.5,
//    "dtype": "f32", "gemm": [{"n": 256, "tflops": 0.05}, ...],
//    "d2d_copy_gbps": 17.0, "measured_at": "2026-11-30T04:55:00Z",
//    "fit": {"peak_tflops": 0.09, "knee": 41.0}}
// gemm: square n x n x n GEMMs, achieved TFLOP/s (2 n^3 / seconds / 1e12).
// d2d_copy_gbps: bytes copied per second / 1e9 (each byte is read once and written once).
// fit: F(n) = peak * (n / (n + knee))^3, the cost model's efficiency curve for square GEMMs;
// recomputed from the points when absent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/plan/cluster.h"
#include "tessera/plan/cost_model.h"

namespace tessera::plan {

struct GemmPoint {
  int64_t n = 0;
  double tflops = 0;
};

struct Calibration {
  std::string backend;
  std::string device;
  int devices = 1;
  double memory_gib = 0;
  std::string dtype = "f32";
  std::vector<GemmPoint> gemm;
  double d2d_copy_gbps = 0;
  std::string measured_at;
  double peak_tflops = 0;  // fitted
  double knee = 0;         // fitted
};

// Least-squares fit (in log space, each point weighted by n) of F(n) = peak * (n / (n + knee))^3 to
// the points at or above 10% of the best figure; the peak is capped at 1.5 x the best measured
// figure (the knee is then refitted). Sets peak_tflops and knee. INVALID_ARGUMENT with fewer than
// two distinct sizes.
Status fit_gemm_curve(Calibration* calibration);

std::string calibration_to_json(const Calibration& calibration);
// Errors name `source` and the field.
Result<Calibration> calibration_from_json(std::string_view json_text, std::string_view source);
Result<Calibration> load_calibration(const std::string& path);

// Replaces the cluster's device compute and memory figures by the measured ones: every dtype's
// peak = the fitted peak, gemm_efficiency 1 (the fit already holds it), the knee into `options`,
// memory bandwidth = 2 x the copy rate (read + write).
void apply_calibration(const Calibration& calibration, ClusterSpec* cluster, CostOptions* options);

// One host of `devices` calibrated devices; devices share host memory, so the intra-host link is
// the measured copy rate ("shared-memory").
ClusterSpec cluster_from_calibration(const Calibration& calibration);

}  // namespace tessera::plan
