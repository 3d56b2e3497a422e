// One reader per Hugging Face model family: the config.json keys each family's transformers
// implementation reads, to a DecoderConfig. Defaults follow the transformers library, except
// that keys whose default would silently pick an architecture (Qwen2-MoE's expert sizes,
// DeepSeek's q_lora_rank) are required.
#include <algorithm>
#include <string>

#include "hf_fields.h"

namespace tessera::ir::hf {
namespace {

std::string num(int64_t v) {
  return std::to_string(v);
}

std::string model_name(const Fields& f) {
  std::string name = f.text("_name_or_path", "");
  if (name.empty()) name = f.text("model_type", "");
  return name.empty() ? f.source() : name;
}

bool is_gelu(const std::string& act) {
  return act.rfind("gelu", 0) == 0;  // gelu, gelu_new, gelu_pytorch_tanh, ...
}

void note_rope_scaling(const Fields& f, DecoderConfig& c) {
  if (f.active("rope_scaling")) {
    c.notes.push_back("rope_scaling ignored: it changes rotary frequencies, not cost");
  }
}

// The keys every LLaMA-derived family shares: sizes, GQA, RMSNorm, a gated MLP, untied
// embeddings unless tie_word_embeddings says otherwise.
Result<DecoderConfig> llama_core(const Fields& f, bool tied_default) {
  DecoderConfig c;
  c.name = model_name(f);
  TSR_ASSIGN_OR_RETURN(c.hidden, f.required("hidden_size"));
  TSR_ASSIGN_OR_RETURN(c.layers, f.required("num_hidden_layers"));
  TSR_ASSIGN_OR_RETURN(c.heads, f.required("num_attention_heads"));
  TSR_ASSIGN_OR_RETURN(c.kv_heads, f.optional("num_key_value_heads", c.heads));
  TSR_ASSIGN_OR_RETURN(c.ffn, f.required("intermediate_size"));
  TSR_ASSIGN_OR_RETURN(c.vocab, f.required("vocab_size"));
  TSR_ASSIGN_OR_RETURN(c.max_seq_len, f.optional("max_position_embeddings", 0));
  TSR_ASSIGN_OR_RETURN(c.head_dim, f.optional("head_dim", 0));
  // An explicit head_dim decouples heads from hidden (Mistral-style); otherwise they must divide.
  if (c.head_dim == 0 && c.hidden % c.heads != 0) {
    return invalid_argument(f.source() + ": hidden_size " + num(c.hidden) +
                            " not divisible by num_attention_heads " + num(c.heads));
  }
  if (c.heads % c.kv_heads != 0) {
    return invalid_argument(f.source() + ": num_attention_heads " + num(c.heads) +
                            " not divisible by num_key_value_heads " + num(c.kv_heads));
  }
  // The MLP is gated whatever the function (gate, up, down); GeLU or SiLU costs the same.
  c.activation =
      is_gelu(f.text("hidden_act", "silu")) ? MlpActivation::kGeGlu : MlpActivation::kSwiGlu;
  c.norm =
      f.has("layer_norm_eps") && !f.has("rms_norm_eps") ? NormType::kLayerNorm : NormType::kRmsNorm;
  c.dropout = f.number("attention_dropout", 0) > 0 || f.number("hidden_dropout", 0) > 0;
  TSR_ASSIGN_OR_RETURN(c.tied, f.flag("tie_word_embeddings", tied_default));
  c.bias = false;
  note_rope_scaling(f, c);
  return c;
}

// LLaMA's linear-layer biases (one flag for the whole model: either turns them on).
Status read_biases(const Fields& f, DecoderConfig& c) {
  TSR_ASSIGN_OR_RETURN(const bool attention, f.flag("attention_bias", false));
  TSR_ASSIGN_OR_RETURN(const bool mlp, f.flag("mlp_bias", false));
  c.bias = attention || mlp;
  return Status();
}

// Routed experts as Mixtral names them.
Status read_local_experts(const Fields& f, DecoderConfig& c) {
  TSR_ASSIGN_OR_RETURN(c.experts, f.optional("num_local_experts", 0));
  if (c.experts == 0) return Status();
  TSR_ASSIGN_OR_RETURN(c.top_k, f.required("num_experts_per_tok"));
  if (c.top_k > c.experts) {
    return invalid_argument(f.source() + ": num_experts_per_tok " + num(c.top_k) +
                            " exceeds num_local_experts " + num(c.experts));
  }
  return Status();
}

Result<DecoderConfig> read_mistral(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, false));
  // transformers' MistralConfig defaults to a 4096 window; null turns it off.
  c.sliding_window = 4096;
  if (f.has("sliding_window")) {
    TSR_ASSIGN_OR_RETURN(c.sliding_window, f.count("sliding_window", 0));
  }
  return c;
}

