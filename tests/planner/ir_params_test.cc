// Parameter counts, FLOPs and activation bytes of the IR against the closed forms in
// shared/reference/hardware.md and against published parameter counts.
#include <cmath>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

// A GPT-3-style model as in Narayanan et al. 2021: learned positions for s = 2048, V = 51200.
Model gpt(int64_t h, int64_t l, int64_t a) {
  DecoderConfig c;
  c.name = "gpt";
  c.hidden = h;
  c.layers = l;
  c.heads = a;
  c.vocab = 51200;
  c.learned_positions = 2048;
  auto model = build_decoder(c);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return *model;
}

struct GptSize {
  int64_t h, l, a;
};
// Rows of Narayanan et al. 2021, table 1 (1.7B ... 1T).
constexpr GptSize kSizes[] = {{2304, 24, 24},  {4096, 36, 32},    {8192, 48, 64},
                              {12288, 80, 96}, {20480, 105, 128}, {25600, 128, 160}};

TEST(IrParams, GptCountMatchesClosedFormPlusFinalNorm) {
  for (const GptSize& g : kSizes) {
    const Model m = gpt(g.h, g.l, g.a);
    // P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = 12 l h^2 + 13 l h + (V + s) h, which leaves
    // out the final layer norm's 2h parameters.
    const int64_t closed = 12 * g.l * g.h * g.h + 13 * g.l * g.h + (51200 + 2048) * g.h;
    EXPECT_EQ(model_params(m), closed + 2 * g.h) << "h=" << g.h << " l=" << g.l;
  }
}

TEST(IrParams, GptSizesRoundToPublishedTable) {
  // Narayanan et al. 2021 report 1.7B, 7.5B, 39.1B, 145.6B, 529.6B and 1008.0B (one decimal).
  const double published[] = {1.7, 7.5, 39.1, 145.6, 529.6, 1008.0};
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    const Model m = gpt(kSizes[i].h, kSizes[i].l, kSizes[i].a);
    const double billions = static_cast<double>(model_params(m)) / 1e9;
    EXPECT_DOUBLE_EQ(std::round(billions * 10) / 10, published[i]) << billions;
  }
}

TEST(IrFlops, GptTrainingFlopsMatchClosedForm) {
  for (const GptSize& g : kSizes) {
    const Model m = gpt(g.h, g.l, g.a);
    const double B = 512, s = 2048, V = 51200, h = g.h, l = g.l;
    const double closed = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    EXPECT_NEAR(model_training_flops(m, 512, 2048) / closed, 1.0, 1e-12) << "h=" << g.h;
  }
}

TEST(IrFlops, ShorterSequencesScaleQuadraticTermOnly) {
  const Model m = gpt(4096, 36, 32);
  const double h = 4096, l = 36, V = 51200;
  for (double s : {512.0, 1024.0, 4096.0}) {
    const double closed = 72 * 8 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    EXPECT_NEAR(model_training_flops(m, 8, static_cast<int64_t>(s)) / closed, 1.0, 1e-12);
  }
}

TEST(IrParams, LlamaAndMixtralMatchHuggingFaceCountsExactly) {
  // Counts printed by transformers' model.num_parameters() for the released checkpoints.
  struct Known {
    const char* preset;
    int64_t params;
  };
  for (const Known& k : {Known{"llama2-7b", 6738415616}, Known{"llama3-8b", 8030261248},
                         Known{"mixtral-8x7b", 46702792704}}) {
    auto m = model_preset(k.preset);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(model_params(*m), k.params) << k.preset;
  }
}

TEST(IrParams, PresetsWithinOnePercentOfPublishedSizes) {
  struct Known {
    const char* preset;
    double params;
  };
  for (const Known& k :
       {Known{"llama2-7b", 6.74e9}, Known{"llama2-13b", 13.0e9}, Known{"llama2-70b", 69.0e9},
        Known{"llama3-8b", 8.03e9}, Known{"llama3-70b", 70.6e9}, Known{"llama3-405b", 405.9e9},
        Known{"mixtral-8x7b", 46.7e9}, Known{"gpt3-175b", 175.0e9}, Known{"gpt-1t", 1008.0e9}}) {
    auto m = model_preset(k.preset);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_NEAR(static_cast<double>(model_params(*m)) / k.params, 1.0, 0.01) << k.preset;
  }
}

TEST(IrParams, MixtralActiveParamsCountTwoOfEightExperts) {
  auto m = model_preset("mixtral-8x7b");
  ASSERT_TRUE(m.ok());
  // Mistral AI reports 12.9B active parameters per token.
  EXPECT_NEAR(static_cast<double>(model_active_params(*m)) / 12.9e9, 1.0, 0.01);
}

