// Hugging Face config.json parsing, the generic layer list, presets and their error messages.
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

constexpr const char* kGpt2Small = R"({
  "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": null,
  "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new"})";

constexpr const char* kLlama2_7b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
  "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": false})";

constexpr const char* kMixtral = R"({
  "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 8,
  "num_experts_per_tok": 2, "hidden_act": "silu", "tie_word_embeddings": false})";

// Found by the ir_model_json fuzz target (tests/fuzz/regressions/ir_model_json): a string field
// holding another type threw json::type_error out of the loader (std::terminate).
TEST(LayerList, AStringFieldOfAnotherTypeIsAnErrorNamingIt) {
  auto act = model_from_layer_list(
      R"({"hidden": 32, "layers": [{"type": "moe", "ffn": 64, "experts": 4, "top_k": 1,
                                    "activation": 10}]})",
      "m.json");
  ASSERT_FALSE(act.ok());
  EXPECT_EQ(act.status().message(),
            "m.json: layers[0]: field 'activation' must be a string, got 10");
  auto norm = model_from_layer_list(
      R"({"hidden": 32, "layers": [{"type": "norm", "norm": ["rmsnorm"]}]})", "m.json");
  ASSERT_FALSE(norm.ok());
  EXPECT_NE(norm.status().message().find("field 'norm' must be a string"), std::string::npos);
  EXPECT_FALSE(model_from_layer_list(R"({"hidden": 32, "layers": [{"type": 5}]})", "m.json").ok());
}

TEST(HfConfig, Gpt2SmallHasItsPublished124MParameters) {
  auto m = model_from_hf_config(kGpt2Small, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(model_params(*m), 124439808);  // transformers: GPT2LMHeadModel.num_parameters()
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_EQ(m->max_seq_len, 1024);
  EXPECT_EQ(m->num_blocks, 12);
}

TEST(HfConfig, LlamaKeysGiveSameModelAsPreset) {
  auto parsed = model_from_hf_config(kLlama2_7b, "config.json");
  auto preset = model_preset("llama2-7b");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(model_params(*parsed), model_params(*preset));
  EXPECT_DOUBLE_EQ(model_training_flops(*parsed, 4, 4096), model_training_flops(*preset, 4, 4096));
  EXPECT_FALSE(parsed->tied_embeddings);
}

TEST(HfConfig, MixtralKeysBuildMoeLayers) {
  auto m = model_from_hf_config(kMixtral, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(model_params(*m), 46702792704);
  EXPECT_EQ(m->experts, 8);
  EXPECT_EQ(m->kv_heads, 8);
}

TEST(HfConfig, MissingFieldIsNamed) {
  const std::string text = R"({"hidden_size": 4096, "num_hidden_layers": 32,
      "intermediate_size": 11008, "vocab_size": 32000})";
  auto m = model_from_hf_config(text, "config.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "config.json: field 'num_attention_heads' missing");
}

TEST(HfConfig, HeadsNotDividingHiddenIsRejected) {
  const std::string text = R"({"hidden_size": 4097, "num_hidden_layers": 32,
      "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000})";
  auto m = model_from_hf_config(text, "config.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "config.json: hidden_size 4097 not divisible by num_attention_heads 32");
}

TEST(HfConfig, WrongTypesAndBadJsonAreRejected) {
  auto bad_type = model_from_hf_config(
      R"({"hidden_size": "big", "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 8, "vocab_size": 10})",
      "c.json");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("field 'hidden_size' must be a positive integer"),
            std::string::npos);
  auto bad_json = model_from_hf_config("{\"hidden_size\": ", "c.json");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_EQ(bad_json.status().message(), "c.json: not valid JSON");
  auto kv = model_from_hf_config(
      R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
          "num_key_value_heads": 3, "intermediate_size": 8, "vocab_size": 10})",
      "c.json");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().message(),
            "c.json: num_attention_heads 8 not divisible by num_key_value_heads 3");
}

TEST(LayerList, RepeatGroupsBecomeBlocksAndCountLikeADecoder) {
  // The same model as a 2-layer GPT built by build_decoder.
  const std::string text = R"({"name": "tiny", "hidden": 64, "bias": true, "dropout": true,
    "layers": [
      {"type": "embedding", "vocab": 100, "positions": 32},
      {"repeat": 2, "layers": [{"type": "norm"}, {"type": "attention", "heads": 4},
                               {"type": "norm"}, {"type": "mlp"}]},
      {"type": "norm"},
      {"type": "lm_head", "vocab": 100, "tied": true}]})";
  auto listed = model_from_layer_list(text, "tiny.json");
  ASSERT_TRUE(listed.ok()) << listed.status().to_string();
  DecoderConfig c;
  c.name = "tiny";
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.vocab = 100;
  c.learned_positions = 32;
  auto built = build_decoder(c);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(model_params(*listed), model_params(*built));
  EXPECT_EQ(listed->num_blocks, 2);
  EXPECT_EQ(listed->block_of, built->block_of);
  EXPECT_DOUBLE_EQ(model_training_flops(*listed, 2, 32), model_training_flops(*built, 2, 32));
}

TEST(LayerList, LooseLayersAreOneBlockEach) {
  const std::string text = R"({"hidden": 32, "layers": [
      {"type": "embedding", "vocab": 10}, {"type": "attention", "heads": 2},
      {"type": "moe", "ffn": 64, "experts": 4, "top_k": 1, "activation": "swiglu"},
      {"type": "lm_head", "vocab": 10}]})";
  auto m = model_from_layer_list(text, "m.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->num_blocks, 2);
  EXPECT_EQ(m->experts, 4);
}

TEST(LayerList, ErrorsNameTheLayer) {
  auto missing = model_from_layer_list(
      R"({"hidden": 32, "layers": [{"type": "embedding", "vocab": 10},
          {"repeat": 2, "layers": [{"type": "attention"}]}]})",
      "m.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "m.json: layers[1].layers[0]: field 'heads' missing");
  auto unknown = model_from_layer_list(R"({"hidden": 32, "layers": [{"type": "conv"}]})", "m.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "m.json: layers[0]: unknown layer type 'conv'");
  auto indivisible = model_from_layer_list(
      R"({"hidden": 30, "layers": [{"type": "attention", "heads": 4}]})", "m.json");
  ASSERT_FALSE(indivisible.ok());
  EXPECT_EQ(indivisible.status().message(),
            "m.json: layers[0]: hidden 30 not divisible by heads 4");
}

TEST(LoadModel, PresetNameFileAndUnknownName) {
  auto preset = load_model("gpt3-175b");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->num_blocks, 96);

  const std::string path = ::testing::TempDir() + "/tessera_ir_config.json";
  {
    std::ofstream out(path);
    out << kGpt2Small;
  }
  auto file = load_model(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(model_params(*file), 124439808);
  std::remove(path.c_str());

  auto unknown = load_model("no-such-model");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("no-such-model"), std::string::npos);
}

}  // namespace
}  // namespace tessera::ir