Result<DecoderConfig> read_mixtral(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, false));
  TSR_ASSIGN_OR_RETURN(c.sliding_window, f.count("sliding_window", 0));
  TSR_RETURN_IF_ERROR(read_local_experts(f, c));
  return c;
}

// Qwen2: biases on Q, K and V. Its sliding window applies to some layers only, by rules that
// changed between transformers versions: refused rather than guessed.
Result<DecoderConfig> read_qwen2(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, false));
  c.qkv_bias = true;
  TSR_ASSIGN_OR_RETURN(const bool window, f.flag("use_sliding_window", false));
  if (window) {
    return invalid_argument(f.source() +
                            ": use_sliding_window true is not supported (the "
                            "layers it applies to are ambiguous); set it false");
  }
  // Newer transformers write layer_types; only full attention everywhere is read.
  if (f.present("layer_types")) {
    const Json& types = f.json()["layer_types"];
    const bool full =
        types.is_array() && std::all_of(types.begin(), types.end(), [](const Json& t) {
          return t.is_string() && t.get<std::string>() == "full_attention";
        });
    if (!full) {
      return invalid_argument(f.source() +
                              ": layer_types other than full_attention are not supported");
    }
  }
  return c;
}

// Layers [0, layers) listed in `key` must exist.
Status check_layer_list(const Fields& f, const char* key, const std::vector<int64_t>& list,
                        int64_t layers) {
  for (int64_t i : list) {
    if (i >= layers) {
      return invalid_argument(f.source() + ": field '" + key + "' names layer " + num(i) +
                              ", the model has " + num(layers));
    }
  }
  return Status();
}

// Qwen2-MoE: routed experts of moe_intermediate_size, one gated shared expert of
// shared_expert_intermediate_size; layer i is sparse unless listed in mlp_only_layers or
// (i + 1) % decoder_sparse_step != 0, when it is a dense MLP of intermediate_size.
Result<DecoderConfig> read_qwen2_moe(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, read_qwen2(f));
  TSR_ASSIGN_OR_RETURN(c.experts, f.required("num_experts"));
  TSR_ASSIGN_OR_RETURN(c.top_k, f.required("num_experts_per_tok"));
  c.dense_ffn = c.ffn;
  TSR_ASSIGN_OR_RETURN(c.ffn, f.required("moe_intermediate_size"));
  TSR_ASSIGN_OR_RETURN(c.shared_ffn, f.count("shared_expert_intermediate_size", -1));
  if (c.shared_ffn < 0) {
    return invalid_argument(f.source() + ": field 'shared_expert_intermediate_size' missing");
  }
  c.shared_gate = c.shared_ffn > 0;
  TSR_ASSIGN_OR_RETURN(const int64_t step, f.optional("decoder_sparse_step", 1));
  TSR_ASSIGN_OR_RETURN(c.dense_layers, f.indices("mlp_only_layers"));
  TSR_RETURN_IF_ERROR(check_layer_list(f, "mlp_only_layers", c.dense_layers, c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    if ((i + 1) % step != 0) c.dense_layers.push_back(i);
  }
  return c;
}

