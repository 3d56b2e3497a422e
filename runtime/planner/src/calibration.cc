// Calibration files: fit, JSON, and how measured figures replace a cluster's declared ones.
#include "tessera/plan/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tessera/common/untrusted.h"

namespace tessera::plan {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kMinShareOfBest = 0.1;   // points below 10% of the best figure are not fitted
constexpr double kMaxPeakOverBest = 1.5;  // the fitted peak is capped at 1.5 x the best figure

// Weighted sum of squared log-residuals for a given knee, with the best peak for it in closed form:
// log F = log peak + 3 log(n/(n+knee))  =>  log peak = weighted mean of log F - 3 log(n/(n+knee)).
double residual(const std::vector<GemmPoint>& points, double knee, double* out_log_peak,
                bool peak_fixed = false) {
  // Each point weighs n: large GEMMs dominate a training step, so the curve should be closest
  // there.
  double log_peak = *out_log_peak;
  if (!peak_fixed) {
    double sum = 0, weights = 0;
    for (const auto& p : points) {
      sum += p.n * (std::log(p.tflops) - 3 * std::log(p.n / (p.n + knee)));
      weights += p.n;
    }
    log_peak = sum / weights;
  }
  double error = 0;
  for (const auto& p : points) {
    const double predicted = log_peak + 3 * std::log(p.n / (p.n + knee));
    error += p.n * (std::log(p.tflops) - predicted) * (std::log(p.tflops) - predicted);
  }
  *out_log_peak = log_peak;
  return error;
}

// The knee minimising the log-space error, with the peak free or fixed at *log_peak: a
// log-spaced scan over 0.1 .. 1e5 elements, then a local refinement.
double best_knee(const std::vector<GemmPoint>& points, double* log_peak, bool peak_fixed) {
  double knee_at_best = 0, log_peak_at_best = *log_peak;
  double best_error = std::numeric_limits<double>::infinity();
  auto consider = [&](double knee) {
    double lp = *log_peak;
    const double error = residual(points, knee, &lp, peak_fixed);
    if (error < best_error) best_error = error, knee_at_best = knee, log_peak_at_best = lp;
  };
  for (double knee = 0.1; knee <= 1e5; knee *= 1.05) consider(knee);
  for (double step = knee_at_best * 0.05; step > knee_at_best * 1e-6; step /= 2) {
    const double center = knee_at_best;
    if (center - step > 0) consider(center - step);
    consider(center + step);
  }
  *log_peak = log_peak_at_best;
  return knee_at_best;
}

}  // namespace

Status fit_gemm_curve(Calibration* c) {
  // Points far below the best are dominated by launch and threading overheads, which the curve
  // does not describe; fitting them would drag the knee up and the extrapolated peak with it.
  double best = 0;
  for (const auto& p : c->gemm) best = std::max(best, p.tflops);
  std::vector<GemmPoint> points;
  for (const auto& p : c->gemm) {
    if (p.n > 0 && p.tflops > 0 && p.tflops >= kMinShareOfBest * best) points.push_back(p);
  }
  bool distinct = false;
  for (const auto& p : points) distinct = distinct || p.n != points.front().n;
  if (points.size() < 2 || !distinct) {
    return invalid_argument("calibration: need GEMM figures at two or more sizes to fit a curve");
  }
  double log_peak = 0;
  c->knee = best_knee(points, &log_peak, /*peak_fixed=*/false);
  c->peak_tflops = std::exp(log_peak);
  // Never promise more than a modest step beyond what was measured: with points short of
  // saturation the fit's peak is an extrapolation. Cap it and refit the knee for the cap.
  if (c->peak_tflops > kMaxPeakOverBest * best) {
    c->peak_tflops = kMaxPeakOverBest * best;
    log_peak = std::log(c->peak_tflops);
    c->knee = best_knee(points, &log_peak, /*peak_fixed=*/true);
  }
  return Status();
}

std::string calibration_to_json(const Calibration& c) {
  Json gemm = Json::array();
  for (const auto& p : c.gemm) gemm.push_back({{"n", p.n}, {"tflops", p.tflops}});
  const Json out = {{"version", 1},
                    {"backend", c.backend},
                    {"device", c.device},
                    {"devices", c.devices},
                    {"memory_gib", c.memory_gib},
                    {"dtype", c.dtype},
                    {"gemm", gemm},
                    {"d2d_copy_gbps", c.d2d_copy_gbps},
                    {"measured_at", c.measured_at},
                    {"fit", {{"peak_tflops", c.peak_tflops}, {"knee", c.knee}}}};
  return out.dump(2) + "\n";
}

