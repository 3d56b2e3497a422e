// The hardware performance model: prices GEMMs, memory-bound ops and collectives on a cluster,
// and turns a model + plan into per-block costs (ShapeCosts) that StageModel (stage_model.h)
// assembles into a step time and per-device memory. Every time is seconds, every size bytes.
//
// Sources (shared/reference/hardware.md): GEMM efficiency curve over shape; nccl-tests bus
// bandwidth factors (allreduce 2(n-1)/n, allgather/reduce-scatter/all-to-all (n-1)/n, send 1)
// plus a per-step latency; TP inside a host, DP/PP across hosts with the NICs shared by the host's
// devices. Thread-safe: pure functions of values.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/ir/model.h"
#include "tessera/plan/cluster.h"
#include "tessera/plan/plan.h"

namespace tessera::plan {

// Knobs of the model; defaults are the documented assumptions of docs/PLANNER.md.
struct CostOptions {
  double reserve_fraction = 0.10;  // device memory kept free: fragmentation, workspaces, NCCL
  double gemm_efficiency = 0;      // 0: the device's figure (DeviceSpec::gemm_efficiency)
  double gemm_knee = 128;          // each GEMM dim x scales efficiency by x / (x + knee)
  double memory_efficiency = 0.8;  // achieved fraction of memory bandwidth in elementwise ops
  double dp_overlap = 1.0;         // share of the last backward the gradient reduction hides under
  double tp_overlap = 0.0;         // share of TP collectives hidden (0: Megatron-LM default)
  double cp_overlap = 1.0;         // ring attention overlaps KV exchange with attention compute
  double optimizer_bytes_per_param = 28;  // Adam traffic: read p,m,v (fp32), g; write p,m,v, p16
  // Fused attention (FlashAttention): the s x s scores never reach memory (no score traffic, no
  // stored scores, only fp32 row statistics), and backward recomputes QK^T (2.5 x forward for the
  // attention core instead of 2 x). Off reproduces Megatron-LM 2021 and Korthikanti's formulas.
  bool flash_attention = true;
  bool p2p_scatter_gather = true;  // PP sends 1/t of the activation per TP rank (Megatron-LM)
  bool allow_tp_across_hosts = false;
};

// One (stride, size) group of ranks placed on the cluster: its achieved bus bandwidth and
// per-step latency. TP-innermost layout: stride = product of the inner dimensions.
struct LinkPath {
  double busbw = 0;    // bytes/s per device
  double latency = 0;  // seconds per algorithm step
  bool inter_host = false;
};
LinkPath group_path(const ClusterSpec& cluster, int64_t stride, int64_t size);

double allreduce_time(double bytes, int64_t ranks, const LinkPath& path);
double allgather_time(double bytes, int64_t ranks, const LinkPath& path);  // bytes: whole array
double alltoall_time(double bytes, int64_t ranks, const LinkPath& path);   // bytes per rank
double p2p_time(double bytes, const LinkPath& path);
// Seconds for a batch of GEMMs at `peak` FLOP/s with the efficiency curve.
double gemm_time(double m, double n, double k, double batch, double peak, double efficiency,
                 double knee);

// The dimensions that change per-block costs.
struct ShapeKey {
  int tp = 1, cp = 1, ep = 1, mbs = 1;
  bool sp = false;
  Recompute recompute = Recompute::kNone;
  friend bool operator==(const ShapeKey&, const ShapeKey&) = default;
};

// Costs of one block (or of the pre/post groups) for one micro-batch on one device.
struct BlockCost {
  double fwd_s = 0;            // compute only
  double bwd_s = 0;            // compute, recomputation included
  double tp_comm_s = 0;        // exposed TP collectives, forward + backward (+ recompute)
  double cp_comm_s = 0;        // exposed ring-attention exchange
  double ep_comm_s = 0;        // expert all-to-alls
  double act_bytes = 0;        // kept per in-flight micro-batch
  double transient_bytes = 0;  // extra while its backward runs (recomputed activations)
  double dense_params = 0;     // on this device, after TP sharding
  double expert_params = 0;    // on this device, after EP and TP sharding
  double total_s() const { return fwd_s + bwd_s + tp_comm_s + cp_comm_s + ep_comm_s; }
};

struct ShapeCosts {
  ShapeKey key;
  std::vector<BlockCost> blocks;  // per model block
  BlockCost pre, post;            // embedding; final norm + LM head (+ tied copy with pp > 1)
  bool homogeneous = false;       // every block costs the same
  double max_transient = 0;
  double max_block_params = 0;  // dense + expert, for ZeRO-3's gathered layer
  // Prefix sums over blocks (size blocks + 1) so any range costs O(1).
  std::vector<double> time, fwd, bwd, tp, cp, ep, act, dense, expert;
};

ShapeCosts compute_shape_costs(const ir::Model& model, const ClusterSpec& cluster,
                               const Workload& workload, const ShapeKey& key,
                               const CostOptions& options);

// Checks a plan against the model, cluster and workload; errors say which rule it breaks
// ("tp=3 does not divide num_attention_heads 32"). Fills nothing.
Status validate_plan(const ir::Model& model, const ClusterSpec& cluster, const Workload& workload,
                     const Plan& plan, const CostOptions& options);

// Validates, partitions blocks over stages when plan.stage_blocks is empty (DP, see
// partition.h), and predicts time and memory. `fits` tells whether it fits the budget.
Result<Estimate> evaluate(const ir::Model& model, const ClusterSpec& cluster,
                          const Workload& workload, const Plan& plan, const CostOptions& options);

}  // namespace tessera::plan
