// The cost terms of issue 19 §1, each against its own closed form: the breakdown sums to the
// step, kernel launches, the device-derived GEMM knee, hierarchical collective latency, the
// gradient reduction's last bucket, ZeRO-3's per-block gathers and the tied embedding's sync.
#include <cmath>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"
#include "tessera/plan/cost_model.h"

namespace tessera::plan {
namespace {

ir::Model gpt(int64_t h, int64_t l, int64_t a) {
  ir::DecoderConfig c;
  c.name = "gpt";
  c.hidden = h;
  c.layers = l;
  c.heads = a;
  c.vocab = 51200;
  c.learned_positions = 2048;
  return *ir::build_decoder(c);
}

ClusterSpec cluster(const char* preset, int64_t devices) {
  return *with_devices(*cluster_preset(preset), devices);
}

Plan make_plan(int tp, int pp, int dp, int mbs, int64_t batch, int zero, Recompute rc) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.mbs = mbs;
  p.zero = zero;
  p.recompute = rc;
  p.num_microbatches = batch / (dp * mbs);
  return p;
}

TEST(Breakdown, EveryTermSumsToTheStepTime) {
  const ir::Model m = gpt(4096, 16, 32);
  for (int zero : {0, 1}) {
    auto e = evaluate(m, cluster("dgx-a100-80gb", 64), {128, 2048, Dtype::kBf16},
                      make_plan(4, 4, 4, 1, 128, zero, Recompute::kSelective), CostOptions{});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    const TimeBreakdown& t = e->time;
    const double sum = t.compute_s + t.bubble_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s +
                       t.pp_comm_s + t.dp_comm_s + t.optimizer_s + t.memory_bound_s + t.launch_s +
                       t.grad_clip_s + t.embedding_sync_s;
    EXPECT_NEAR(sum, e->step_time_s, 1e-12 * e->step_time_s) << "zero=" << zero;
    for (double part : {t.compute_s, t.memory_bound_s, t.launch_s, t.dp_comm_s, t.optimizer_s,
                        t.grad_clip_s, t.embedding_sync_s, t.pp_comm_s, t.tp_comm_s}) {
      EXPECT_GT(part, 0) << "zero=" << zero;
    }
  }
}

TEST(KernelLaunches, ScaleWithTheDevicesGapPerKernel) {
  const ir::Model m = gpt(2048, 8, 16);
  const Workload w{16, 2048, Dtype::kBf16};
  const Plan p = make_plan(1, 1, 8, 1, 16, 0, Recompute::kNone);
  ClusterSpec c = cluster("dgx-h100", 8);
  auto base = evaluate(m, c, w, p, CostOptions{});
  c.device.kernel_launch_us *= 2;
  auto doubled = evaluate(m, c, w, p, CostOptions{});
  c.device.kernel_launch_us = 0;
  auto none = evaluate(m, c, w, p, CostOptions{});
  ASSERT_TRUE(base.ok() && doubled.ok() && none.ok());
  EXPECT_GT(base->time.launch_s, 0);
  EXPECT_NEAR(doubled->time.launch_s, 2 * base->time.launch_s, 1e-12);
  EXPECT_EQ(none->time.launch_s, 0);
  EXPECT_NEAR(base->step_time_s - none->step_time_s, base->time.launch_s, 1e-9);
}

TEST(Gemm, KneeScalesWithTheDevicesFlopPerByteBalance) {
  const Dtype bf16 = Dtype::kBf16;
  EXPECT_NEAR(effective_gemm_knee(cluster("dgx-a100-80gb", 8), bf16, CostOptions{}), 128, 1e-9);
  const double h100 = effective_gemm_knee(cluster("dgx-h100", 8), bf16, CostOptions{});
  EXPECT_NEAR(h100, 128 * (989.0 / 3350) / (312.0 / 2039), 1e-9);
  CostOptions calibrated;
  calibrated.gemm_knee = 41;
  EXPECT_EQ(effective_gemm_knee(cluster("dgx-h100", 8), bf16, calibrated), 41);
  // So a small model loses more of the H100's peak than of the A100's.
  const ir::Model m = gpt(2048, 4, 16);
  const Workload w{8, 2048, Dtype::kBf16};
  const Plan p = make_plan(1, 1, 8, 1, 8, 0, Recompute::kNone);
  auto a = evaluate(m, cluster("dgx-a100-80gb", 8), w, p, CostOptions{});
  auto h = evaluate(m, cluster("dgx-h100", 8), w, p, CostOptions{});
  ASSERT_TRUE(a.ok() && h.ok());
  EXPECT_LT(h->hardware_tflops_per_device / 989, a->hardware_tflops_per_device / 312);
}

TEST(Collectives, RingLatencyCountsNetworkAndHostHopsAndAllReduceTakesTheTree) {
  const ClusterSpec c = cluster("dgx-a100-80gb", 1536);
  const LinkPath all = group_path(c, 1, 1536);  // 8 members in each of 192 hosts
  EXPECT_TRUE(all.inter_host);
  EXPECT_EQ(all.per_host, 8);
  EXPECT_NEAR(ring_latency(1536, all), 191 * 5e-6 + (1536 - 192) * 3e-6, 1e-12);
  EXPECT_NEAR(allreduce_latency(1536, all), 2 * (8 * 5e-6 + 7 * 3e-6), 1e-12);  // log2 192 -> 8
  const LinkPath host = group_path(c, 1, 8);
  EXPECT_NEAR(allreduce_latency(8, host), 14 * 3e-6, 1e-15);
}

TEST(DataParallel, TheLastGradientBucketIsExposedEvenWithAWholeBackwardToHideUnder) {
  const ir::Model m = gpt(4096, 16, 32);
  const Workload w{512, 2048, Dtype::kBf16};
  // dp = 64 over 8 hosts, many micro-batches: a long backward, but the last bucket waits.
  auto e = evaluate(m, cluster("dgx-a100-80gb", 64), w,
                    make_plan(1, 1, 64, 1, 512, 0, Recompute::kNone), CostOptions{});
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const LinkPath path = group_path(cluster("dgx-a100-80gb", 64), 1, 64);
  const double params = static_cast<double>(ir::model_params(m));
  const double buckets = std::ceil(params / 64e6);  // max(40M, 1M x dp)
  EXPECT_NEAR(e->time.dp_comm_s, allreduce_time(4 * params / buckets, 64, path), 1e-9);
  // fp16 reduces 2-byte gradients.
  auto half = evaluate(m, cluster("dgx-a100-80gb", 64), {512, 2048, Dtype::kFp16},
                       make_plan(1, 1, 64, 1, 512, 0, Recompute::kNone), CostOptions{});
  ASSERT_TRUE(half.ok());
  EXPECT_LT(half->time.dp_comm_s, e->time.dp_comm_s);
}

TEST(Zero3, GathersPerBlockBindTheStepAtScaleAndRecomputationGathersAgain) {
  const ir::Model m = gpt(6144, 44, 48);
  // One sequence per device: little compute per gathered byte.
  auto at = [&](int64_t devices, Recompute rc) {
    auto e = evaluate(m, cluster("dgx-h100", devices), {devices, 2048, Dtype::kBf16},
                      make_plan(1, 1, static_cast<int>(devices), 1, devices, 3, rc), CostOptions{});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return *e;
  };
  const Estimate small = at(64, Recompute::kFull), large = at(1536, Recompute::kFull);
  // More ranks: every per-block collective pays a longer ring's latency.
  EXPECT_GT(large.time.dp_comm_s, small.time.dp_comm_s);
  EXPECT_GT(large.time.dp_comm_s, 0.3 * large.step_time_s);
  const Estimate no_recompute = at(1536, Recompute::kNone);
  EXPECT_LT(no_recompute.time.dp_comm_s, large.time.dp_comm_s);
  // At least the forward and backward gathers and the gradient reduce-scatter of every block
  // that the compute does not cover.
  const LinkPath path = group_path(cluster("dgx-h100", 1536), 1, 1536);
  const double block = 12.0 * 6144 * 6144;
  const double per_block = 3 * allgather_time(2 * block, 1536, path);
  EXPECT_GT(no_recompute.step_time_s, 44 * per_block);
}

TEST(Zero3, FlatCollectivesGetOneNicsShareOfEachHost) {
  const ClusterSpec c = cluster("dgx-a100-80gb", 64);
  const double nic = c.inter_host.busbw_gbps * 1e9 * c.inter_host.nics_per_host;
  // Eight members per host: hierarchical rings share the host's eight NICs, flat ones one each.
  EXPECT_NEAR(group_path(c, 1, 64).busbw, nic, 1e-6 * nic);
  EXPECT_NEAR(flat_group_path(c, 1, 64).busbw, nic / 8, 1e-6 * nic);
  EXPECT_EQ(flat_group_path(c, 1, 64).latency, group_path(c, 1, 64).latency);
  // One member per host, or a group inside one host: nothing to share differently.
  EXPECT_EQ(flat_group_path(c, 8, 8).busbw, group_path(c, 8, 8).busbw);
  EXPECT_EQ(flat_group_path(c, 1, 8).busbw, group_path(c, 1, 8).busbw);
}

// The signature of the published ZeRO-3 runs (docs/PLANNER.md, Narayanan et al. 2021 Table 2):
// without model parallelism the bytes a device moves per step do not depend on the number of
// devices, so once they bind, doubling the devices leaves the step time where it was.
TEST(Zero3, FlatStepIsBandwidthBoundAndStopsShrinkingWithMoreDevices) {
  const ir::Model m = gpt(12288, 96, 96);
  auto at = [&](int64_t devices, bool flat) {
    CostOptions o;
    o.zero3_flat = flat;
    o.flash_attention = false;
    const int mbs = static_cast<int>(1536 / devices);
    auto e =
        evaluate(m, cluster("dgx-a100-80gb", devices), {1536, 2048, Dtype::kFp16},
                 make_plan(1, 1, static_cast<int>(devices), mbs, 1536, 3, Recompute::kFull), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return *e;
  };
  const Estimate flat768 = at(768, true), flat1536 = at(1536, true);
  EXPECT_LT(std::fabs(flat1536.step_time_s / flat768.step_time_s - 1), 0.1);
  // At least four transfers of every block's 16-bit weights through one NIC: the forward and the
  // two backward gathers and the reduce-scatter.
  const LinkPath one_nic = flat_group_path(cluster("dgx-a100-80gb", 1536), 1, 1536);
  const double block = 12.0 * 12288 * 12288;
  EXPECT_GT(flat1536.step_time_s, 96 * 4 * allgather_time(2 * block, 1536, one_nic));
  // Hierarchical collectives use the host's eight NICs: the step follows the compute down.
  const Estimate hier768 = at(768, false), hier1536 = at(1536, false);
  EXPECT_LT(hier1536.step_time_s, 0.6 * hier768.step_time_s);
  EXPECT_LT(hier1536.step_time_s, 0.5 * flat1536.step_time_s);
}

TEST(Zero3, BackwardGathersWaitUnderFullRecomputationOnly) {
  const ir::Model m = gpt(12288, 96, 96);
  auto dp_comm = [&](Recompute rc, bool flat) {
    CostOptions o;
    o.zero3_flat = flat;
    auto e = evaluate(m, cluster("dgx-a100-80gb", 384), {1536, 2048, Dtype::kBf16},
                      make_plan(1, 1, 384, 4, 1536, 3, rc), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e->time.dp_comm_s;
  };
  // With a block of prefetch in the backward, the compute of a mbs-4 block hides most gathers;
  // without it, the recomputation's and the backward's gathers of every block wait.
  const LinkPath one_nic = flat_group_path(cluster("dgx-a100-80gb", 384), 1, 384);
  const double two_gathers = 96 * 2 * allgather_time(2 * 12.0 * 12288 * 12288, 384, one_nic);
  EXPECT_GT(dp_comm(Recompute::kFull, true), two_gathers);
  EXPECT_LT(dp_comm(Recompute::kSelective, true), 0.5 * two_gathers);
  // Hierarchical ZeRO-3 prefetches in the backward under full recomputation too: less is exposed
  // than its own two gathers per block would take.
  const LinkPath host = group_path(cluster("dgx-a100-80gb", 384), 1, 384);
  EXPECT_LT(dp_comm(Recompute::kFull, false),
            96 * 2 * allgather_time(2 * 12.0 * 12288 * 12288, 384, host));
}

TEST(Zero3, FlatGathersHoldOneModuleHierarchicalTwoBlocks) {
  const ir::Model m = gpt(8192, 8, 64);
  auto transient = [&](bool flat) {
    CostOptions o;
    o.zero3_flat = flat;
    auto e = evaluate(m, cluster("dgx-a100-80gb", 64), {64, 2048, Dtype::kBf16},
                      make_plan(1, 1, 64, 1, 64, 3, Recompute::kNone), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e->memory.transient;
  };
  // Hierarchical: two blocks of 12 h^2 16-bit weights; flat: the largest weight matrix (the
  // 51200 x 8192 LM head, larger than the 4 h^2 MLP matrices here) and its gradient.
  const double h = 8192;
  EXPECT_NEAR(transient(false) - transient(true), 4 * (12 * h * h - 51200 * h), 0.01 * 4 * h * h);
}

// The norm reads the gradients the device updates; the zeroing writes the whole local buffer,
// which Megatron-LM's distributed optimizer (ZeRO-1) keeps unsharded and ZeRO-2 shards.
TEST(GradientClipping, ZeroingWritesTheUnshardedBufferUnderZeroOne) {
  const ir::Model m = gpt(4096, 16, 32);
  const ClusterSpec c = cluster("dgx-a100-80gb", 64);
  auto at = [&](int zero) {
    auto e = evaluate(m, c, {128, 2048, Dtype::kBf16},
                      make_plan(4, 1, 16, 1, 128, zero, Recompute::kNone), CostOptions{});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return *e;
  };
  const Estimate one = at(1), two = at(2);
  const double dense = one.memory.weights / 2;  // 16-bit weights, unsharded under ZeRO-1/2
  const double membw = c.device.memory_bandwidth_gbps * 1e9 * CostOptions{}.memory_efficiency;
  // fp32 gradients (bf16 training): 4 bytes per value.
  EXPECT_NEAR(one.time.grad_clip_s - two.time.grad_clip_s, 4 * (dense - dense / 16) / membw, 1e-9);
}

TEST(Pipeline, TiedEmbeddingGradientsAreAllReducedBetweenFirstAndLastStage) {
  const ir::Model m = gpt(4096, 16, 32);
  const Workload w{64, 2048, Dtype::kBf16};
  const ClusterSpec c = cluster("dgx-a100-80gb", 32);
  auto piped = evaluate(m, c, w, make_plan(8, 4, 1, 1, 64, 0, Recompute::kNone), CostOptions{});
  auto flat = evaluate(m, cluster("dgx-a100-80gb", 8), w,
                       make_plan(8, 1, 1, 1, 64, 0, Recompute::kNone), CostOptions{});
  ASSERT_TRUE(piped.ok() && flat.ok());
  // fp32 gradients of the vocab-parallel shard, two ranks on different hosts.
  const double shard = 51200.0 * 4096 / 8;
  EXPECT_NEAR(piped->time.embedding_sync_s,
              allreduce_time(4 * shard, 2, group_path(c, 8 * 1 * 3, 2)), 1e-12);
  EXPECT_EQ(flat->time.embedding_sync_s, 0);
}

TEST(ExpertParallel, AllToAllsCarryTokensTimesTopKAtTheBusiestRanksLoad) {
  ir::DecoderConfig d;
  d.name = "moe";
  d.hidden = 4096, d.layers = 4, d.heads = 32, d.vocab = 32000, d.ffn = 14336;
  d.experts = 8, d.top_k = 2;
  d.activation = ir::MlpActivation::kSwiGlu, d.norm = ir::NormType::kRmsNorm;
  d.bias = d.dropout = d.tied = false;
  const ir::Model m = *ir::build_decoder(d);
  const ClusterSpec c = cluster("dgx-h100", 8);
  const Workload w{64, 4096, Dtype::kBf16};
  const ShapeKey key{1, 1, 8, 1, false, Recompute::kNone};
  CostOptions o;
  const ShapeCosts dropless = compute_shape_costs(m, c, w, key, o);
  // Dispatch + combine, forward + backward, of tokens x top-k x hidden 16-bit values; the
  // busiest of 8 ranks gets mean + sqrt(2 ln 8 x 7/8 / mean) more.
  const double mean = 4096.0 * 2;
  const double load = 1 + std::sqrt(2 * std::log(8.0) * (7.0 / 8) / mean);
  const LinkPath path = group_path(c, 1, 8);
  EXPECT_NEAR(dropless.blocks[0].ep_comm_s,
              4 * alltoall_time(2.0 * 4096 * 4096 * 2 * load, 8, path), 1e-12);
  o.moe_capacity_factor = 1.25;
  const ShapeCosts padded = compute_shape_costs(m, c, w, key, o);
  EXPECT_NEAR(padded.blocks[0].ep_comm_s, 4 * alltoall_time(2.0 * 4096 * 4096 * 2 * 1.25, 8, path),
              1e-12);
  // Padding to capacity costs expert compute too.
  EXPECT_GT(padded.blocks[0].fwd_s, dropless.blocks[0].fwd_s);
  // Without EP the imbalance between experts on one device does not matter.
  o.moe_capacity_factor = 0;
  o.moe_imbalance = 1.3;
  const ShapeKey no_ep{1, 1, 1, 1, false, Recompute::kNone};
  EXPECT_EQ(compute_shape_costs(m, c, w, no_ep, o).blocks[0].fwd_s,
            compute_shape_costs(m, c, w, no_ep, CostOptions{}).blocks[0].fwd_s);
}

}  // namespace
}  // namespace tessera::plan
