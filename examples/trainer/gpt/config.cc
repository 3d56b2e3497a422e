#include "config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/ir/loaders.h"

namespace tessera::gpt {
namespace {

Status refuse(const ir::Model& model, size_t index, const std::string& why) {
  return invalid_argument(model.name + ": layer " + std::to_string(index) + " (" +
                          std::string(ir::layer_kind_name(model.layers[index].kind)) + "): " + why);
}

// Every layer of a kind must agree with the first one of that kind.
template <typename T>
Status same(const ir::Model& model, size_t index, const char* field, T seen, T& kept, bool& set) {
  if (!set) {
    kept = seen;
    set = true;
    return Status();
  }
  if (seen != kept)
    return refuse(model, index, std::string(field) + " differs from earlier layers");
  return Status();
}

}  // namespace

Result<GptConfig> config_from_model(const ir::Model& model) {
  GptConfig c;
  c.name = model.name;
  c.layers = model.num_blocks;
  bool have_embed = false, have_head = false, have_attn = false, have_mlp = false,
       have_norm = false;
  int64_t attention_layers = 0, mlp_layers = 0;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const ir::Layer& l = model.layers[i];
    switch (l.kind) {
      case ir::LayerKind::kEmbedding:
        if (have_embed) return refuse(model, i, "a second embedding");
        have_embed = true;
        c.vocab = l.vocab;
        c.positions = l.positions;
        c.hidden = l.hidden;
        break;
      case ir::LayerKind::kAttention: {
        ++attention_layers;
        // What the kernels do not implement is refused, never trained as something else.
        if (ir::is_mla(l)) {
          return refuse(model, i,
                        "multi-head latent attention (kv_lora_rank " +
                            std::to_string(l.kv_lora_rank) + ") is not implemented");
        }
        if (l.window > 0) {
          return refuse(model, i,
                        "sliding-window attention (window " + std::to_string(l.window) +
                            ") is not implemented");
        }
        if (l.qkv_bias && !l.bias) {
          return refuse(model, i, "biases on Q, K and V only (qkv_bias) are not implemented");
        }
        const bool first = !have_attn;
        TSR_RETURN_IF_ERROR(same(model, i, "heads", l.heads, c.heads, have_attn));
        if (!first) {
          if (l.kv_heads != c.kv_heads || l.head_dim != c.head_dim || l.bias != c.bias) {
            return refuse(model, i, "attention shape differs from earlier layers");
          }
        }
        c.kv_heads = l.kv_heads;
        c.head_dim = l.head_dim;
        c.bias = l.bias;
        break;
      }
      case ir::LayerKind::kMlp:
      case ir::LayerKind::kMoe: {
        ++mlp_layers;
        const bool moe = l.kind == ir::LayerKind::kMoe;
        const bool swiglu = l.activation == ir::MlpActivation::kSwiGlu;
        if (l.activation == ir::MlpActivation::kGeGlu) {
          return refuse(model, i, "gated GeLU (GeGLU) is not implemented");
        }
        if (l.shared_ffn > 0) {
          return refuse(model, i,
                        "shared experts (shared_ffn " + std::to_string(l.shared_ffn) +
                            ") are not implemented");
        }
        if (have_mlp && (l.ffn != c.ffn || moe != c.moe() || swiglu != c.swiglu ||
                         l.experts != c.experts || l.top_k != c.top_k)) {
          return refuse(model, i, "MLP/MoE shape differs from earlier layers");
        }
        have_mlp = true;
        c.ffn = l.ffn;
        c.swiglu = swiglu;
        c.experts = moe ? l.experts : 0;
        c.top_k = moe ? l.top_k : 0;
        if (moe && (l.top_k <= 0 || l.top_k > l.experts)) {
          return refuse(model, i, "top_k must be in [1, experts]");
        }
        break;
      }
      case ir::LayerKind::kNorm: {
        const NormKind kind =
            l.norm == ir::NormType::kRmsNorm ? NormKind::kRmsNorm : NormKind::kLayerNorm;
        if (have_norm && kind != c.norm) return refuse(model, i, "norm type differs");
        have_norm = true;
        c.norm = kind;
        break;
      }
      case ir::LayerKind::kLmHead:
        if (have_head) return refuse(model, i, "a second LM head");
        have_head = true;
        c.tied = l.tied;
        if (l.vocab != c.vocab) return refuse(model, i, "vocab differs from the embedding");
        break;
    }
  }
  if (!have_embed || !have_head) {
    return invalid_argument(model.name + ": the GPT trainer needs an embedding and an LM head");
  }
  if (attention_layers != c.layers || mlp_layers != c.layers) {
    return invalid_argument(
        model.name + ": every block needs one attention and one MLP/MoE layer (" +
        std::to_string(c.layers) + " blocks, " + std::to_string(attention_layers) + " attention, " +
        std::to_string(mlp_layers) + " MLP)");
  }
  if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0) {
    return invalid_argument(model.name + ": heads " + std::to_string(c.heads) +
                            " not a multiple of kv_heads " + std::to_string(c.kv_heads));
  }
  if (c.rope() && c.head_dim % 2 != 0) {
    return invalid_argument(model.name + ": rotary embeddings need an even head_dim, got " +
                            std::to_string(c.head_dim));
  }
  return c;
}

Result<GptConfig> config_from_hf_json(std::string_view json_text, std::string_view source) {
  TSR_ASSIGN_OR_RETURN(ir::Model model, ir::model_from_hf_config(json_text, source));
  TSR_ASSIGN_OR_RETURN(GptConfig c, config_from_model(model));
  // model_from_hf_config accepted the text, so it parses.
  const auto json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  const auto number = [&](const char* key, double fallback) {
    return json.contains(key) && json[key].is_number() ? json[key].get<double>() : fallback;
  };
  c.norm_eps =
      float(number("rms_norm_eps", number("layer_norm_eps", number("layer_norm_epsilon", 1e-5))));
  c.rope_theta = float(number("rope_theta", 10000.0));
  c.router_aux_coef = float(number("router_aux_loss_coef", 0.01));
  if (json.contains("norm_topk_prob") && json["norm_topk_prob"].is_boolean()) {
    c.normalize_top_k = json["norm_topk_prob"].get<bool>();
  }
  return c;
}

Result<GptConfig> load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return config_from_hf_json(text.str(), path);
}

std::string describe(const GptConfig& c) {
  std::ostringstream s;
  s << c.name << ": h=" << c.hidden << " L=" << c.layers << " a=" << c.heads << "/" << c.kv_heads
    << " d=" << c.head_dim << " f=" << c.ffn << " V=" << c.vocab << " "
    << (c.rope() ? "rope" : "learned-pos") << " " << (c.swiglu ? "swiglu" : "gelu") << " "
    << (c.norm == NormKind::kRmsNorm ? "rms" : "layernorm") << " " << (c.tied ? "tied" : "untied")
    << " ";
  if (c.moe()) {
    s << "moe " << c.experts << "x top" << c.top_k;
  } else {
    s << "dense";
  }
  return s.str();
}

}  // namespace tessera::gpt
