// Model families read from the config.json of named public checkpoints (fixtures/hf, written from
// the published files): parameter totals against the published figures, each preset against its
// checkpoint's config, and the shapes each family adds to the IR (sliding window, QKV biases,
// latent attention, shared experts, gated GeLU, Falcon's single-norm block).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

Model checkpoint(const std::string& name) {
  auto m = load_model(std::string(TESSERA_IR_FIXTURES) + "/hf/" + name + ".json");
  EXPECT_TRUE(m.ok()) << name << ": " << m.status().to_string();
  return m.ok() ? *m : Model{};
}

double billions(int64_t params) {
  return static_cast<double>(params) / 1e9;
}

struct Published {
  const char* fixture;  // tests/planner/fixtures/hf/<fixture>.json
  const char* preset;   // the matching --model preset
  double total_b;       // published total, billions
  const char* source;   // where the figure is published
};

// Totals as published; computed values are in the comments (transformers' num_parameters()
// counts a tied matrix once, as the IR does).
constexpr Published kPublished[] = {
    {"gpt2", "gpt2", 0.124, "OpenAI GPT-2 small, 124M"},                  // 0.12444
    {"llama-7b", "llama-7b", 6.74, "HF hub huggyllama/llama-7b, 6.74B"},  // 6.7384
    {"Llama-2-7b-hf", "llama2-7b", 6.74, "HF hub meta-llama/Llama-2-7b, 6.74B"},
    {"Meta-Llama-3-8B", "llama3-8b", 8.03, "HF hub meta-llama/Meta-Llama-3-8B, 8.03B"},
    {"Meta-Llama-3.1-8B", "llama3-8b", 8.03, "HF hub meta-llama/Llama-3.1-8B, 8.03B"},
    {"Mistral-7B-v0.1", "mistral-7b", 7.24, "HF hub mistralai/Mistral-7B-v0.1, 7.24B"},
    {"Mixtral-8x7B-v0.1", "mixtral-8x7b", 46.7, "Mistral AI, Mixtral of experts: 46.7B"},
    {"Qwen2-7B", "qwen2-7b", 7.62, "HF hub Qwen/Qwen2-7B, 7.62B"},                    // 7.6156
    {"Qwen2-72B", "qwen2-72b", 72.7, "HF hub Qwen/Qwen2-72B, 72.7B"},                 // 72.706
    {"Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b", 14.3, "Qwen blog: 14.3B total"},       // 14.316
    {"Qwen2-57B-A14B", "qwen2-57b-a14b", 57.4, "HF hub Qwen/Qwen2-57B-A14B, 57.4B"},  // 57.409
    {"DeepSeek-V2-Lite", "deepseek-v2-lite", 15.7, "DeepSeek-V2 paper: Lite 15.7B"},  // 15.706
    {"DeepSeek-V2", "deepseek-v2", 236, "DeepSeek-V2 paper: 236B"},                   // 235.74
    // 671B without the 14B multi-token-prediction module (685B on the hub with it).
    {"DeepSeek-V3", "deepseek-v3", 671, "DeepSeek-V3 report: 671B"},  // 671.03
    {"gemma-2b", "gemma-2b", 2.51, "HF hub google/gemma-2b, 2.51B"},  // 2.5062
    {"gemma-7b", "gemma-7b", 8.54, "HF hub google/gemma-7b, 8.54B"},  // 8.5377
    // Falcon's hub figures (7.22B, 41.8B) count the tied LM head's stored copy; see below.
    {"falcon-7b", "falcon-7b", 6.92, "transformers num_parameters(), 6.92B"},  // 6.9217
    {"falcon-7b-refinedweb", "falcon-7b", 6.92, "the same checkpoint's original config"},
};

TEST(IrFamilies, CheckpointTotalsWithinOnePercentOfPublished) {
  for (const Published& p : kPublished) {
    const Model m = checkpoint(p.fixture);
    EXPECT_NEAR(billions(model_params(m)) / p.total_b, 1.0, 0.01)
        << p.fixture << " computed " << billions(model_params(m)) << "B vs " << p.source;
  }
}

