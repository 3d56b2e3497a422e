// ckpt_bench: the checkpointer on this machine with N ranks as processes (socketpairs between
// them), each holding --bytes-per-rank of fp32 "weights" and two Adam moments. Reports, per the
// issue: save_async blocking time vs a plain memcpy of the same bytes; persist throughput vs
// dd-style sequential writes of the same size to the same directory in the same run, buffered
// (conv=fsync) and O_DIRECT (oflag=direct), in 5 alternating rounds after two warm-up saves,
// medians, the faster dd of each round as the reference; the step time of a memory-bound "optimizer
// step" while a rate-limited save persists (the persist thread at --persist-priority, default
// nice); delta bytes vs full for frozen, 10%-changed and dense updates; restoring a restarted rank
// from its buddy's memory vs from storage (page cache dropped for the shard files). Prints a table,
// or JSON with --json.
//
//   build-ckpt/bin/ckpt_bench --ranks 4 --bytes-per-rank 1GiB --dir /tmp/ckpt_bench
//
// Host memory: about 4x the state per rank at the peak (the state, the two reused snapshot
// buffers, and the buddy's replica or a load's staging), so 4 ranks x 1 GiB need ~16 GiB free.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/socket_rank_group.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/common/env.h"

using namespace tessera;
using namespace tessera::ckpt;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

namespace {

struct Args {
  int ranks = 4;
  size_t bytes_per_rank = 256u << 20;
  std::string dir = "/tmp/ckpt_bench";
  double max_write_mbps = 100;  // per rank, for the step-time phase
  int zstd_level = -1;
  PersistPriority priority = PersistPriority::kNice;
  int steps_during_save = 20;
  bool json = false;
};

const char* priority_name(PersistPriority p) {
  switch (p) {
    case PersistPriority::kNormal: return "normal";
    case PersistPriority::kNice: return "nice";
    case PersistPriority::kIdle: return "idle";
  }
  return "?";
}

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
size_t memory_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

constexpr int kRounds = 5;  // save + dd rounds in phase 1; medians reported

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct RankState {
  size_t n = 0;  // floats per tensor
  std::vector<float> w, m, v;
  void init(size_t floats, int rank) {
    n = floats;
    w.resize(n);
    m.resize(n);
    v.resize(n);
    uint32_t x = 2463534242u + static_cast<uint32_t>(rank);
    for (size_t i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      w[i] = static_cast<float>(x) * 1e-9f;
      m[i] = w[i] * 0.5f;
      v[i] = w[i] * 0.25f;
    }
  }
  // A memory-bound Adam-like update of the first `fraction` of every tensor.
  void step(double fraction = 1.0) {
    const size_t k = static_cast<size_t>(static_cast<double>(n) * fraction);
    for (size_t i = 0; i < k; ++i) {
      const float g = w[i] * 1e-3f + 1e-7f;
      m[i] = 0.9f * m[i] + 0.1f * g;
      v[i] = 0.999f * v[i] + 0.001f * g * g;
      w[i] -= 1e-3f * m[i] / (std::sqrt(v[i]) + 1e-8f);
    }
  }
  Status add_to(StateRegistry& reg, int rank, int ranks) {
    const std::vector<int64_t> shape{static_cast<int64_t>(n) * ranks};
    const Slice slice{{static_cast<int64_t>(n) * rank}, {static_cast<int64_t>(n)}};
    TSR_RETURN_IF_ERROR(reg.add_host_tensor("w", hal::DType::kF32, shape, slice, w.data()));
    TSR_RETURN_IF_ERROR(reg.add_host_tensor("adam.m", hal::DType::kF32, shape, slice, m.data()));
    return reg.add_host_tensor("adam.v", hal::DType::kF32, shape, slice, v.data());
  }
};

// A checkpointer in args.dir/`sub` with this rank's state registered.
Result<std::unique_ptr<Checkpointer>> open(
    const Args& args, const std::string& sub, std::shared_ptr<RankGroup> g, RankState& s, int rank,
    int ranks, const std::function<void(CheckpointOptions&)>& tune = {}) {
  CheckpointOptions o;
  o.dir = args.dir + "/" + sub;
  o.keep_last = 2;
  o.zstd_level = args.zstd_level;
  // The default persist priority (nice), as a job runs it; the step-time phase sets its own.
  // Between saves nothing else runs, so nice costs the persist nothing; it lets the ranks still
  // taking their snapshots go first.
  if (tune) tune(o);
  TSR_ASSIGN_OR_RETURN(auto ck, Checkpointer::create(o, std::move(g)));
  TSR_RETURN_IF_ERROR(s.add_to(ck->registry(), rank, ranks));
  return ck;
}

Result<SaveResult> save(Checkpointer& ck, int64_t step, SaveStart* start = nullptr) {
  TSR_ASSIGN_OR_RETURN(SaveStart s, ck.save_async(step));
  if (start) *start = s;
  TSR_ASSIGN_OR_RETURN(SaveResult r, ck.wait());
  TSR_RETURN_IF_ERROR(r.status);
  return r;
}

// dd-style: `bytes` in 4 MiB writes to one new file, then fsync; `direct` as `oflag=direct`
// (O_DIRECT from an aligned block), else buffered as `conv=fsync`.
Result<double> dd_write(const std::string& path, size_t bytes, bool direct) {
  constexpr size_t kBlock = 4u << 20;
  std::unique_ptr<char, decltype(&std::free)> block(
      static_cast<char*>(std::aligned_alloc(4096, kBlock)), &std::free);
  for (size_t i = 0; i < kBlock; ++i) block.get()[i] = static_cast<char>(i * 131 + 7);
  bytes = bytes / 4096 * 4096;  // whole blocks, as dd's
  const auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return internal_error("open " + path + ": " + std::strerror(errno));
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kBlock, bytes - done);
    if (::write(fd, block.get(), n) != static_cast<ssize_t>(n)) {
      ::close(fd);
      return internal_error("write " + path + ": " + std::strerror(errno));
    }
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  const double s = since(t0);
  std::filesystem::remove(path);
  return s;
}

