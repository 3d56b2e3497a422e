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
  // Each GEMM dim x scales efficiency by x / (x + knee). 0: derived from the device, 128 on an
  // A100 scaled by the device's FLOP/byte balance (peak / memory bandwidth): a tile's fixed
  // load/store overhead is bytes, its useful work FLOPs, so a faster math unit needs proportionally
  // larger GEMMs to hide it (H100: ~247). A calibration sets the measured knee.
  double gemm_knee = 0;
  double memory_efficiency = 0.8;  // achieved fraction of memory bandwidth in elementwise ops
  double dp_overlap = 1.0;         // share of the last backward the gradient reduction hides under
  double tp_overlap = 0.0;         // share of TP collectives hidden (0: Megatron-LM default)
  double cp_overlap = 1.0;         // ring attention overlaps KV exchange with attention compute
  double optimizer_bytes_per_param = 28;  // Adam traffic: read p,m,v (fp32), g; write p,m,v, p16
  // Gradient clipping's norm reads the gradients the device's optimizer updates, and the next
  // step's zeroing writes the whole local gradient buffer (sharded only from ZeRO-2: Megatron-LM's
  // distributed optimizer keeps every gradient and reduce-scatters it), each value in the type it
  // is reduced in (grad_reduce_bytes). Passes over that buffer:
  double grad_norm_passes = 1, grad_zero_passes = 1;
  // Bytes per gradient value in the data-parallel reduction. 0: 4 for bf16 (Megatron-LM forces
  // fp32 gradient accumulation and reduction for bf16 models), 2 for fp16.
  double grad_reduce_bytes = 0;
  // Gradients reduce in buckets as the backward produces them (Megatron-LM: max(40M, 1M x dp)
  // parameters per bucket); the last bucket can only start when the backward ends.
  double dp_bucket_params = 40e6;
  // Non-matmul work of fused attention per score element: one exponential on the special-function
  // units (DeviceSpec::sfu_tops) and this many fp32 operations (scale and running max, sum,
  // convert) at the fp32 peak; the backward (exponentials recomputed, dS formed) is priced like
  // the core's GEMMs.
  double softmax_fp32_ops_per_score = 4;
  // MoE: capacity factor (> 0: every expert computes factor x the mean tokens, padded, and the
  // all-to-alls carry as much; 0: dropless, the busiest EP rank's binomial excess over the mean)
  // and the router's own imbalance (busiest / mean beyond chance; 1: as balanced as chance).
  double moe_capacity_factor = 0;
  double moe_imbalance = 1.0;
  // Fused attention (FlashAttention): the s x s scores never reach memory (no score traffic, no
  // stored scores, only fp32 row statistics), and backward recomputes QK^T (2.5 x forward for the
  // attention core instead of 2 x). Off reproduces Megatron-LM 2021 and Korthikanti's formulas.
  bool flash_attention = true;
  bool p2p_scatter_gather = true;  // PP sends 1/t of the activation per TP rank (Megatron-LM)
  // ZeRO-3 as DeepSpeed runs it: each module's weights gathered (and gradients reduce-scattered)
  // by flat collectives over all data-parallel ranks, each device's traffic through its own share
  // of the host's NICs (flat_group_path), and under full recomputation the backward's two gathers
  // of a block issued when the block's backward starts, not prefetched. false: a hierarchical
  // implementation with prefetch in the backward (MiCS, ZeRO++'s hpZ, FSDP's HYBRID_SHARD with
  // BACKWARD_PRE), priced like the other data-parallel collectives (group_path).
  bool zero3_flat = true;
  bool allow_tp_across_hosts = false;
};

// The GEMM knee in effect: options.gemm_knee, else derived from the device (see CostOptions).
double effective_gemm_knee(const ClusterSpec& cluster, Dtype dtype, const CostOptions& options);
// Bytes per gradient value in the data-parallel reduction (CostOptions::grad_reduce_bytes).
double grad_reduce_bytes(Dtype dtype, const CostOptions& options);

// One (stride, size) group of ranks placed on the cluster: its achieved bus bandwidth and
// per-step latency. TP-innermost layout: stride = product of the inner dimensions.
// Latency: a ring's chunk crosses n - 1 links, hosts - 1 of them between hosts (latency) and the
// rest inside hosts (intra_latency); an all-reduce takes the cheaper of the ring and NCCL's tree
// (2 log2(hosts) network hops plus the chains inside hosts).
struct LinkPath {
  double busbw = 0;          // bytes/s per device
  double latency = 0;        // seconds per step between hosts (inside: intra_latency)
  double intra_latency = 0;  // seconds per step inside a host
  int64_t per_host = 1;      // group members per host
  bool inter_host = false;
};
LinkPath group_path(const ClusterSpec& cluster, int64_t stride, int64_t size);
// The same group when every member's ring traffic leaves through its own share of the host's NICs
// (nics x per-NIC bandwidth / devices per host), whatever the number of members per host: a
// collective that does not use the host's other NICs for its members' data (ZeRO-3's flat
// per-module collectives, CostOptions::zero3_flat). Inside one host: group_path.
LinkPath flat_group_path(const ClusterSpec& cluster, int64_t stride, int64_t size);

double allreduce_time(double bytes, int64_t ranks, const LinkPath& path);
double allgather_time(double bytes, int64_t ranks, const LinkPath& path);  // bytes: whole array
double alltoall_time(double bytes, int64_t ranks, const LinkPath& path);   // bytes per rank
double p2p_time(double bytes, const LinkPath& path);
// Seconds of latency alone (no bandwidth) of each collective over n ranks.
double ring_latency(int64_t ranks, const LinkPath& path);
double allreduce_latency(int64_t ranks, const LinkPath& path);
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
  double fwd_s = 0;              // compute only (GEMMs, memory-bound work, kernel launches)
  double bwd_s = 0;              // compute, recomputation included
  double mem_s = 0;              // the memory-bound share of fwd_s + bwd_s
  double launch_s = 0;           // the kernel-launch share of fwd_s + bwd_s
  double tp_comm_s = 0;          // exposed TP collectives, forward + backward (+ recompute)
  double cp_comm_s = 0;          // exposed ring-attention exchange
  double ep_comm_s = 0;          // expert all-to-alls
  double act_bytes = 0;          // kept per in-flight micro-batch
  double transient_bytes = 0;    // extra while its backward runs (recomputed activations)
  double dense_params = 0;       // on this device, after TP sharding
  double expert_params = 0;      // on this device, after EP and TP sharding
  double max_module_params = 0;  // the largest weight matrix (one module) on this device
  double total_s() const { return fwd_s + bwd_s + tp_comm_s + cp_comm_s + ep_comm_s; }
};

struct ShapeCosts {
  ShapeKey key;
  std::vector<BlockCost> blocks;  // per model block
  BlockCost pre, post;            // embedding; final norm + LM head (+ tied copy with pp > 1)
  bool homogeneous = false;       // every block costs the same
  double max_transient = 0;
  double max_block_params = 0;   // dense + expert, for ZeRO-3's gathered block
  double max_module_params = 0;  // the largest weight matrix, pre/post included (flat ZeRO-3)
  // Prefix sums over blocks (size blocks + 1) so any range costs O(1).
  std::vector<double> time, fwd, bwd, tp, cp, ep, act, dense, expert, mem, launch;
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
