// The performance and memory model against the closed forms of shared/reference/hardware.md.
#include <cmath>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/stage_model.h"

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

// Materialised attention: the setting of Korthikanti's formulas and of Megatron-LM 2021.
CostOptions naive() {
  CostOptions o;
  o.flash_attention = false;
  return o;
}

ClusterSpec a100(int64_t devices) {
  return *with_devices(*cluster_preset("dgx-a100-80gb"), devices);
}

double block_act(const ir::Model& m, int tp, bool sp, Recompute rc, int mbs, int64_t seq) {
  const Workload w{64, seq, Dtype::kBf16};
  const ShapeKey key{tp, 1, 1, mbs, sp, rc};
  return compute_shape_costs(m, a100(8), w, key, naive()).blocks[2].act_bytes;
}

TEST(ActivationMemory, MatchesKorthikantiFormulasForEveryRecomputeAndSplit) {
  for (auto [h, l, a] : {std::tuple{4096, 4, 32}, std::tuple{12288, 4, 96}}) {
    const ir::Model m = gpt(h, l, a);
    const double s = 2048, b = 2, t = 8, H = h, A = a;
    const double sbh = s * b * H;
    EXPECT_DOUBLE_EQ(block_act(m, 1, false, Recompute::kNone, 2, 2048), sbh * (34 + 5 * A * s / H));
    EXPECT_DOUBLE_EQ(block_act(m, 8, false, Recompute::kNone, 2, 2048),
                     sbh * (10 + 24 / t + 5 * A * s / (H * t)));
    EXPECT_DOUBLE_EQ(block_act(m, 8, true, Recompute::kNone, 2, 2048),
                     sbh / t * (34 + 5 * A * s / H));
    EXPECT_DOUBLE_EQ(block_act(m, 8, true, Recompute::kSelective, 2, 2048), 34 * sbh / t);
    EXPECT_DOUBLE_EQ(block_act(m, 1, false, Recompute::kFull, 2, 2048), 2 * sbh);
  }
}

// A model of identical blocks and nothing else, so stages are exactly equal.
ir::Model uniform(int blocks) {
  const std::string text = R"({"hidden": 1024, "layers": [{"repeat": )" + std::to_string(blocks) +
                           R"(, "layers": [{"type": "attention", "heads": 16},
                              {"type": "mlp"}]}]})";
  return *ir::model_from_layer_list(text, "uniform.json");
}

Plan make_plan(int tp, int pp, int dp, int mbs, int64_t batch, int vp = 1) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.mbs = mbs;
  p.vp = vp;
  p.num_microbatches = batch / (dp * mbs);
  return p;
}

TEST(Pipeline, BubbleIsPMinusOneOverMForOneFOneB) {
  const ir::Model m = uniform(16);
  const Workload w{32, 1024, Dtype::kBf16};
  for (int pp : {2, 4, 8}) {
    auto e = evaluate(m, a100(8 * pp), w, make_plan(8, pp, 1, 1, 32), naive());
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    // What follows the pipeline: gradient reduction, optimizer, clipping, embedding sync.
    const double ideal = e->step_time_s - e->time.bubble_s - e->time.dp_comm_s -
                         e->time.optimizer_s - e->time.grad_clip_s - e->time.embedding_sync_s;
    EXPECT_NEAR(e->time.bubble_s / ideal, (pp - 1) / 32.0, 1e-9) << "pp=" << pp;
  }
}

TEST(Pipeline, InterleavingDividesTheBubbleByV) {
  const ir::Model m = uniform(16);
  const Workload w{32, 1024, Dtype::kBf16};
  for (int vp : {2, 4}) {
    auto e = evaluate(m, a100(32), w, make_plan(8, 4, 1, 1, 32, vp), naive());
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    // What follows the pipeline: gradient reduction, optimizer, clipping, embedding sync.
    const double ideal = e->step_time_s - e->time.bubble_s - e->time.dp_comm_s -
                         e->time.optimizer_s - e->time.grad_clip_s - e->time.embedding_sync_s;
    EXPECT_NEAR(e->time.bubble_s / ideal, 3.0 / (vp * 32.0), 1e-9) << "vp=" << vp;
  }
}

TEST(Memory, FirstStageKeepsPMicroBatchesInFlightAndInterleavingMore) {
  const ir::Model m = uniform(16);
  const Workload w{32, 1024, Dtype::kBf16};
  auto one = evaluate(m, a100(32), w, make_plan(8, 4, 1, 1, 32), naive());
  auto inter = evaluate(m, a100(32), w, make_plan(8, 4, 1, 1, 32, 2), naive());
  ASSERT_TRUE(one.ok() && inter.ok());
  const double per_mb = block_act(m, 8, false, Recompute::kNone, 1, 1024) * 4;  // 4 blocks
  EXPECT_DOUBLE_EQ(one->memory.activations, 4 * per_mb);
  EXPECT_EQ(one->binding_stage, 0);
  EXPECT_DOUBLE_EQ(inter->memory.activations, 4 * per_mb * (1 + 3.0 / (4 * 2)));
}