TEST(IrFamilies, EachPresetIsItsCheckpointConfig) {
  for (const Published& p : kPublished) {
    const Model file = checkpoint(p.fixture);
    auto preset = model_preset(p.preset);
    ASSERT_TRUE(preset.ok()) << p.preset << ": " << preset.status().to_string();
    EXPECT_EQ(model_params(*preset), model_params(file)) << p.preset;
    EXPECT_EQ(model_active_params(*preset), model_active_params(file)) << p.preset;
    EXPECT_EQ(preset->num_blocks, file.num_blocks) << p.preset;
    EXPECT_EQ(preset->layers.size(), file.layers.size()) << p.preset;
    for (int64_t seq : {2048, 32768}) {
      EXPECT_DOUBLE_EQ(model_training_flops(*preset, 2, seq), model_training_flops(file, 2, seq))
          << p.preset << " s=" << seq;
    }
  }
}

TEST(IrFamilies, FalconHubFiguresCountTheTiedHeadTwice) {
  // The hub shows 7.22B and 41.8B: the checkpoints store the tied LM head as its own tensor.
  struct Hub {
    const char* fixture;
    double hub_b;
  };
  for (const Hub& h : {Hub{"falcon-7b", 7.22}, Hub{"falcon-40b", 41.8}}) {
    const Model m = checkpoint(h.fixture);
    ASSERT_TRUE(m.tied_embeddings);
    const int64_t stored = model_params(m) + m.vocab * m.hidden;
    EXPECT_NEAR(billions(stored) / h.hub_b, 1.0, 0.01) << h.fixture;
  }
}

TEST(IrFamilies, ActiveParametersOfSparseCheckpoints) {
  struct Active {
    const char* fixture;
    double active_b, tolerance;
  };
  // Published activated parameters: Mixtral 12.9B; Qwen1.5-MoE 2.7B; Qwen2-57B-A14B 14B and
  // DeepSeek-V2 21B / V3 37B (rounded to the billion, hence 2%).
  for (const Active& a :
       {Active{"Mixtral-8x7B-v0.1", 12.9, 0.01}, Active{"Qwen1.5-MoE-A2.7B", 2.7, 0.01},
        Active{"Qwen2-57B-A14B", 14.0, 0.02}, Active{"DeepSeek-V2", 21.0, 0.02},
        Active{"DeepSeek-V3", 37.0, 0.02}}) {
    const Model m = checkpoint(a.fixture);
    EXPECT_NEAR(billions(model_active_params(m)) / a.active_b, 1.0, a.tolerance) << a.fixture;
  }
}

const Layer& first_layer(const Model& m, LayerKind kind, int block = 0) {
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].kind == kind && m.block_of[i] == block) return m.layers[i];
  }
  static const Layer none;
  ADD_FAILURE() << "no " << layer_kind_name(kind) << " in block " << block;
  return none;
}

double gemm_flops(const Layer& l, std::string_view name, int64_t seq) {
  for (const Gemm& g : layer_gemms(l, 1, seq)) {
    if (g.name == name) return g.flops();
  }
  ADD_FAILURE() << "no GEMM " << name;
  return 0;
}

TEST(IrFamilies, SlidingWindowCapsAttentionCoreAtTheWindow) {
  const Layer attn = first_layer(checkpoint("Mistral-7B-v0.1"), LayerKind::kAttention);
  EXPECT_EQ(attn.window, 4096);
  Layer full = attn;
  full.window = 0;
  // Within the window nothing changes; beyond it the core grows linearly, not quadratically.
  EXPECT_DOUBLE_EQ(layer_forward_flops(attn, 1, 4096), layer_forward_flops(full, 1, 4096));
  EXPECT_DOUBLE_EQ(gemm_flops(attn, "scores", 32768), 2.0 * 32768 * 4096 * 128 * 32);
  EXPECT_DOUBLE_EQ(gemm_flops(full, "scores", 32768), 8 * gemm_flops(attn, "scores", 32768));
  EXPECT_DOUBLE_EQ(layer_activations(full, 1, 32768).scores,
                   8 * layer_activations(attn, 1, 32768).scores);
  EXPECT_EQ(first_layer(checkpoint("Mixtral-8x7B-v0.1"), LayerKind::kAttention).window, 0);  // null
}

TEST(IrFamilies, Qwen2HasBiasesOnQkvOnly) {
  const Layer attn = first_layer(checkpoint("Qwen2-7B"), LayerKind::kAttention);
  const int64_t h = 3584, q = 28 * 128, kv = 4 * 128;
  EXPECT_EQ(layer_params(attn).total(), 2 * h * q + 2 * h * kv + q + 2 * kv);
  EXPECT_EQ(layer_params(first_layer(checkpoint("Qwen2-7B"), LayerKind::kMlp)).total(),
            3 * h * 18944);
}

