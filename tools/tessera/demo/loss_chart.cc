// The demo's loss curve as SVG: both axes ticked and labelled so that the picture reads without
// the log (which step the kill and the switch happened at, what the loss went to).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "demo.h"

namespace tessera::tools::demo {
namespace {

// The decimals a label needs to tell ticks `spacing` apart (0.5 -> 1, 0.02 -> 2, 5 -> 0).
int decimals_for(double spacing) {
  return std::max(0, int(std::ceil(-std::log10(spacing) - 1e-9)));
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo) || max_ticks < 2 || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / double(max_ticks - 1);
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double spacing = decade * 10;
  for (double m : {1.0, 2.0, 5.0}) {
    if (decade * m >= raw) {
      spacing = decade * m;
      break;
    }
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / spacing - 1e-9) * spacing; t <= hi + spacing * 1e-9;
       t += spacing) {
    out.push_back(std::abs(t) < spacing * 1e-9 ? 0.0 : t);
  }
  return out;
}

std::string loss_svg(const std::map<int64_t, double>& loss, int64_t switch_step,
                     int64_t fault_step) {
  constexpr double kW = 640, kH = 320, kL = 64, kR = 20, kT = 30, kB = 46;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kW << "' height='" << kH
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n<text x='"
    << kL << "' y='18'>tessera demo: training loss (mean cross-entropy over the global batch)"
    << "</text>\n";
  // Step s (0-based) is drawn at x = s + 1: the axis counts completed steps, as the log does.
  const double first = loss.empty() ? 0 : double(loss.begin()->first);
  const double last = loss.empty() ? 1 : double(loss.rbegin()->first + 1);
  double lo = 0, hi = 1;
  if (!loss.empty()) {
    lo = hi = loss.begin()->second;
    for (const auto& [s, l] : loss) {
      lo = std::min(lo, l);
      hi = std::max(hi, l);
    }
  }
  if (!(hi > lo)) hi = lo + 1;
  // The loss axis spans whole ticks, so its ends are labelled too.
  std::vector<double> loss_ticks = nice_ticks(lo, hi, 5);
  const double loss_spacing = loss_ticks.size() > 1 ? loss_ticks[1] - loss_ticks[0] : hi - lo;
  lo = std::floor(lo / loss_spacing + 1e-9) * loss_spacing;
  hi = std::ceil(hi / loss_spacing - 1e-9) * loss_spacing;
  loss_ticks = nice_ticks(lo, hi, 6);
  const double x0 = first, x1 = std::max(last, first + 1);
  auto x = [&](double s) { return kL + (kW - kL - kR) * (s - x0) / (x1 - x0); };
  auto y = [&](double l) { return kT + (kH - kT - kB) * (1 - (l - lo) / (hi - lo)); };

  // Grid and ticks first, the curve on top.
  std::vector<double> step_ticks;
  for (double t : nice_ticks(x0, x1, 9)) {
    if (t == std::floor(t)) step_ticks.push_back(t);  // whole steps only
  }
  for (double t : step_ticks) {
    o << "<line x1='" << x(t) << "' y1='" << kT << "' x2='" << x(t) << "' y2='" << kH - kB + 4
      << "' stroke='#e5e5e5'/>\n<text class='xtick' x='" << x(t) << "' y='" << kH - kB + 17
      << "' text-anchor='middle'>" << fixed(t, 0) << "</text>\n";
  }
  const int loss_decimals = loss_ticks.size() > 1 ? decimals_for(loss_ticks[1] - loss_ticks[0]) : 3;
  for (double t : loss_ticks) {
    o << "<line x1='" << kL - 4 << "' y1='" << y(t) << "' x2='" << kW - kR << "' y2='" << y(t)
      << "' stroke='#e5e5e5'/>\n<text class='ytick' x='" << kL - 7 << "' y='" << y(t) + 4
      << "' text-anchor='end'>" << fixed(t, loss_decimals) << "</text>\n";
  }
  o << "<line x1='" << kL << "' y1='" << kH - kB << "' x2='" << kW - kR << "' y2='" << kH - kB
    << "' stroke='black'/>\n<line x1='" << kL << "' y1='" << kT << "' x2='" << kL << "' y2='"
    << kH - kB << "' stroke='black'/>\n<text x='" << (kL + kW - kR) / 2 << "' y='" << kH - 8
    << "' text-anchor='middle'>step (completed)</text>\n<text x='14' y='" << (kT + kH - kB) / 2
    << "' text-anchor='middle' transform='rotate(-90 14 " << (kT + kH - kB) / 2
    << ")'>loss</text>\n";
  // A marker at s: before step s + 1, i.e. after s completed steps.
  auto marker = [&](int64_t s, const std::string& label, const char* colour, double label_y) {
    if (s < 0) return;
    o << "<line x1='" << x(double(s)) << "' y1='" << kT << "' x2='" << x(double(s)) << "' y2='"
      << kH - kB << "' stroke='" << colour << "' stroke-dasharray='4,3'/>\n<text x='"
      << x(double(s)) + 3 << "' y='" << label_y << "' fill='" << colour << "'>" << label
      << "</text>\n";
  };
  marker(fault_step, "rank killed before step " + std::to_string(fault_step + 1), "#c0392b",
         kT + 12);
  marker(switch_step, "plan switch before step " + std::to_string(switch_step + 1), "#2471a3",
         kT + 26);
  if (loss.empty()) {
    o << "<text x='" << (kL + kW - kR) / 2 << "' y='" << (kT + kH - kB) / 2
      << "' text-anchor='middle'>no steps</text>\n";
  }
  o << "<polyline fill='none' stroke='#117a65' stroke-width='2' points='";
  for (const auto& [s, l] : loss) o << x(double(s) + 1) << "," << y(l) << " ";
  o << "'/>\n</svg>\n";
  return o.str();
}

}  // namespace tessera::tools::demo
