// Pipeline schedule simulation and its SVG rendering.
#include "tessera/plan/timeline.h"

#include <algorithm>
#include <cstdio>

namespace tessera::plan {
namespace {

struct Op {
  int chunk;
  int64_t mb;
  bool backward;
};

// Megatron-LM's order for device `i` (interleaved when v > 1; v = 1 is plain 1F1B): warm-up
// forwards, then one forward one backward, then the remaining backwards.
std::vector<Op> device_order(int i, int p, int v, int64_t m) {
  const int64_t total = m * v;
  const int64_t warmup =
      v == 1 ? std::min<int64_t>(p - i - 1, m)
             : std::min<int64_t>(
                   static_cast<int64_t>(p - i - 1) * 2 + static_cast<int64_t>(v - 1) * p, total);
  auto fwd = [&](int64_t k) {
    return Op{static_cast<int>((k / p) % v), (k / (static_cast<int64_t>(p) * v)) * p + k % p,
              false};
  };
  auto bwd = [&](int64_t k) {
    return Op{v - 1 - static_cast<int>((k / p) % v),
              (k / (static_cast<int64_t>(p) * v)) * p + k % p, true};
  };
  std::vector<Op> order;
  order.reserve(static_cast<size_t>(2 * total));
  for (int64_t k = 0; k < warmup; ++k) order.push_back(fwd(k));
  for (int64_t j = 0; j < total - warmup; ++j) {
    order.push_back(fwd(warmup + j));
    order.push_back(bwd(j));
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(bwd(k));
  return order;
}

}  // namespace

Timeline simulate_pipeline(const Estimate& e) {
  const Plan& plan = e.plan;
  const int p = plan.pp, v = plan.vp;
  const int64_t m = plan.num_microbatches;
  Timeline t;
  t.stages = p;
  std::vector<std::vector<Op>> orders;
  std::vector<double> fwd(static_cast<size_t>(p)), bwd(static_cast<size_t>(p));
  for (int i = 0; i < p; ++i) {
    orders.push_back(device_order(i, p, v, m));
    // Per chunk: the device's per-micro-batch time without its transfers, split by v.
    const double compute = e.stage_time_s[i] - (p > 1 ? 2.0 * v * e.p2p_s : 0.0);
    fwd[i] = e.stage_fwd_s[i] / v;
    bwd[i] = std::max(0.0, compute - e.stage_fwd_s[i]) / v;
  }
  // End time of every (stage, chunk, micro-batch, direction); negative until scheduled.
  auto slot = [&](int i, int c, int64_t mb, bool b) {
    return ((static_cast<size_t>(i) * v + c) * static_cast<size_t>(m) + mb) * 2 + (b ? 1 : 0);
  };
  std::vector<double> done(static_cast<size_t>(p) * v * m * 2, -1.0);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free(static_cast<size_t>(p), 0.0);
  size_t remaining = 0;
  for (const auto& o : orders) remaining += o.size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int i = 0; i < p; ++i) {
      while (next[i] < orders[i].size()) {
        const Op& op = orders[i][next[i]];
        double ready = 0;
        if (!op.backward) {
          if (i > 0)
            ready = done[slot(i - 1, op.chunk, op.mb, false)] + e.p2p_s;
          else if (op.chunk > 0)
            ready = done[slot(p - 1, op.chunk - 1, op.mb, false)] + e.p2p_s;
        } else if (i < p - 1) {
          ready = done[slot(i + 1, op.chunk, op.mb, true)] + e.p2p_s;
        } else if (op.chunk < v - 1) {
          ready = done[slot(0, op.chunk + 1, op.mb, true)] + e.p2p_s;
        } else {
          ready = done[slot(i, op.chunk, op.mb, false)];
        }
        // An input not produced yet shows as a negative end time (+ p2p): wait for it.
        const bool has_dep = op.backward || i > 0 || op.chunk > 0;
        if (has_dep && ready < (op.backward && i == p - 1 && op.chunk == v - 1 ? 0 : e.p2p_s))
          break;
        const double start = std::max(free[i], ready);
        const double end = start + (op.backward ? bwd[i] : fwd[i]);
        done[slot(i, op.chunk, op.mb, op.backward)] = end;
        free[i] = end;
        t.ops.push_back({i, op.chunk, op.mb, op.backward, start, end, ready});
        t.pipeline_s = std::max(t.pipeline_s, end);
        ++next[i];
        --remaining;
        progress = true;
      }
    }
  }
  t.step_s = t.pipeline_s + e.time.dp_comm_s + e.time.optimizer_s + e.time.grad_clip_s +
             e.time.embedding_sync_s;
  return t;
}