TEST(IrFamilies, DeepSeekV3HasLatentAttentionAndThreeDenseLayers) {
  const Model m = checkpoint("DeepSeek-V3");
  ASSERT_EQ(m.num_blocks, 61);
  EXPECT_EQ(m.experts, 256);
  for (int b : {0, 1, 2}) EXPECT_EQ(first_layer(m, LayerKind::kMlp, b).ffn, 18432);
  const Layer& moe = first_layer(m, LayerKind::kMoe, 3);
  EXPECT_EQ(moe.ffn, 2048);
  EXPECT_EQ(moe.shared_ffn, 2048);
  EXPECT_EQ(moe.top_k, 8);
  const Layer& attn = first_layer(m, LayerKind::kAttention, 3);
  ASSERT_TRUE(is_mla(attn));
  // q_a 7168x1536 + norm, q_b 1536x(128x192), kv_a 7168x(512+64) + norm, kv_b 512x(128x256),
  // o 16384x7168.
  const ParamSplit p = layer_params(attn);
  EXPECT_EQ(p.replicated, 7168 * 1536 + 1536 + 7168 * 576 + 512);
  EXPECT_EQ(p.tp_sharded, 1536 * 128 * 192 + 512 * 128 * 256 + 16384 * 7168);
  EXPECT_EQ(p.kv_sharded, 0);
  // The shared expert is dense (TP-split), not an expert weight.
  EXPECT_EQ(layer_params(moe).tp_sharded, 3 * 7168 * 2048);
  EXPECT_EQ(layer_params(moe).expert, int64_t{256} * 3 * 7168 * 2048);
  // Scores and context use the query/key width 192 and the value width 128.
  EXPECT_DOUBLE_EQ(gemm_flops(attn, "scores", 4096), 2.0 * 4096 * 4096 * 192 * 128);
  EXPECT_DOUBLE_EQ(gemm_flops(attn, "context", 4096), 2.0 * 4096 * 128 * 4096 * 128);
  EXPECT_EQ(m.notes.size(), 2u);  // rope_scaling and the multi-token-prediction layer
}

TEST(IrFamilies, DeepSeekV2LiteHasNoQueryLatent) {
  const Layer attn = first_layer(checkpoint("DeepSeek-V2-Lite"), LayerKind::kAttention);
  ASSERT_TRUE(is_mla(attn));
  EXPECT_EQ(attn.q_lora_rank, 0);
  EXPECT_EQ(layer_params(attn).replicated, 2048 * 576 + 512);
  EXPECT_DOUBLE_EQ(gemm_flops(attn, "q", 1), 2.0 * 2048 * 16 * 192);
}

TEST(IrFamilies, QwenMoeSharedExpertIsGatedAndAlwaysOn) {
  const Model m = checkpoint("Qwen1.5-MoE-A2.7B");
  const Layer& moe = first_layer(m, LayerKind::kMoe);
  EXPECT_EQ(moe.shared_ffn, 5632);
  EXPECT_TRUE(moe.shared_gate);
  // Router (60 experts) and shared-expert gate are replicated, one h-row each.
  EXPECT_EQ(layer_params(moe).replicated, 2048 * 61);
  EXPECT_DOUBLE_EQ(gemm_flops(moe, "shared_up", 1), 2.0 * 2 * 5632 * 2048);
  // Active: 4 of 60 routed experts plus the whole shared expert.
  const ParamSplit p = layer_params(moe);
  EXPECT_EQ(p.total() - p.expert + p.expert / 60 * 4,
            2048 * 61 + 3 * 2048 * 5632 + 4 * 3 * 2048 * 1408);
}

TEST(IrFamilies, QwenMoeSparseStepAndMlpOnlyLayersMakeDenseLayers) {
  const std::string text = R"({"model_type": "qwen2_moe", "hidden_size": 64,
      "num_hidden_layers": 6, "num_attention_heads": 4, "intermediate_size": 96,
      "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 4,
      "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3],
      "vocab_size": 100})";
  auto m = model_from_hf_config(text, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Sparse where (i + 1) % 2 == 0 and i is not 3: layers 1 and 5.
  for (int b = 0; b < 6; ++b) {
    const bool sparse = b == 1 || b == 5;
    const Layer& ffn = m->layers[static_cast<size_t>(4 * b + 4)];
    EXPECT_EQ(ffn.kind, sparse ? LayerKind::kMoe : LayerKind::kMlp) << "layer " << b;
    EXPECT_EQ(ffn.ffn, sparse ? 32 : 96) << "layer " << b;
  }
}