Result<Calibration> calibration_from_json(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument(source + ": not a JSON object");
  }
  auto positive = [&](const Json& obj, const std::string& field) -> Result<double> {
    if (!obj.contains(field)) return invalid_argument(source + ": field '" + field + "' missing");
    if (!obj[field].is_number() || obj[field].get<double>() <= 0) {
      return invalid_argument(source + ": field '" + field + "' must be a positive number, got " +
                              obj[field].dump());
    }
    return obj[field].get<double>();
  };
  if (!j.contains("version") || j["version"] != 1) {
    return invalid_argument(source + ": field 'version' must be 1, got " +
                            (j.contains("version") ? j["version"].dump() : "nothing"));
  }
  // Optional strings; another type is an error naming the field (json::value would throw).
  auto string_field = [&](const char* field, const char* fallback) -> Result<std::string> {
    if (!j.contains(field)) return std::string(fallback);
    if (!j[field].is_string()) {
      return invalid_argument(source + ": field '" + field + "' must be a string, got " +
                              j[field].dump());
    }
    return j[field].get<std::string>();
  };
  Calibration c;
  TSR_ASSIGN_OR_RETURN(c.backend, string_field("backend", ""));
  TSR_ASSIGN_OR_RETURN(c.device, string_field("device", ""));
  TSR_ASSIGN_OR_RETURN(c.dtype, string_field("dtype", "f32"));
  TSR_ASSIGN_OR_RETURN(c.measured_at, string_field("measured_at", ""));
  TSR_ASSIGN_OR_RETURN(double devices, positive(j, "devices"));
  c.devices = static_cast<int>(devices);
  TSR_ASSIGN_OR_RETURN(c.memory_gib, positive(j, "memory_gib"));
  TSR_ASSIGN_OR_RETURN(c.d2d_copy_gbps, positive(j, "d2d_copy_gbps"));
  if (!j.contains("gemm") || !j["gemm"].is_array()) {
    return invalid_argument(source + ": field 'gemm' must be an array of {n, tflops}");
  }
  for (size_t i = 0; i < j["gemm"].size(); ++i) {
    const Json& point = j["gemm"][i];
    const std::string where = "gemm[" + std::to_string(i) + "].";
    if (!point.is_object())
      return invalid_argument(source + ": field '" + where + "' not an object");
    auto n = positive(point, "n");
    auto tflops = positive(point, "tflops");
    if (!n.ok()) return invalid_argument(source + ": field '" + where + "n' must be positive");
    if (!tflops.ok()) {
      return invalid_argument(source + ": field '" + where + "tflops' must be positive");
    }
    c.gemm.push_back({static_cast<int64_t>(*n), *tflops});
  }
  if (j.contains("fit") && j["fit"].is_object()) {
    c.peak_tflops = j["fit"].value("peak_tflops", 0.0);
    c.knee = j["fit"].value("knee", 0.0);
  }
  if (c.peak_tflops <= 0 || c.knee <= 0)
    TSR_RETURN_IF_ERROR(fit_gemm_curve(&c).with_context(source));
  return c;
}

Result<Calibration> load_calibration(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxConfigFileBytes));
  return calibration_from_json(text, path);
}

void apply_calibration(const Calibration& c, ClusterSpec* cluster, CostOptions* options) {
  DeviceSpec& d = cluster->device;
  d.peak_tflops_bf16 = d.peak_tflops_fp16 = d.peak_tflops_fp32 = c.peak_tflops;
  d.gemm_efficiency = 1.0;
  d.memory_bandwidth_gbps = 2 * c.d2d_copy_gbps;
  options->gemm_efficiency = 1.0;
  options->gemm_knee = c.knee;
}

ClusterSpec cluster_from_calibration(const Calibration& c) {
  ClusterSpec cluster;
  cluster.name = "calibrated-" + (c.backend.empty() ? std::string("local") : c.backend);
  cluster.hosts = 1;
  cluster.devices_per_host = c.devices;
  cluster.device.name = c.device.empty() ? cluster.name : c.device;
  cluster.device.memory_gib = c.memory_gib;
  cluster.intra_host.link = "shared-memory";
  cluster.intra_host.bandwidth_gbps = c.d2d_copy_gbps;
  cluster.intra_host.busbw_gbps = c.d2d_copy_gbps;
  cluster.intra_host.latency_us = 5;
  cluster.inter_host = cluster.intra_host;
  cluster.inter_host.nics_per_host = 1;
  CostOptions ignored;
  apply_calibration(c, &cluster, &ignored);
  return cluster;
}

}  // namespace tessera::plan
