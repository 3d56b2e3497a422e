#include "report.h"

namespace tessera::tools::bench_coll {
namespace {

std::string redop_column(const BenchOptions& o) {
  return takes_redop(o.op) ? std::string(hal::reduce_op_name(o.redop)) : "none";
}

int root_column(const BenchOptions& o) {
  return takes_root(o.op) ? o.root : -1;
}

void print_measurement(std::FILE* out, const Measurement& m) {
  if (!m.available) {
    std::fprintf(out, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  if (m.time_us >= 10000) {
    std::fprintf(out, "  %7.0f", m.time_us);
  } else {
    std::fprintf(out, "  %7.2f", m.time_us);
  }
  std::fprintf(out, "  %6.2f  %6.2f", m.algbw_gbps, m.busbw_gbps);
  if (m.wrong < 0) {
    std::fprintf(out, "  %6s", "N/A");
  } else {
    std::fprintf(out, "  %6lld", static_cast<long long>(m.wrong));
  }
}

nlohmann::ordered_json measurement_json(const Measurement& m) {
  if (!m.available) return nullptr;
  nlohmann::ordered_json j = {
      {"time_us", m.time_us}, {"algbw_gbps", m.algbw_gbps}, {"busbw_gbps", m.busbw_gbps}};
  j["wrong"] = m.wrong < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(m.wrong);
  return j;
}

}  // namespace

std::string_view nccl_type_name(hal::DType dtype) {
  switch (dtype) {
    case hal::DType::kF32: return "float";
    case hal::DType::kF16: return "half";
    case hal::DType::kBF16: return "bfloat16";
    case hal::DType::kF64: return "double";
    case hal::DType::kI32: return "int32";
    case hal::DType::kI64: return "int64";
    case hal::DType::kU8: return "uint8";
  }
  return "?";
}

void print_header(std::FILE* out, const BenchOptions& o, const RunInfo& info) {
  std::fprintf(out,
               "# tessera bench coll: %s, nRanks %d nHosts %d launcher %s minBytes %zu maxBytes "
               "%zu step: %lld(%s) warmup iters: %d iters: %d validation: %d time: %s over ranks "
               "memory: %s route: %s\n",
               std::string(bench_op_name(o.op)).c_str(), info.nranks, info.nhosts,
               info.launcher.c_str(), o.min_bytes, o.max_bytes,
               static_cast<long long>(o.step_factor > 1 ? o.step_factor
                                                        : static_cast<long long>(o.step_bytes)),
               o.step_factor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0,
               std::string(time_reduction_name(o.time_reduction)).c_str(), info.memory.c_str(),
               info.route.c_str());
  std::fprintf(out, "#\n# Using devices\n");
  for (const RankInfo& r : info.ranks) {
    std::fprintf(out, "#  Rank %2d Pid %7ld on %10s device %s\n", r.rank, r.pid, r.host.c_str(),
                 info.memory == "host" ? "host memory" : info.memory.substr(7).c_str());
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %33s  %33s\n", "", "", "", "", "", "out-of-place",
               "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
  std::fflush(out);
}

void print_row(std::FILE* out, const BenchOptions& o, const Row& row) {
  std::fprintf(out, "  %10zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
               std::string(nccl_type_name(o.dtype)).c_str(), redop_column(o).c_str(),
               root_column(o));
  print_measurement(out, row.out_of_place);
  print_measurement(out, row.in_place);
  std::fprintf(out, "\n");
  std::fflush(out);
}

int64_t total_wrong(const std::vector<Row>& rows) {
  int64_t wrong = 0;
  for (const Row& row : rows) {
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      if (m->available && m->wrong > 0) wrong += m->wrong;
    }
  }
  return wrong;
}

double average_busbw(const std::vector<Row>& rows) {
  double sum = 0;
  int n = 0;
  for (const Row& row : rows) {
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      if (!m->available) continue;
      sum += m->busbw_gbps;
      ++n;
    }
  }
  return n > 0 ? sum / n : 0;
}

int64_t print_footer(std::FILE* out, const BenchOptions& o, const std::vector<Row>& rows) {
  const int64_t wrong = total_wrong(rows);
  if (o.check) {
    std::fprintf(out, "# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
                 wrong == 0 ? "OK" : "FAILED");
  } else {
    std::fprintf(out, "# Out of bounds values : N/A (-c 0)\n");
  }
  std::fprintf(out, "# Avg bus bandwidth    : %g \n#\n", average_busbw(rows));
  std::fflush(out);
  return wrong;
}

nlohmann::ordered_json to_json(const BenchOptions& o, const RunInfo& info,
                               const std::vector<Row>& rows) {
  nlohmann::ordered_json j;
  j["tool"] = "tessera bench coll";
  j["op"] = bench_op_name(o.op);
  j["type"] = nccl_type_name(o.dtype);
  j["dtype"] = hal::dtype_name(o.dtype);
  j["redop"] = redop_column(o);
  j["root"] = root_column(o);
  j["ranks"] = info.nranks;
  j["hosts"] = info.nhosts;
  j["launcher"] = info.launcher;
  j["memory"] = info.memory;
  j["route"] = info.route;
  j["warmup"] = o.warmup;
  j["iters"] = o.iters;
  j["check"] = o.check;
  j["time"] = std::string("per iteration, ") + std::string(time_reduction_name(o.time_reduction)) +
              " over ranks";
  j["rows"] = nlohmann::ordered_json::array();
  for (const Row& row : rows) {
    j["rows"].push_back({{"size_bytes", row.bytes},
                         {"count", row.count},
                         {"algorithm", row.algorithm},
                         {"out_of_place", measurement_json(row.out_of_place)},
                         {"in_place", measurement_json(row.in_place)}});
  }
  j["avg_busbw_gbps"] = average_busbw(rows);
  j["wrong"] =
      o.check ? nlohmann::ordered_json(total_wrong(rows)) : nlohmann::ordered_json(nullptr);
  return j;
}

}  // namespace tessera::tools::bench_coll
