// Planner search speed (single-threaded): the 1T preset (s=2048, V=51200) on 3072 A100-80GB
// (384 hosts of 8) with global batch 3072, unconstrained, at most 100 ms median (issue 19 §4;
// docs/PLANNER.md records the figure); llama2-7b on 8 devices under 10 ms (issue 6). Each iteration
// is a full search from scratch (no state survives between iterations). Counters: candidates
// considered, plans that fit, the best plan's predicted MFU.
//   build/bin/tessera_planner_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include "tessera/ir/loaders.h"
#include "tessera/plan/search.h"

namespace {

using namespace tessera;

void search(benchmark::State& state, const char* model_name, int64_t devices, int64_t batch,
            int64_t seq) {
  const ir::Model model = *ir::model_preset(model_name);
  const plan::ClusterSpec cluster =
      *plan::with_devices(*plan::cluster_preset("dgx-a100-80gb"), devices);
  const plan::Workload workload{batch, seq, plan::Dtype::kBf16};
  int64_t candidates = 0, feasible = 0;
  double mfu = 0;
  for (auto _ : state) {
    auto result = plan::search_plans(model, cluster, workload, {}, {});
    if (!result.ok()) {
      state.SkipWithError(result.status().to_string().c_str());
      return;
    }
    candidates = result->candidates;
    feasible = result->feasible;
    mfu = result->plans.front().mfu;
    benchmark::DoNotOptimize(result);
  }
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["feasible"] = static_cast<double>(feasible);
  state.counters["best_mfu"] = mfu;
}

void BM_Plan_Gpt1T_3072xA100(benchmark::State& state) {
  search(state, "gpt-1t", 3072, 3072, 2048);
}
BENCHMARK(BM_Plan_Gpt1T_3072xA100)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_Plan_Llama2_7B_8xA100(benchmark::State& state) {
  search(state, "llama2-7b", 8, 64, 4096);
}
BENCHMARK(BM_Plan_Llama2_7B_8xA100)->Unit(benchmark::kMillisecond);

void BM_Plan_Gpt3_175B_1536xA100(benchmark::State& state) {
  search(state, "gpt3-175b", 1536, 1536, 2048);
}
BENCHMARK(BM_Plan_Gpt3_175B_1536xA100)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