void drop_cache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
}

#define BENCH_OK(expr)                                                                \
  do {                                                                                \
    const Status bench_status_ = (expr);                                              \
    if (!bench_status_.ok()) {                                                        \
      std::fprintf(stderr, "rank %d: %s\n", rank, bench_status_.to_string().c_str()); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define BENCH_ASSIGN(lhs, expr) \
  auto lhs##_r = (expr);        \
  BENCH_OK(lhs##_r.status());   \
  auto lhs = std::move(lhs##_r).value()

int run_rank(const Args& args, int rank, std::shared_ptr<RankGroup> group) {
  const int ranks = group->size();
  RankState s;
  s.init(args.bytes_per_rank / 3 / sizeof(float), rank);
  const size_t bytes = 3 * s.n * sizeof(float);
  Json out;

  // 1. Blocking time vs memcpy, and persist vs dd, in alternating rounds (drift on a shared
  // machine hits both alike). The memcpy target is freed before the checkpointer allocates its
  // buffers (peak memory).
  std::vector<double> memcpy_runs;
  {
    std::vector<char> dst(bytes);
    std::memset(dst.data(), 1, dst.size());
    for (int i = 0; i < kRounds; ++i) {
      const auto t0 = Clock::now();
      std::memcpy(dst.data(), s.w.data(), s.n * 4);
      std::memcpy(dst.data() + s.n * 4, s.m.data(), s.n * 4);
      std::memcpy(dst.data() + s.n * 8, s.v.data(), s.n * 4);
      memcpy_runs.push_back(since(t0));
    }
  }
  {
    BENCH_ASSIGN(ck, open(args, "full", group, s, rank, ranks));
    // Two saves allocate and first fill the two reused snapshot buffers (a job's first saves).
    for (int64_t step = 1; step <= 2; ++step) BENCH_OK(save(*ck, step).status());
    std::vector<double> blocking_runs, persist_runs, gc_runs, dd_runs, dd_direct_runs;
    SaveResult full;
    for (int64_t step = 3; step < 3 + kRounds; ++step) {
      s.step();
      SaveStart start;
      BENCH_ASSIGN(r, save(*ck, step, &start));
      blocking_runs.push_back(start.blocking_s);
      persist_runs.push_back(r.persist_s);
      gc_runs.push_back(r.gc_s);
      full = r;
      const std::string dd_path = args.dir + "/dd-" + std::to_string(rank) + ".bin";
      BENCH_OK(group->barrier());  // rank 0's garbage collection is over
      BENCH_ASSIGN(dd_s, dd_write(dd_path, r.bytes_written, false));
      dd_runs.push_back(dd_s);
      BENCH_OK(group->barrier());
      BENCH_ASSIGN(dd_direct_s, dd_write(dd_path, r.bytes_written, true));
      dd_direct_runs.push_back(dd_direct_s);
      BENCH_OK(group->barrier());
    }
    out["memcpy_s"] = memcpy_runs;
    out["blocking_s"] = blocking_runs;
    out["persist_s"] = persist_runs;
    out["gc_s"] = gc_runs;
    out["dd_s"] = dd_runs;
    out["dd_direct_s"] = dd_direct_runs;
    out["bytes_written"] = full.bytes_written;
  }
  // 2. Step time while a rate-limited save persists.
  {
    BENCH_ASSIGN(ck, open(args, "limited", group, s, rank, ranks, [&](CheckpointOptions& o) {
                   o.max_write_mbps = args.max_write_mbps;
                   o.persist_priority = args.priority;
                 }));
    BENCH_OK(group->barrier());
    // Medians: the baseline is taken before the save and again after it (drift on a shared
    // machine); only steps that start while the save persists count as "during", at most
    // --steps-during-save of them (a low-priority save on busy cores can outlast many steps).
    auto timed_step = [&] {
      const auto t0 = Clock::now();
      s.step();
      return since(t0);
    };
    std::vector<double> base, during;
    for (int i = 0; i < 5; ++i) base.push_back(timed_step());
    BENCH_OK(group->barrier());
    BENCH_OK(ck->save_async(10).status());
    while (static_cast<int>(during.size()) < args.steps_during_save &&
           (during.empty() || ck->busy())) {
      during.push_back(timed_step());
    }
    const bool outlasted = ck->busy();
    BENCH_ASSIGN(r, ck->wait());
    BENCH_OK(r.status);
    BENCH_OK(group->barrier());
    for (int i = 0; i < 5; ++i) base.push_back(timed_step());
    out["step_s"] = median(base);
    out["step_during_save_s"] = median(during);
    out["steps_during_save"] = during.size();
    out["save_outlasted_steps"] = outlasted;
    out["limited_persist_s"] = r.persist_s;
  }
  // 3. Delta bytes vs full.
  {
    BENCH_ASSIGN(ck, open(args, "delta", group, s, rank, ranks,
                          [](CheckpointOptions& o) { o.full_every = 100; }));
    BENCH_OK(save(*ck, 1).status());
    BENCH_ASSIGN(frozen, save(*ck, 2));
    s.step(0.1);
    BENCH_ASSIGN(tenth, save(*ck, 3));
    s.step(1.0);
    BENCH_ASSIGN(dense, save(*ck, 4));
    out["delta_frozen"] = double(frozen.bytes_written) / frozen.bytes_full;
    out["delta_10pct"] = double(tenth.bytes_written) / tenth.bytes_full;
    out["delta_dense"] = double(dense.bytes_written) / dense.bytes_full;
  }
  // 4. Restore of a restarted rank (rank 1): buddy memory vs storage.
  {
    BENCH_ASSIGN(ck, open(args, "replica", group, s, rank, ranks,
                          [](CheckpointOptions& o) { o.peer_replica = true; }));
    BENCH_OK(save(*ck, 1).status());
    if (rank == 1) {
      ck.reset();
      BENCH_ASSIGN(fresh, open(args, "replica", group, s, rank, ranks,
                               [](CheckpointOptions& o) { o.peer_replica = true; }));
      ck = std::move(fresh);
    }
    BENCH_ASSIGN(peer, ck->restore());
    if (rank == 0) drop_cache(args.dir + "/replica");
    BENCH_OK(group->barrier());
    BENCH_ASSIGN(storage, ck->load());
    out["restore_peer_s"] = peer.seconds;
    out["restore_peer_path"] = peer.detail;
    out["restore_storage_s"] = storage.seconds;
  }
  auto all = group->allgather(out.dump());
  BENCH_OK(all.status());
  if (rank != 0) return 0;

  std::vector<Json> per;
  for (const auto& text : *all) per.push_back(Json::parse(text));
  auto max_of = [&](const char* key) {
    double v = 0;
    for (const auto& j : per) v = std::max(v, j[key].get<double>());
    return v;
  };
  auto mean_of = [&](const char* key) {
    double v = 0;
    for (const auto& j : per) v += j[key].get<double>() / per.size();
    return v;
  };
  double written = 0;
  for (const auto& j : per) written += j["bytes_written"].get<double>();
  // Phase 1 rounds: the slowest rank of each round (the save and the dd runs are collective),
  // then the median over rounds.
  auto round_median = [&](const char* key) {
    std::vector<double> slowest(per[0][key].size(), 0.0);
    for (const auto& j : per) {
      for (size_t i = 0; i < slowest.size(); ++i) {
        slowest[i] = std::max(slowest[i], j[key][i].get<double>());
      }
    }
    return median(slowest);
  };
  // Each round's reference is the faster of the two dd-style writes of that round.
  std::vector<double> ratio_runs, reference_runs;
  for (size_t i = 0; i < per[0]["dd_s"].size(); ++i) {
    double dd = 0, dd_direct = 0, persist = 0;
    for (const auto& j : per) {
      dd = std::max(dd, j["dd_s"][i].get<double>());
      dd_direct = std::max(dd_direct, j["dd_direct_s"][i].get<double>());
      persist = std::max(persist, j["persist_s"][i].get<double>());
    }
    reference_runs.push_back(std::min(dd, dd_direct));
    ratio_runs.push_back(std::min(dd, dd_direct) / persist);
  }
  Json report = {
      {"ranks", ranks},
      {"state_bytes_per_rank", bytes},
      {"rounds", kRounds},
      {"blocking_s", round_median("blocking_s")},
      {"memcpy_s", round_median("memcpy_s")},
      {"blocking_vs_memcpy", round_median("blocking_s") / round_median("memcpy_s")},
      {"persist_GBps", written / round_median("persist_s") / 1e9},
      {"gc_s", round_median("gc_s")},
      {"dd_GBps", written / round_median("dd_s") / 1e9},
      {"dd_direct_GBps", written / round_median("dd_direct_s") / 1e9},
      {"reference_GBps", written / median(reference_runs) / 1e9},
      {"persist_vs_dd", median(ratio_runs)},
      {"persist_vs_dd_runs", ratio_runs},
      {"step_s", mean_of("step_s")},
      {"step_during_save_s", mean_of("step_during_save_s")},
      {"step_slowdown", mean_of("step_during_save_s") / mean_of("step_s") - 1},
      {"max_write_mbps_per_rank", args.max_write_mbps},
      {"persist_priority", priority_name(args.priority)},
      {"limited_persist_s", max_of("limited_persist_s")},
      {"steps_during_save", per[0]["steps_during_save"]},
      {"save_outlasted_steps", per[0]["save_outlasted_steps"]},
      {"delta_frozen", mean_of("delta_frozen")},
      {"delta_10pct", mean_of("delta_10pct")},
      {"delta_dense", mean_of("delta_dense")},
      {"restore_rank1_peer_s", per[1]["restore_peer_s"]},
      {"restore_rank1_peer_path", per[1]["restore_peer_path"]},
      {"restore_rank1_storage_s", per[1]["restore_storage_s"]},
  };
  if (args.json) {
    report["per_rank"] = per;  // every rank's runs, for a closer look
    std::printf("%s\n", report.dump(2).c_str());
    return 0;
  }
  std::printf(
      "ckpt_bench: %d ranks x %.0f MiB (fp32 weights + 2 Adam moments), zstd level %d, "
      "persist thread priority while stepping %s, dir %s\n",
      ranks, bytes / 1048576.0, args.zstd_level, priority_name(args.priority), args.dir.c_str());
  std::printf("| metric | value |\n|---|---|\n");
  std::printf(
      "| save_async blocking (max over ranks, median of %d) | %.1f ms = %.2fx memcpy (%.1f ms) |\n",
      kRounds, 1e3 * round_median("blocking_s"),
      round_median("blocking_s") / round_median("memcpy_s"), 1e3 * round_median("memcpy_s"));
  std::string rounds_text;
  for (double r : ratio_runs) {
    rounds_text += (rounds_text.empty() ? "" : ", ") + std::to_string(std::lround(100 * r)) + "%";
  }
  std::printf(
      "| persist, all ranks (median of %d rounds; each round against the faster of a buffered "
      "and an O_DIRECT dd-style write right after) | %.2f GB/s = %.0f%% of dd-style writes "
      "(buffered %.2f GB/s, O_DIRECT %.2f GB/s; rounds %s); then garbage collection %.0f ms |\n",
      kRounds, written / round_median("persist_s") / 1e9, 100 * median(ratio_runs),
      written / round_median("dd_s") / 1e9, written / round_median("dd_direct_s") / 1e9,
      rounds_text.c_str(), 1e3 * round_median("gc_s"));
  std::printf(
      "| step time while saving at %.0f MB/s per rank | %+.1f%% (%.1f -> %.1f ms over %d steps; "
      "the save took %.1f s%s) |\n",
      args.max_write_mbps, 100 * (mean_of("step_during_save_s") / mean_of("step_s") - 1),
      1e3 * mean_of("step_s"), 1e3 * mean_of("step_during_save_s"),
      per[0]["steps_during_save"].get<int>(), max_of("limited_persist_s"),
      per[0]["save_outlasted_steps"].get<bool>() ? ", outlasting the measured steps" : "");
  std::printf("| delta / full: frozen, 10%% changed, dense Adam | %.3f, %.3f, %.3f |\n",
              mean_of("delta_frozen"), mean_of("delta_10pct"), mean_of("delta_dense"));
  std::printf("| restore rank 1 from %s vs storage | %.1f ms vs %.1f ms |\n",
              per[1]["restore_peer_path"].get<std::string>().c_str(),
              1e3 * per[1]["restore_peer_s"].get<double>(),
              1e3 * per[1]["restore_storage_s"].get<double>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "ckpt_bench: the checkpointer with N ranks as processes (socketpairs between them), each "
      "holding --bytes-per-rank of fp32 weights and two Adam moments. Reports save_async "
      "blocking vs memcpy, persist throughput vs dd-style writes (buffered and O_DIRECT, medians "
      "of 5 rounds), step time while a rate-limited save persists, delta vs full bytes, and "
      "restoring a rank from its buddy's memory vs storage. Needs about 4x the state per rank of "
      "host memory.",
      "ckpt_bench"};
  app.add_option("--ranks", args.ranks, "ranks (processes)")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  std::string bytes = "256MiB";
  app.add_option("--bytes-per-rank", bytes, "state per rank (weights + two moments), e.g. 1GiB")
      ->capture_default_str();
  app.add_option("--dir", args.dir, "where to write (removed before and after)")
      ->capture_default_str();
  app.add_option("--max-write-mbps", args.max_write_mbps,
                 "per-rank write limit for the step-time phase (MB/s)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--zstd-level", args.zstd_level, "zstd level (-1: the checkpointer's default)")
      ->capture_default_str();
  const std::map<std::string, PersistPriority> priorities = {{"normal", PersistPriority::kNormal},
                                                             {"nice", PersistPriority::kNice},
                                                             {"idle", PersistPriority::kIdle}};
  std::string priority = "nice";
  app.add_option("--persist-priority", priority, "the persist thread's priority")
      ->check(CLI::IsMember({"normal", "nice", "idle"}))
      ->capture_default_str();
  app.add_option("--steps-during-save", args.steps_during_save,
                 "optimizer steps timed while the limited save persists")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", args.json, "print JSON (every rank's runs) instead of the table");
  CLI11_PARSE(app, argc, argv);
  auto parsed = tessera::env::parse_bytes(bytes);
  if (!parsed.ok() || *parsed < 3 * sizeof(float)) {
    std::fprintf(stderr, "ckpt_bench: --bytes-per-rank '%s': %s\n", bytes.c_str(),
                 parsed.ok() ? "too small" : parsed.status().message().c_str());
    return 2;
  }
  args.bytes_per_rank = *parsed;
  args.priority = priorities.at(priority);
  // Peak host memory: ~4x the state per rank (state, two snapshot buffers, replica or staging).
  const size_t need = 4 * args.bytes_per_rank * static_cast<size_t>(args.ranks);
  const size_t have = memory_available();
  if (have > 0 && need > have) {
    std::fprintf(stderr,
                 "ckpt_bench: warning: needs about %.1f GiB of host memory, %.1f GiB available\n",
                 need / 1073741824.0, have / 1073741824.0);
  }
  std::filesystem::remove_all(args.dir);
  std::filesystem::create_directories(args.dir);
  auto exits = tessera::ckpt::testing::run_ranks(
      args.ranks,
      [&](int rank, std::shared_ptr<RankGroup> group) { return run_rank(args, rank, group); },
      3600);
  std::filesystem::remove_all(args.dir);
  int code = 0;
  for (size_t r = 0; r < exits.size(); ++r) {
    if (exits[r].code != 0) {
      std::fprintf(stderr, "ckpt_bench: rank %zu failed (exit %d, signal %d)\n", r, exits[r].code,
                   exits[r].signal);
      code = 1;
    }
  }
  return code;
}