// DeepSeek-V2/V3: multi-head latent attention, routed + shared experts of moe_intermediate_size,
// dense MLPs of intermediate_size before first_k_dense_replace and off the moe_layer_freq grid.
Result<DecoderConfig> read_deepseek(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, false));
  c.kv_heads = c.heads;  // num_key_value_heads is unused: MLA gives every head its K and V
  TSR_ASSIGN_OR_RETURN(const bool bias, f.flag("attention_bias", false));
  if (bias) return invalid_argument(f.source() + ": attention_bias true with MLA is not modelled");
  if (!f.has("q_lora_rank")) {
    return invalid_argument(f.source() + ": field 'q_lora_rank' missing (null: no query latent)");
  }
  TSR_ASSIGN_OR_RETURN(c.q_lora_rank, f.optional("q_lora_rank", 0));
  TSR_ASSIGN_OR_RETURN(c.kv_lora_rank, f.required("kv_lora_rank"));
  TSR_ASSIGN_OR_RETURN(const int64_t nope, f.required("qk_nope_head_dim"));
  TSR_ASSIGN_OR_RETURN(c.rope_head_dim, f.required("qk_rope_head_dim"));
  TSR_ASSIGN_OR_RETURN(c.v_head_dim, f.required("v_head_dim"));
  c.head_dim = nope + c.rope_head_dim;
  if (f.active("num_nextn_predict_layers")) {
    c.notes.push_back(
        "num_nextn_predict_layers ignored: the multi-token-prediction module is "
        "not part of the model planned");
  }
  TSR_ASSIGN_OR_RETURN(c.experts, f.optional("n_routed_experts", 0));
  if (c.experts == 0) return c;  // a dense model: every MLP of intermediate_size
  TSR_ASSIGN_OR_RETURN(c.top_k, f.required("num_experts_per_tok"));
  c.dense_ffn = c.ffn;
  TSR_ASSIGN_OR_RETURN(c.ffn, f.required("moe_intermediate_size"));
  TSR_ASSIGN_OR_RETURN(const int64_t shared, f.count("n_shared_experts", 0));
  c.shared_ffn = shared * c.ffn;
  TSR_ASSIGN_OR_RETURN(const int64_t first_moe, f.count("first_k_dense_replace", 0));
  TSR_ASSIGN_OR_RETURN(const int64_t freq, f.optional("moe_layer_freq", 1));
  for (int64_t i = 0; i < c.layers; ++i) {
    if (i < first_moe || i % freq != 0) c.dense_layers.push_back(i);
  }
  if (static_cast<int64_t>(c.dense_layers.size()) == c.layers) {
    return invalid_argument(f.source() + ": first_k_dense_replace " + num(first_moe) +
                            " leaves no MoE layer among " + num(c.layers));
  }
  return c;
}

// Gemma: head_dim independent of hidden (default 256), gated GeLU, tied embeddings. Its
// embedding scaling by sqrt(hidden) is one multiply per element: no cost worth pricing.
Result<DecoderConfig> read_gemma(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, true));
  if (!f.present("head_dim")) c.head_dim = 256;
  c.activation = MlpActivation::kGeGlu;
  TSR_ASSIGN_OR_RETURN(c.bias, f.flag("attention_bias", false));
  return c;
}

// Falcon (and its RefinedWeb configs): LayerNorm, a 4h GeLU MLP, tied embeddings; multi-query
// (7B) or grouped (40B: new_decoder_architecture with num_kv_heads) attention; attention and MLP
// in parallel, priced as if sequential (same GEMMs and memory traffic; only their overlap is
// missed). Older configs name sizes n_layer, n_head and n_head_kv.
Result<DecoderConfig> read_falcon(const Fields& f) {
  DecoderConfig c;
  c.name = model_name(f);
  c.norm = NormType::kLayerNorm;
  c.activation = MlpActivation::kGelu;
  c.dropout = false;
  TSR_ASSIGN_OR_RETURN(c.hidden, f.required("hidden_size"));
  TSR_ASSIGN_OR_RETURN(c.layers,
                       f.has("n_layer") ? f.required("n_layer") : f.required("num_hidden_layers"));
  TSR_ASSIGN_OR_RETURN(c.heads,
                       f.has("n_head") ? f.required("n_head") : f.required("num_attention_heads"));
  TSR_ASSIGN_OR_RETURN(c.vocab, f.required("vocab_size"));
  TSR_ASSIGN_OR_RETURN(c.ffn, f.optional("ffn_hidden_size", 4 * c.hidden));
  TSR_ASSIGN_OR_RETURN(c.max_seq_len, f.optional("max_position_embeddings", 2048));
  TSR_ASSIGN_OR_RETURN(c.bias, f.flag("bias", false));
  TSR_ASSIGN_OR_RETURN(c.tied, f.flag("tie_word_embeddings", true));
  // The original 40B configs (model_type RefinedWeb) are the new architecture without saying so.
  TSR_ASSIGN_OR_RETURN(const bool new_arch, f.flag("new_decoder_architecture",
                                                   f.text("model_type", "") == "RefinedWeb"));
  TSR_ASSIGN_OR_RETURN(const bool multi_query, f.flag("multi_query", true));
  TSR_ASSIGN_OR_RETURN(const bool parallel, f.flag("parallel_attn", true));
  if (new_arch) {
    const char* key = f.has("n_head_kv") ? "n_head_kv" : "num_kv_heads";
    TSR_ASSIGN_OR_RETURN(c.kv_heads, f.optional(key, c.heads));
    TSR_ASSIGN_OR_RETURN(const int64_t norms, f.optional("num_ln_in_parallel_attn", 2));
    c.single_norm = norms == 1;
  } else {
    c.kv_heads = multi_query ? 1 : c.heads;
    c.single_norm = parallel;  // one input_layernorm feeds both branches
  }
  if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0) {
    return invalid_argument(f.source() + ": hidden_size " + num(c.hidden) + ", heads " +
                            num(c.heads) + " and kv heads " + num(c.kv_heads) + " do not divide");
  }
  if (new_arch || parallel) {
    c.notes.push_back("parallel attention and MLP priced as sequential (same work)");
  }
  TSR_ASSIGN_OR_RETURN(c.alibi, f.flag("alibi", false));
  if (c.alibi) c.notes.push_back("alibi: a bias on the scores, priced with the softmax");
  note_rope_scaling(f, c);
  return c;
}

