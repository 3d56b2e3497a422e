// Per-block costs for one (tp, cp, ep, mbs, sp, recompute) shape. The IR gives t = 1 numbers;
// this file applies the splits (hardware.md, Korthikanti et al. 2022):
//   activations: replicated / (sp ? t : 1) + sharded / t + scores / t, all / cp;
//   selective recomputation drops the scores; full keeps the block input 2sbh (/ t with SP);
//   TP: one all-reduce (or all-gather + reduce-scatter with SP, same volume) of b s h per
//   attention/MLP layer forward, one backward, one more forward under full recomputation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tessera/plan/cost_model.h"

namespace tessera::plan {
namespace {

struct Context {
  const ClusterSpec& cluster;
  const Workload& workload;
  const ShapeKey& key;
  const CostOptions& options;
  double peak = 0, efficiency = 0, membw = 0, knee = 128;
  double softmax_s = 0;  // seconds per score of fused attention's non-matmul work
  double launch = 0;     // seconds per kernel
  LinkPath tp_path, cp_path, ep_path;
};

// Kernels one layer's forward launches (Megatron-LM's fused kernels): GEMMs, fused elementwise
// ops, and one per TP collective. Backward launches about twice as many (data and weight
// gradients per GEMM, the elementwise backward kernels).
double forward_kernels(const Context& x, const ir::Layer& l) {
  switch (l.kind) {
    case ir::LayerKind::kEmbedding: return 2 + (l.positions ? 1 : 0) + (l.dropout ? 1 : 0);
    case ir::LayerKind::kAttention:
      // QKV, core, output projection, bias-dropout-add; the materialised core is
      // QK^T, scale-mask-softmax, (dropout), softmax x V; fused RoPE on Q and K.
      return 3 + (x.options.flash_attention ? 1 : 3 + (l.dropout ? 1 : 0)) + (l.rotary ? 2 : 0);
    case ir::LayerKind::kMlp: return 4;
    case ir::LayerKind::kMoe: return 10;  // router, top-k, permute, 3 grouped GEMMs, ...
    case ir::LayerKind::kNorm: return 1;
    // GEMM; the unfused vocab-parallel cross-entropy: fp32 copy, max, subtract, the target's
    // logit, exp, sum, log - target, divide.
    case ir::LayerKind::kLmHead: return 9;
  }
  return 1;
}

double kv_split(const ir::Layer& l, int tp) {
  return static_cast<double>(std::min<int64_t>(tp, l.kv_heads));
}

// Forward compute of one layer, and the attention core's share (what selective recomputes).
struct LayerTimes {
  double gemm_s = 0, core_s = 0, traffic_s = 0, core_traffic_s = 0, bwd_traffic_s = 0;
  double max_weight = 0;  // parameters of the largest weight matrix after the split
  double fwd_s() const { return gemm_s + traffic_s; }
};

// The busiest EP rank's tokens over the mean (MoE layers): with a capacity factor every expert
// computes (and receives) capacity = factor x mean tokens; dropless, the routed load of a rank is
// binomial, so the slowest of ep ranks takes about mean + sqrt(2 ln ep) standard deviations,
// times the router's own imbalance (CostOptions).
double moe_load(const Context& x, const ir::Layer& l) {
  if (l.kind != ir::LayerKind::kMoe) return 1;
  if (x.options.moe_capacity_factor > 0) return x.options.moe_capacity_factor;
  // Without EP every expert is on every device: the grouped GEMMs' total does not depend on how
  // the tokens split between them.
  const double ep = x.key.ep;
  if (ep <= 1) return 1;
  const double mean = static_cast<double>(x.key.mbs) * static_cast<double>(x.workload.seq_len) /
                      x.key.cp * static_cast<double>(l.top_k);
  const double chance = 1 + std::sqrt(2 * std::log(ep) * (1 - 1 / ep) / std::max(1.0, mean));
  return chance * x.options.moe_imbalance;
}

LayerTimes layer_times(const Context& x, const ir::Layer& l) {
  const ShapeKey& k = x.key;
  const double t = k.tp, c = k.cp, e = k.ep;
  const double load = moe_load(x, l);
  LayerTimes out;
  for (ir::Gemm g : ir::layer_gemms(l, k.mbs, x.workload.seq_len)) {
    switch (g.split) {
      case ir::GemmSplit::kNone: g.m /= c; break;
      case ir::GemmSplit::kColumn:
        g.m /= c;
        if (l.kind == ir::LayerKind::kAttention) {
          // Q is split by t; K and V by min(t, kv heads), replicated beyond that.
          const double q = static_cast<double>(l.heads * l.head_dim);
          g.n = q / t + (g.n - q) / kv_split(l, k.tp);
        } else {
          g.n /= t;
        }
        break;
      case ir::GemmSplit::kRow:
        g.m /= c;
        g.k /= t;
        break;
      case ir::GemmSplit::kHeads:
        g.batch /= t;
        g.m /= c;
        break;
      case ir::GemmSplit::kExperts:
        g.batch /= e;
        g.m *= e / c * load;
        g.n /= t;
        break;
      case ir::GemmSplit::kExpertsRow:
        g.batch /= e;
        g.m *= e / c * load;
        g.k /= t;
        break;
    }
    // One module's weights: a batch of experts is that many modules (DeepSpeed's expert list).
    if (!g.attention_core) out.max_weight = std::max(out.max_weight, g.n * g.k);
    double s = 0;
    if (g.attention_core && x.options.flash_attention) {
      // One fused kernel: the scores stay on chip, so the head dimension (k of QK^T, n of PV) adds
      // no per-output store; only the sequence dimensions quantise. Its softmax runs on the
      // fp32 units: each of the two GEMMs covers every score once, so count half per GEMM.
      const double seq_k = std::max(g.n, g.k);
      const double shape = (g.m / (g.m + x.knee)) * (seq_k / (seq_k + x.knee));
      const double scores = g.m * seq_k * g.batch;
      s = g.flops() / (x.peak * x.efficiency * shape) + 0.5 * scores * x.softmax_s;
    } else {
      s = gemm_time(g.m, g.n, g.k, g.batch, x.peak, x.efficiency, x.knee);
    }
    out.gemm_s += s;
    if (g.attention_core) out.core_s += s;
  }
  const ir::TrafficBytes tr = ir::layer_traffic(l, k.mbs, x.workload.seq_len);
  const double rep_div = k.sp ? t : 1.0;
  const double scores = x.options.flash_attention ? 0 : 1;  // fused: the scores stay on chip
  // Bytes per device of token-proportional traffic (divided by cp as the tokens are).
  auto per_device = [&](double replicated, double sharded, double score_bytes) {
    return (replicated / rep_div + sharded / t + scores * score_bytes / t) / c;
  };
  out.traffic_s = per_device(tr.replicated, tr.sharded, tr.scores) / x.membw;
  out.bwd_traffic_s = (per_device(tr.backward_replicated, tr.backward_sharded, tr.backward_scores) +
                       tr.backward_table / t) /
                      x.membw;
  out.core_traffic_s = scores * tr.scores / t / c / x.membw;
  return out;
}

// Adds one layer to a block's cost. `recompute` is false for the pre/post groups, which
// Megatron-LM never recomputes.
void add_layer(const Context& x, const ir::Layer& l, bool recompute, BlockCost& b,
               double& full_act) {
  const ShapeKey& k = x.key;
  const double t = k.tp, c = k.cp;
  const double tokens = static_cast<double>(k.mbs) * static_cast<double>(x.workload.seq_len) / c;
  const LayerTimes lt = layer_times(x, l);
  const Recompute rc = recompute ? k.recompute : Recompute::kNone;
  // Kernel launches: forward, backward (2 x), the replayed forward; one per TP collective.
  const double kernels = forward_kernels(x, l);
  const double launch = x.launch * kernels;
  // Backward: two GEMMs per forward GEMM (data and weight gradients) and the layer's backward
  // traffic (ir::TrafficBytes: 1.5 x the forward's for elementwise ops, the loss and the
  // embedding's gradient as their kernels move it).
  b.fwd_s += lt.fwd_s() + launch;
  b.max_module_params = std::max(b.max_module_params, lt.max_weight);
  b.bwd_s += 2 * lt.gemm_s + lt.bwd_traffic_s + 2 * launch;
  b.mem_s += lt.traffic_s + lt.bwd_traffic_s;
  b.launch_s += 3 * launch;
  if (x.options.flash_attention) b.bwd_s += 0.5 * lt.core_s;  // QK^T recomputed in backward
  if (rc == Recompute::kFull) {
    b.bwd_s += lt.fwd_s() + launch;
    b.mem_s += lt.traffic_s;
    b.launch_s += launch;
  }
  if (rc == Recompute::kSelective && !x.options.flash_attention) {
    b.bwd_s += lt.core_s + lt.core_traffic_s;  // the core's GEMMs and softmax/dropout again
    b.mem_s += lt.core_traffic_s;
  }

  // TP collectives: one per attention/MLP/MoE layer each way (vocab-parallel embedding: forward;
  // LM head: backward), one more when full recomputation replays the forward.
  const double act_msg = 2.0 * tokens * static_cast<double>(l.hidden);
  double tp_count = 0;
  switch (l.kind) {
    case ir::LayerKind::kAttention:
    case ir::LayerKind::kMlp:
    case ir::LayerKind::kMoe: tp_count = rc == Recompute::kFull ? 3 : 2; break;
    case ir::LayerKind::kEmbedding:
    case ir::LayerKind::kLmHead: tp_count = 1; break;
    case ir::LayerKind::kNorm: break;
  }
  b.tp_comm_s += (1 - x.options.tp_overlap) * tp_count * allreduce_time(act_msg, k.tp, x.tp_path);
  if (k.tp > 1 && tp_count > 0) {
    b.bwd_s += tp_count * x.launch;  // one kernel per collective, counted with the backward
    b.launch_s += tp_count * x.launch;
  }

  if (l.kind == ir::LayerKind::kAttention && k.cp > 1) {
    // Ring attention: cp-1 steps passing this rank's K and V forward; backward passes K, V and
    // their gradients. Each step overlaps with one block of attention compute.
    const double kv_bytes =
        2.0 * 2.0 * tokens * static_cast<double>(l.kv_heads * l.head_dim) / kv_split(l, k.tp);
    const double step = p2p_time(kv_bytes, x.cp_path) * (k.cp - 1);
    const double hide = x.options.cp_overlap * lt.core_s;
    double passes = std::max(0.0, step - hide) + std::max(0.0, 2 * step - 2 * hide);
    if (rc == Recompute::kFull) passes += std::max(0.0, step - hide);
    b.cp_comm_s += passes;
  }
  if (l.kind == ir::LayerKind::kMoe && k.ep > 1) {
    // Dispatch and combine all-to-alls of tokens x top-k x hidden, forward and backward (and the
    // replayed forward); the busiest rank's share sets the time (moe_load).
    const double bytes = act_msg * static_cast<double>(l.top_k) / (k.sp ? t : 1.0) * moe_load(x, l);
    const double count = rc == Recompute::kFull ? 6 : 4;
    b.ep_comm_s += count * alltoall_time(bytes, k.ep, x.ep_path);
  }

  ir::ActivationBytes a = ir::layer_activations(l, k.mbs, x.workload.seq_len);
  if (x.options.flash_attention && l.kind == ir::LayerKind::kAttention) {
    // Only the fp32 log-sum-exp per query row and head survives; selective recomputation has
    // nothing left to drop.
    a.sharded += 4.0 * static_cast<double>(l.heads) * static_cast<double>(k.mbs) *
                 static_cast<double>(x.workload.seq_len);
    a.scores = 0;
  }
  const double rep_div = k.sp ? t : 1.0;
  const double none = (a.replicated / rep_div + a.sharded / t + a.scores / t) / c;
  full_act += none;
  switch (rc) {
    case Recompute::kNone: b.act_bytes += none; break;
    case Recompute::kSelective:
      b.act_bytes += none - a.scores / t / c;
      b.transient_bytes = std::max(b.transient_bytes, a.scores / t / c);
      break;
    case Recompute::kFull: break;  // the block input is added once per block by the caller
  }

  const ir::ParamSplit p = ir::layer_params(l);
  double kv_div = 1;
  if (l.kind == ir::LayerKind::kAttention) kv_div = kv_split(l, k.tp);
  b.dense_params += static_cast<double>(p.tp_sharded) / t +
                    static_cast<double>(p.kv_sharded) / kv_div + static_cast<double>(p.replicated);
  b.expert_params += static_cast<double>(p.expert) / (t * k.ep);
}

// Byte-identical layers (a copy made by a "repeat" group). A false "different" only costs time,
// so fields the IR may add later are covered without listing them here.
bool same_layer(const ir::Layer& a, const ir::Layer& b) {
  if constexpr (std::is_trivially_copyable_v<ir::Layer>) {
    return std::memcmp(&a, &b, sizeof(ir::Layer)) == 0;
  } else {
    return false;
  }
}

// Layers [a, a_end) and [b, b_end) of the model are the same list.
bool same_layers(const ir::Model& m, size_t a, size_t a_end, size_t b, size_t b_end) {
  if (a_end - a != b_end - b) return false;
  for (size_t k = 0; k < a_end - a; ++k) {
    if (!same_layer(m.layers[a + k], m.layers[b + k])) return false;
  }
  return true;
}

}  // namespace

ShapeCosts compute_shape_costs(const ir::Model& model, const ClusterSpec& cluster,
                               const Workload& workload, const ShapeKey& key,
                               const CostOptions& options) {
  Context x{cluster, workload, key, options, 0, 0, 0, 128, 0, 0, {}, {}, {}};
  x.peak = cluster.device.peak_flops(workload.dtype);
  x.efficiency =
      options.gemm_efficiency > 0 ? options.gemm_efficiency : cluster.device.gemm_efficiency;
  x.membw = cluster.device.memory_bandwidth_gbps * 1e9 * options.memory_efficiency;
  x.knee = effective_gemm_knee(cluster, workload.dtype, options);
  // Devices without fp32 / SFU figures: the non-matmul units at 1/16, the SFUs at 1/128 of the
  // matmul peak (the A100's ratios).
  const double fp32 =
      cluster.device.peak_tflops_fp32 > 0 ? cluster.device.peak_tflops_fp32 * 1e12 : x.peak / 16;
  const double sfu = cluster.device.sfu_ops() > 0 ? cluster.device.sfu_ops() : x.peak / 128;
  x.softmax_s = 1 / sfu + options.softmax_fp32_ops_per_score / fp32;
  x.launch = cluster.device.kernel_launch_us * 1e-6;
  x.tp_path = group_path(cluster, 1, key.tp);
  x.cp_path = group_path(cluster, key.tp, key.cp);
  x.ep_path = group_path(cluster, static_cast<int64_t>(key.tp) * key.cp, key.ep);

  ShapeCosts out;
  out.key = key;
  out.blocks.assign(static_cast<size_t>(model.num_blocks), BlockCost{});
  std::vector<double> full_act(out.blocks.size(), 0.0);
  double unused = 0;
  // A block whose layers equal the previous block's costs the same: copy it (a 128-block model
  // is priced once per shape, not 128 times).
  size_t prev_start = 0, prev_end = 0;
  for (size_t i = 0; i < model.layers.size();) {
    const int block = model.block_of[i];
    size_t end = i + 1;
    while (end < model.layers.size() && model.block_of[end] == block) ++end;
    if (block < 0 || block >= model.num_blocks) {
      for (size_t k = i; k < end; ++k) {
        add_layer(x, model.layers[k], false, block < 0 ? out.pre : out.post, unused);
      }
    } else {
      const size_t b = static_cast<size_t>(block);
      if (b > 0 && same_layers(model, prev_start, prev_end, i, end)) {
        out.blocks[b] = out.blocks[b - 1];
        full_act[b] = full_act[b - 1];
      } else {
        for (size_t k = i; k < end; ++k)
          add_layer(x, model.layers[k], true, out.blocks[b], full_act[b]);
      }
      prev_start = i, prev_end = end;
    }
    i = end;
  }
  const double tokens =
      static_cast<double>(key.mbs) * static_cast<double>(workload.seq_len) / key.cp;
  for (size_t j = 0; j < out.blocks.size(); ++j) {
    BlockCost& b = out.blocks[j];
    if (key.recompute == Recompute::kFull) {
      // Keeps the block input; replays the block, whose activations live during its backward.
      b.act_bytes = 2.0 * tokens * static_cast<double>(model.hidden) / (key.sp ? key.tp : 1);
      b.transient_bytes = full_act[j];
    }
    out.max_transient = std::max(out.max_transient, b.transient_bytes);
    out.max_block_params = std::max(out.max_block_params, b.dense_params + b.expert_params);
    out.max_module_params = std::max(out.max_module_params, b.max_module_params);
  }
  out.max_module_params =
      std::max({out.max_module_params, out.pre.max_module_params, out.post.max_module_params});
  const size_t n = out.blocks.size();
  for (auto* v : {&out.time, &out.fwd, &out.bwd, &out.tp, &out.cp, &out.ep, &out.act, &out.dense,
                  &out.expert, &out.mem, &out.launch}) {
    v->assign(n + 1, 0.0);
  }
  for (size_t j = 0; j < n; ++j) {
    const BlockCost& b = out.blocks[j];
    out.time[j + 1] = out.time[j] + b.total_s();
    out.fwd[j + 1] = out.fwd[j] + b.fwd_s;
    out.bwd[j + 1] = out.bwd[j] + b.bwd_s;
    out.tp[j + 1] = out.tp[j] + b.tp_comm_s;
    out.cp[j + 1] = out.cp[j] + b.cp_comm_s;
    out.ep[j + 1] = out.ep[j] + b.ep_comm_s;
    out.act[j + 1] = out.act[j] + b.act_bytes;
    out.dense[j + 1] = out.dense[j] + b.dense_params;
    out.expert[j + 1] = out.expert[j] + b.expert_params;
    out.mem[j + 1] = out.mem[j] + b.mem_s;
    out.launch[j + 1] = out.launch[j] + b.launch_s;
  }
  out.homogeneous = true;
  for (const BlockCost& b : out.blocks) {
    const BlockCost& f = out.blocks.front();
    if (b.total_s() != f.total_s() || b.act_bytes != f.act_bytes ||
        b.dense_params != f.dense_params || b.expert_params != f.expert_params ||
        b.transient_bytes != f.transient_bytes) {
      out.homogeneous = false;
      break;
    }
  }
  return out;
}

}  // namespace tessera::plan