TEST(IrFamilies, GemmaHasWideHeadsGatedGeluAndTiedEmbeddings) {
  const Model m = checkpoint("gemma-7b");
  const Layer& attn = first_layer(m, LayerKind::kAttention);
  EXPECT_EQ(attn.head_dim, 256);  // not 3072 / 16
  EXPECT_EQ(layer_params(attn).total(), 4 * 3072 * 16 * 256);
  const Layer& mlp = first_layer(m, LayerKind::kMlp);
  EXPECT_EQ(mlp.activation, MlpActivation::kGeGlu);
  EXPECT_EQ(layer_params(mlp).total(), 3 * 3072 * 24576);
  EXPECT_TRUE(m.tied_embeddings);
}

TEST(IrFamilies, FalconBlocksShareOneNormUnlessNewArchitecture) {
  const Model seven = checkpoint("falcon-7b");
  EXPECT_EQ(seven.layers.size(), 1u + 3 * 32 + 2);  // norm, attention, MLP per block
  EXPECT_EQ(seven.kv_heads, 1);
  EXPECT_EQ(first_layer(seven, LayerKind::kNorm).norm, NormType::kLayerNorm);
  const Model forty = checkpoint("falcon-40b");
  EXPECT_EQ(forty.layers.size(), 1u + 4 * 60 + 2);  // ln_attn and ln_mlp
  EXPECT_EQ(forty.kv_heads, 8);
  EXPECT_FALSE(forty.notes.empty());  // parallel attention priced as sequential
}

// RoPE (its traffic) wherever positions are neither learned nor ALiBi biases.
TEST(IrFamilies, RotaryEmbeddingsExceptLearnedPositionsAndAlibi) {
  EXPECT_TRUE(first_layer(checkpoint("falcon-7b"), LayerKind::kAttention).rotary);
  EXPECT_TRUE(first_layer(checkpoint("Meta-Llama-3-8B"), LayerKind::kAttention).rotary);
  EXPECT_FALSE(first_layer(*model_preset("gpt2"), LayerKind::kAttention).rotary);
  // The same Falcon with "alibi": true.
  std::ifstream in(std::string(TESSERA_IR_FIXTURES) + "/hf/falcon-7b.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const std::string learned = "\"alibi\": false";
  const size_t at = config.find(learned);
  ASSERT_NE(at, std::string::npos);
  config.replace(at, learned.size(), "\"alibi\": true");
  const std::string path = ::testing::TempDir() + "/tessera_falcon_alibi.json";
  std::ofstream(path) << config;
  auto alibi = load_model(path);
  ASSERT_TRUE(alibi.ok()) << alibi.status().to_string();
  EXPECT_FALSE(first_layer(*alibi, LayerKind::kAttention).rotary);
  std::remove(path.c_str());
}

TEST(IrFamilies, RopeScalingIsANoteNotACostChange) {
  const Model llama31 = checkpoint("Meta-Llama-3.1-8B");
  ASSERT_EQ(llama31.notes.size(), 1u);
  EXPECT_NE(llama31.notes[0].find("rope_scaling"), std::string::npos);
  EXPECT_DOUBLE_EQ(model_training_flops(llama31, 1, 8192),
                   model_training_flops(checkpoint("Meta-Llama-3-8B"), 1, 8192));
}

TEST(IrFamilies, LayerListCarriesTheNewShapes) {
  const std::string text = R"({"hidden": 64, "layers": [
      {"type": "embedding", "vocab": 10},
      {"type": "attention", "heads": 4, "head_dim": 24, "kv_lora_rank": 16, "q_lora_rank": 8,
       "rope_head_dim": 8, "v_head_dim": 16},
      {"type": "attention", "heads": 4, "kv_heads": 2, "window": 32, "qkv_bias": true},
      {"type": "moe", "ffn": 32, "experts": 4, "top_k": 2, "activation": "geglu",
       "shared_ffn": 48, "shared_gate": true},
      {"type": "lm_head", "vocab": 10}]})";
  auto m = model_from_layer_list(text, "m.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(is_mla(m->layers[1]));
  EXPECT_EQ(m->layers[2].window, 32);
  EXPECT_EQ(m->layers[3].activation, MlpActivation::kGeGlu);
  EXPECT_EQ(layer_params(m->layers[3]).tp_sharded, 3 * 64 * 48);
  auto orphan = model_from_layer_list(
      R"({"hidden": 64, "layers": [{"type": "attention", "heads": 4, "v_head_dim": 16}]})",
      "m.json");
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("need kv_lora_rank"), std::string::npos);
}

}  // namespace
}  // namespace tessera::ir