Result<DecoderConfig> read_llama_family(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, llama_core(f, false));
  TSR_RETURN_IF_ERROR(read_biases(f, c));
  return c;
}

}  // namespace

Result<DecoderConfig> read_gpt2(const Fields& f) {
  DecoderConfig c;
  c.name = model_name(f);
  TSR_ASSIGN_OR_RETURN(c.hidden, f.required("n_embd"));
  TSR_ASSIGN_OR_RETURN(c.layers, f.required("n_layer"));
  TSR_ASSIGN_OR_RETURN(c.heads, f.required("n_head"));
  TSR_ASSIGN_OR_RETURN(c.vocab, f.required("vocab_size"));
  TSR_ASSIGN_OR_RETURN(c.ffn, f.optional("n_inner", 4 * c.hidden));
  TSR_ASSIGN_OR_RETURN(c.learned_positions, f.required("n_positions"));
  c.max_seq_len = c.learned_positions;
  if (c.hidden % c.heads != 0) {
    return invalid_argument(f.source() + ": n_embd " + num(c.hidden) + " not divisible by n_head " +
                            num(c.heads));
  }
  TSR_ASSIGN_OR_RETURN(c.tied, f.flag("tie_word_embeddings", true));
  c.dropout = f.number("resid_pdrop", 0.1) > 0 || f.number("attn_pdrop", 0.1) > 0;
  return c;
}

// LLaMA keys without a model_type, as read before families existed: LLaMA plus Mixtral's experts.
Result<DecoderConfig> read_llama(const Fields& f) {
  TSR_ASSIGN_OR_RETURN(DecoderConfig c, read_llama_family(f));
  TSR_RETURN_IF_ERROR(read_local_experts(f, c));
  return c;
}

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = [] {
    const std::vector<std::string_view> qwen2 = {"head_dim", "sliding_window", "use_sliding_window",
                                                 "max_window_layers", "layer_types"};
    std::vector<std::string_view> qwen2_moe = qwen2;
    qwen2_moe.insert(qwen2_moe.end(),
                     {"num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
                      "decoder_sparse_step", "mlp_only_layers"});
    const std::vector<std::string_view> deepseek = {
        "n_routed_experts", "n_shared_experts", "moe_intermediate_size", "first_k_dense_replace",
        "moe_layer_freq",   "q_lora_rank",      "kv_lora_rank",          "qk_nope_head_dim",
        "qk_rope_head_dim", "v_head_dim",       "attention_bias",        "num_nextn_predict_layers",
        "head_dim"};  // transformers saves head_dim = qk_rope_head_dim; MLA does not read it
    const std::vector<std::string_view> falcon = {"multi_query",    "new_decoder_architecture",
                                                  "parallel_attn",  "num_kv_heads",
                                                  "n_head_kv",      "alibi",
                                                  "bias",           "num_ln_in_parallel_attn",
                                                  "ffn_hidden_size"};
    return std::vector<Family>{
        {"gpt2", read_gpt2, {"n_inner"}},
        {"llama", read_llama_family, {"head_dim", "attention_bias", "mlp_bias"}},
        {"mistral", read_mistral, {"head_dim", "sliding_window"}},
        {"mixtral", read_mixtral, {"head_dim", "sliding_window", "num_local_experts"}},
        {"qwen2", read_qwen2, qwen2},
        {"qwen2_moe", read_qwen2_moe, qwen2_moe},
        {"deepseek_v2", read_deepseek, deepseek},
        {"deepseek_v3", read_deepseek, deepseek},
        {"gemma", read_gemma, {"head_dim", "attention_bias"}},
        {"falcon", read_falcon, falcon},
        {"RefinedWeb", read_falcon, falcon},
        {"RefinedWebModel", read_falcon, falcon},
    };
  }();
  return kFamilies;
}

}  // namespace tessera::ir::hf