std::string timeline_svg(const Estimate& e, const Timeline& t, const std::string& title) {
  constexpr double kWidth = 1200, kLeft = 90, kRight = 20, kTop = 50, kRow = 22, kGap = 6;
  const double span = std::max(t.step_s, 1e-12);
  const double scale = (kWidth - kLeft - kRight) / span;
  const double height = kTop + t.stages * (kRow + kGap) + 60;
  std::string svg;
  char buf[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    svg += buf;
  };
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, height);
  svg += "<title>" + title + "</title>\n";
  add("<text x=\"%.0f\" y=\"20\" font-size=\"14\">", kLeft);
  svg += title;
  add(" (step %.3f s)</text>\n", e.step_time_s);
  for (int i = 0; i < t.stages; ++i) {
    const double y = kTop + i * (kRow + kGap);
    add("<text x=\"5\" y=\"%.1f\">stage %d</text>\n", y + 15, i);
    // Idle background: whatever the ops do not cover is bubble.
    add("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"#e8e8e8\">"
        "<title>idle (bubble)</title></rect>\n",
        kLeft, y, t.pipeline_s * scale, kRow);
    const double tail = t.pipeline_s;
    const double after_dp = e.time.optimizer_s + e.time.grad_clip_s + e.time.embedding_sync_s;
    add("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"#b07aa1\">"
        "<title>exposed gradient reduction %.4f s</title></rect>\n",
        kLeft + tail * scale, y, e.time.dp_comm_s * scale, kRow, e.time.dp_comm_s);
    add("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"#59a14f\">"
        "<title>optimizer, gradient clipping, tied embedding sync %.4f s</title></rect>\n",
        kLeft + (tail + e.time.dp_comm_s) * scale, y, after_dp * scale, kRow, after_dp);
  }
  for (const TimelineOp& op : t.ops) {
    const double y = kTop + op.stage * (kRow + kGap);
    if (op.ready_s > 0 && e.p2p_s > 0 && op.ready_s - e.p2p_s >= 0) {
      // The transfer that delivered this op's input, drawn as a thin band before its arrival.
      add("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"4\" fill=\"#e15759\"/>\n",
          kLeft + (op.ready_s - e.p2p_s) * scale, y + kRow, e.p2p_s * scale);
    }
    add("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" "
        "stroke=\"white\" stroke-width=\"0.3\"><title>%s mb %lld chunk %d: %.4f-%.4f s"
        "</title></rect>\n",
        kLeft + op.start_s * scale, y, (op.end_s - op.start_s) * scale, kRow,
        op.backward ? "#f28e2b" : "#4e79a7", op.backward ? "backward" : "forward",
        static_cast<long long>(op.microbatch), op.chunk, op.start_s, op.end_s);
  }
  const double ly = kTop + t.stages * (kRow + kGap) + 20;
  const char* names[] = {"forward",       "backward",           "transfer",
                         "idle (bubble)", "gradient reduction", "optimizer"};
  const char* colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#e8e8e8", "#b07aa1", "#59a14f"};
  for (int k = 0; k < 6; ++k) {
    add("<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
        "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
        kLeft + k * 170.0, ly, colors[k], kLeft + k * 170.0 + 18, ly + 12, names[k]);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera::plan
