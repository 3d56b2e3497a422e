// A config.json the IR cannot honour is refused naming the model_type or key, never planned as
// another model: unknown families, keys a family does not read that would change cost, values
// a family reads but cannot honour, and ambiguous configs without a model_type.
#include <string>

#include <gtest/gtest.h>

#include "tessera/ir/loaders.h"

namespace tessera::ir {
namespace {

// A small LLaMA-style config with `extra` keys appended.
std::string small_config(const std::string& model_type, const std::string& extra = "") {
  std::string text = R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 96, "vocab_size": 100)";
  if (!model_type.empty()) text += R"(, "model_type": ")" + model_type + "\"";
  if (!extra.empty()) text += ", " + extra;
  return text + "}";
}

std::string refusal_of(const std::string& text) {
  auto m = model_from_hf_config(text, "config.json");
  EXPECT_FALSE(m.ok()) << text;
  if (m.ok()) return "";
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  return m.status().message();
}

TEST(IrRefusals, UnknownModelTypeIsNamed) {
  const std::string msg = refusal_of(small_config("gemma2"));
  EXPECT_EQ(msg.rfind("config.json: model_type 'gemma2' is not supported (gpt2, llama, ", 0), 0u)
      << msg;
  EXPECT_NE(refusal_of(small_config("", R"("model_type": 7)"))
                .find("field 'model_type' must be a string"),
            std::string::npos);
}

TEST(IrRefusals, KeysAFamilyDoesNotReadAreNamed) {
  EXPECT_EQ(refusal_of(small_config("llama", R"("kv_lora_rank": 512)")),
            "config.json: model_type 'llama' does not support key 'kv_lora_rank' (it would "
            "change the cost)");
  EXPECT_NE(refusal_of(small_config("llama", R"("num_experts": 8, "num_experts_per_tok": 2)"))
                .find("key 'num_experts'"),
            std::string::npos);
  EXPECT_NE(
      refusal_of(small_config("mistral", R"("num_local_experts": 8)")).find("'num_local_experts'"),
      std::string::npos);
  EXPECT_NE(refusal_of(small_config("llama", R"("sliding_window": 4096)")).find("'sliding_window'"),
            std::string::npos);
  EXPECT_NE(refusal_of(small_config("gemma", R"("final_logit_softcapping": 30.0)"))
                .find("'final_logit_softcapping'"),
            std::string::npos);
}

TEST(IrRefusals, InactiveValuesOfForeignKeysAreAccepted) {
  // null, false, 0 and [] turn nothing on: transformers writes them for every family.
  auto m = model_from_hf_config(
      small_config("llama", R"("sliding_window": null, "num_experts": 0, "mlp_only_layers": [],
                        "alibi": false)"),
      "config.json");
  EXPECT_TRUE(m.ok()) << m.status().to_string();
}

TEST(IrRefusals, ValuesAFamilyCannotHonourAreNamed) {
  EXPECT_NE(
      refusal_of(small_config("qwen2", R"("use_sliding_window": true, "sliding_window": 4096)"))
          .find("use_sliding_window"),
      std::string::npos);
  EXPECT_NE(refusal_of(small_config("qwen2", R"("layer_types": ["full_attention",
                                                                  "sliding_attention"])"))
                .find("layer_types"),
            std::string::npos);
  EXPECT_TRUE(model_from_hf_config(small_config("qwen2", R"("layer_types": ["full_attention",
                                                                          "full_attention"])"),
                                   "config.json")
                  .ok());
  const std::string mla = R"("kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
      "v_head_dim": 16)";
  EXPECT_EQ(refusal_of(small_config("deepseek_v2", mla)),
            "config.json: field 'q_lora_rank' missing (null: no query latent)");
  EXPECT_NE(refusal_of(small_config("deepseek_v3",
                                    mla + R"(, "q_lora_rank": null, "attention_bias": true)"))
                .find("attention_bias"),
            std::string::npos);
  EXPECT_NE(
      refusal_of(small_config("falcon", R"("multi_query": "yes")")).find("field 'multi_query'"),
      std::string::npos);
  const std::string moe = R"("num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32)";
  EXPECT_EQ(refusal_of(small_config("qwen2_moe", moe)),
            "config.json: field 'shared_expert_intermediate_size' missing");
  EXPECT_EQ(
      refusal_of(small_config(
          "qwen2_moe", moe + R"(, "shared_expert_intermediate_size": 0, "mlp_only_layers": [2])")),
      "config.json: field 'mlp_only_layers' names layer 2, the model has 2");
}

TEST(IrRefusals, WithoutModelTypeOnlyGpt2OrLlamaKeysAreRead) {
  EXPECT_EQ(refusal_of(small_config("", R"("n_routed_experts": 64)")),
            "config.json: key 'n_routed_experts' without model_type is ambiguous (not a LLaMA "
            "key); add model_type");
  EXPECT_NE(refusal_of(R"({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32,
                        "vocab_size": 100, "multi_query": true})")
                .find("not a GPT-2 key"),
            std::string::npos);
  // Today's reading stays: LLaMA keys, with Mixtral's experts.
  auto mixtral = model_from_hf_config(
      small_config("", R"("num_local_experts": 4, "num_experts_per_tok": 2)"), "config.json");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().to_string();
  EXPECT_EQ(mixtral->experts, 4);
}

TEST(IrRefusals, MistralWindowFollowsTransformersDefaults) {
  // MistralConfig defaults to a 4096 window; null turns it off.
  auto absent = model_from_hf_config(small_config("mistral"), "config.json");
  auto off =
      model_from_hf_config(small_config("mistral", R"("sliding_window": null)"), "config.json");
  ASSERT_TRUE(absent.ok() && off.ok());
  EXPECT_EQ(absent->layers[2].window, 4096);
  EXPECT_EQ(off->layers[2].window, 0);
}

}  // namespace
}  // namespace tessera::ir