TEST(IrParams, GroupedQueryAttentionShrinksOnlyKeyValueProjections) {
  Layer mha;
  mha.kind = LayerKind::kAttention;
  mha.hidden = 4096;
  mha.heads = 32;
  mha.kv_heads = 32;
  mha.head_dim = 128;
  Layer gqa = mha;
  gqa.kv_heads = 8;
  Layer mqa = mha;
  mqa.kv_heads = 1;
  EXPECT_EQ(layer_params(mha).total(), 4 * 4096 * 4096);
  EXPECT_EQ(layer_params(gqa).total(), 2 * 4096 * 4096 + 2 * 4096 * 1024);
  EXPECT_EQ(layer_params(mqa).kv_sharded, 2 * 4096 * 128);
  // The attention core does not depend on kv heads: FLOPs differ only by the K/V projections.
  const double diff = layer_forward_flops(mha, 1, 2048) - layer_forward_flops(mqa, 1, 2048);
  EXPECT_DOUBLE_EQ(diff, 2.0 * 2048 * 4096 * 2 * (4096 - 128));
}

TEST(IrActivations, GptBlockMatchesKorthikantiFormula) {
  for (const GptSize& g : kSizes) {
    const Model m = gpt(g.h, g.l, g.a);
    const double s = 2048, b = 2, h = g.h, a = g.a;
    double block = 0;
    for (size_t i = 0; i < m.layers.size(); ++i) {
      if (m.block_of[i] == 3) block += layer_activations(m.layers[i], 2, 2048).total();
    }
    EXPECT_DOUBLE_EQ(block, s * b * h * (34 + 5 * a * s / h)) << "h=" << g.h;
  }
}

TEST(IrActivations, SwiGluKeepsThreeIntermediateTensorsAndNoMasks) {
  auto m = model_preset("llama2-7b");
  ASSERT_TRUE(m.ok());
  double block = 0;
  for (size_t i = 0; i < m->layers.size(); ++i) {
    if (m->block_of[i] == 0) block += layer_activations(m->layers[i], 1, 4096).total();
  }
  const double t = 4096, h = 4096, f = 11008, a = 32;
  // Norm inputs 2 x 2th, QKV input 2th, Q/K/V 6th, out-proj input 2th, softmax 2at*s,
  // MLP input 2th, gate/up/product 6tf.
  EXPECT_DOUBLE_EQ(block, t * h * (4 + 2 + 6 + 2 + 2) + 2 * a * t * 4096 + 6 * t * f);
}

// Memory-bound bytes of the kernels Megatron-LM runs (runtime/ir/src/layer.cc, layer_traffic).
TEST(IrTraffic, LossRotaryAndEmbeddingGradientCountTheirKernelsBytes) {
  auto m = model_preset("llama2-7b");  // rotary (no learned positions), V = 32000, untied
  ASSERT_TRUE(m.ok());
  const double t = 2 * 4096.0, h = 4096, V = 32000;
  for (const Layer& l : m->layers) {
    const TrafficBytes b = layer_traffic(l, 2, 4096);
    switch (l.kind) {
      case LayerKind::kLmHead:
        // The unfused fp32 cross-entropy: 38 bytes per logit forward, 14 backward.
        EXPECT_DOUBLE_EQ(b.sharded, 38 * t * V);
        EXPECT_DOUBLE_EQ(b.backward_sharded, 14 * t * V);
        break;
      case LayerKind::kEmbedding:
        // The gather forward; backward 1.5 x it plus the dense table gradient, 12 bytes each.
        EXPECT_DOUBLE_EQ(b.replicated, 2 * t * h);
        EXPECT_DOUBLE_EQ(b.backward_replicated, 1.5 * 2 * t * h);
        EXPECT_DOUBLE_EQ(b.backward_table, 12 * V * h);
        break;
      case LayerKind::kAttention:
        // Fused RoPE on Q and K (32 heads each of 128): 4 bytes per element each way; the
        // scores' softmax (no dropout in LLaMA) apart.
        EXPECT_TRUE(l.rotary);
        EXPECT_DOUBLE_EQ(b.sharded, 4 * t * (32 + 32) * 128);
        EXPECT_DOUBLE_EQ(b.backward_sharded, b.sharded);
        EXPECT_DOUBLE_EQ(b.scores, 4 * 32 * 4096 * t);
        EXPECT_DOUBLE_EQ(b.backward_scores, 1.5 * b.scores);
        break;
      default:
        EXPECT_DOUBLE_EQ(b.backward_replicated, 1.5 * b.replicated);
        EXPECT_DOUBLE_EQ(b.backward_sharded, 1.5 * b.sharded);
    }
  }
  // GPT (learned positions) has no rotary traffic.
  const Model g = gpt(2304, 2, 24);
  for (const Layer& l : g.layers) {
    if (l.kind == LayerKind::kAttention) {
      EXPECT_EQ(layer_traffic(l, 1, 2048).sharded, 0);
    }
  }
}

TEST(IrModel, BlocksGroupEmbeddingFirstAndHeadLast) {
  auto m = model_preset("llama2-13b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->num_blocks, 40);
  EXPECT_EQ(m->block_of.front(), -1);
  EXPECT_EQ(m->block_of.back(), 40);
  EXPECT_EQ(m->layers.back().kind, LayerKind::kLmHead);
  EXPECT_EQ(m->heads, 40);
  EXPECT_EQ(m->vocab, 32000);
}

}  // namespace
}  // namespace tessera::ir