// Gradients are held in the type they are reduced in: fp32 for bf16 models (Megatron-LM's
// main_grad, 18 bytes per parameter), 16-bit when grad_reduce_bytes says so (hardware.md's 16).
TEST(Memory, ZeroStagesShardOptimizerGradientsAndWeights) {
  const ir::Model m = uniform(4);
  const Workload w{64, 1024, Dtype::kBf16};
  const double d = 8;
  const double fp32_grads[] = {18, 6 + 12 / d, 2 + 16 / d, 18 / d};
  const double half_grads[] = {16, 4 + 12 / d, 2 + 14 / d, 16 / d};
  for (const double grad_bytes : {0.0, 2.0}) {
    CostOptions options = naive();
    options.grad_reduce_bytes = grad_bytes;
    for (int zero = 0; zero <= 3; ++zero) {
      Plan p = make_plan(1, 1, 8, 1, 64);
      p.zero = zero;
      auto e = evaluate(m, a100(8), w, p, options);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      const double params = static_cast<double>(ir::model_params(m));
      const double state = e->memory.weights + e->memory.gradients + e->memory.optimizer;
      const double expect = grad_bytes == 2 ? half_grads[zero] : fp32_grads[zero];
      EXPECT_NEAR(state / params, expect, 1e-12) << "zero=" << zero << " grad " << grad_bytes;
    }
  }
}

TEST(Collectives, BusBandwidthFactorsAndLatency) {
  const ClusterSpec c = a100(64);
  const LinkPath tp = group_path(c, 1, 8);
  EXPECT_FALSE(tp.inter_host);
  EXPECT_DOUBLE_EQ(tp.busbw, 230e9);
  const double bytes = 1 << 30;
  EXPECT_DOUBLE_EQ(allreduce_time(bytes, 8, tp), 14 * 3e-6 + bytes * 2 * 7 / 8 / 230e9);
  EXPECT_DOUBLE_EQ(allgather_time(bytes, 8, tp), 7 * 3e-6 + bytes * 7 / 8 / 230e9);
  EXPECT_EQ(allreduce_time(bytes, 1, tp), 0);
  // DP across hosts with one member per host: each device's share of the host's 8 NICs.
  const LinkPath dp = group_path(c, 8, 8);
  EXPECT_TRUE(dp.inter_host);
  EXPECT_DOUBLE_EQ(dp.busbw, 23.5e9);
  EXPECT_DOUBLE_EQ(dp.latency, 5e-6);
  // Two members per host: twice the NICs' share.
  EXPECT_DOUBLE_EQ(group_path(c, 4, 16).busbw, 47e9);
}

TEST(Gemm, EfficiencyGrowsWithShapeTowardsTheLargeGemmFigure) {
  const double peak = 312e12;
  const double big =
      2.0 * 16384 * 16384 * 16384 / gemm_time(16384, 16384, 16384, 1, peak, 0.8, 128);
  const double small = 2.0 * 256 * 256 * 256 / gemm_time(256, 256, 256, 1, peak, 0.8, 128);
  EXPECT_GT(big, 0.97 * 0.8 * peak);
  EXPECT_LT(big, 0.8 * peak);
  EXPECT_LT(small, 0.3 * peak);
}

TEST(StepFlops, FullRecomputationMatchesTheNinetySixFormula) {
  const ir::Model m = gpt(12288, 8, 96);
  const Workload w{16, 2048, Dtype::kBf16};
  const StepFlops f = step_flops(m, w);
  const double B = 16, s = 2048, l = 8, h = 12288, V = 51200;
  EXPECT_NEAR(
      (f.model + f.full_extra) / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))),
      1.0, 1e-12);
}

TEST(Evaluate, MegatronOneTrillionConfigurationIsCloseToPublished) {
  // Narayanan et al. 2021: 1T on 3072 A100s, t=8 p=64 d=6, B=3072, full recomputation,
  // 163 TFLOP/s per GPU counting recomputation. This guards against gross regressions of the
  // model; docs/PLANNER.md states the actual error.
  const auto m = *ir::model_preset("gpt-1t");
  Plan p = make_plan(8, 64, 6, 1, 3072);
  p.zero = 1;
  p.recompute = Recompute::kFull;
  auto e = evaluate(m, a100(3072), Workload{3072, 2048, Dtype::kBf16}, p, naive());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_TRUE(e->fits);
  EXPECT_NEAR(e->hardware_tflops_per_device / 163.0, 1.0, 0.15);
}

TEST(ActivationMemory, FusedAttentionKeepsOnlyRowStatistics) {
  const ir::Model m = gpt(4096, 4, 32);
  const Workload w{64, 2048, Dtype::kBf16};
  const double sbh = 2048.0 * 2 * 4096;
  const ShapeKey key{8, 1, 1, 2, true, Recompute::kNone};
  const double act = compute_shape_costs(m, a100(8), w, key, CostOptions{}).blocks[2].act_bytes;
  // 34 sbh / t plus 4 bytes per query row per head (32 / 8 heads per rank).
  EXPECT_DOUBLE_EQ(act, 34 * sbh / 8 + 4.0 * 32 / 8 * 2 * 2048);
}

TEST(Validate, RejectsImpossibleFixedValuesWithTheReason) {
  const auto m = *ir::model_preset("llama2-7b");
  const Workload w{64, 4096, Dtype::kBf16};
  Plan p = make_plan(3, 1, 1, 1, 64);
  p.dp = 8;
  p.tp = 3;
  auto bad_tp = evaluate(m, a100(24), w, p, naive());
  ASSERT_FALSE(bad_tp.ok());
  EXPECT_EQ(bad_tp.status().message(), "tp=3 does not divide num_attention_heads 32");
  auto bad_pp = evaluate(m, a100(40), w, make_plan(1, 40, 1, 1, 64), naive());
  ASSERT_FALSE(bad_pp.ok());
  EXPECT_EQ(bad_pp.status().message(), "pp=40 exceeds the model's 32 layers");
  auto bad_devices = evaluate(m, a100(16), w, make_plan(1, 1, 8, 1, 64), naive());
  ASSERT_FALSE(bad_devices.ok());
  EXPECT_NE(bad_devices.status().message().find("16 devices"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
