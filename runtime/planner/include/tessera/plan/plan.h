// A parallel plan and what the performance model predicts for it. Values; thread-safe.
//
// Rank layout (see groups.h): tp innermost, then cp, then dp (ep carved out of dp), pp outermost,
// so TP groups stay inside a host and PP crosses hosts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/plan/cluster.h"

namespace tessera::plan {

enum class Recompute { kNone, kSelective, kFull };
std::string_view recompute_name(Recompute recompute);  // "none", "selective", "full"

// Workload limits: far beyond real runs (millions of sequences, 16M-token contexts); they keep
// the search's divisor lists and the IR's integer products in range.
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

// What one training step processes.
struct Workload {
  int64_t global_batch = 0;  // sequences per step
  int64_t seq_len = 0;       // tokens per sequence
  Dtype dtype = Dtype::kBf16;
};

struct Plan {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  int vp = 1;                    // virtual stages (model chunks) per device: interleaved 1F1B
  int mbs = 1;                   // micro-batch size, sequences
  int64_t num_microbatches = 1;  // per DP rank per step: global_batch / (dp * mbs)
  int zero = 0;                  // ZeRO stage 0..3
  Recompute recompute = Recompute::kNone;
  bool sp = false;  // Megatron sequence parallelism (needs tp > 1)
  // Blocks per pipeline stage (size pp), from the partitioner; empty: let evaluate() choose.
  std::vector<int> stage_blocks;
};

// "tp=8 pp=64 dp=6 cp=1 ep=1 vp=1 mbs=1 zero=1 recompute=full sp=1"
std::string plan_summary(const Plan& plan);

// Seconds of one step: the sum of every field (total()); communication figures are the exposed
// (not overlapped) part. The per-micro-batch terms are those of the critical pipeline stage.
struct TimeBreakdown {
  double compute_s = 0;  // GEMMs and attention (recomputation included) on the critical stage
  double bubble_s = 0;   // pipeline fill and drain
  double tp_comm_s = 0;
  double cp_comm_s = 0;
  double ep_comm_s = 0;
  double pp_comm_s = 0;
  double dp_comm_s = 0;         // gradient reduction, ZeRO parameter gathers: the part not hidden
  double optimizer_s = 0;       // the Adam step over the parameters the device updates
  double memory_bound_s = 0;    // norms, softmax, activations, dropout, residuals, loss
  double launch_s = 0;          // kernel launch gaps
  double grad_clip_s = 0;       // gradient norm (+ its all-reduce) and zeroing the gradients
  double embedding_sync_s = 0;  // tied embedding's gradient all-reduce, first and last stage
  double total() const {
    return compute_s + bubble_s + tp_comm_s + cp_comm_s + ep_comm_s + pp_comm_s + dp_comm_s +
           optimizer_s + memory_bound_s + launch_s + grad_clip_s + embedding_sync_s;
  }
};

// Bytes on the device that needs the most (the pipeline stage that binds).
struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, transient = 0;
  double total() const { return weights + gradients + optimizer + activations + transient; }
};

struct Estimate {
  Plan plan;
  TimeBreakdown time;
  MemoryBreakdown memory;
  int binding_stage = 0;  // the stage whose memory is reported
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_device = 0;     // model FLOPs (no recomputation) / step / device
  double hardware_tflops_per_device = 0;  // FLOPs executed, recomputation included
  double mfu = 0;                         // model FLOPs / (step x devices x peak)
  double memory_budget_bytes = 0;         // device memory x (1 - reserve)
  bool fits = false;
  std::vector<double> stage_time_s;  // per micro-batch, per device (all its chunks)
  std::vector<double> stage_fwd_s;   // the forward share of stage_time_s (with its comm)
  std::vector<double> stage_memory_bytes;
  double p2p_s = 0;  // one pipeline transfer (activation or gradient)
};

}  // namespace tessera::plan
