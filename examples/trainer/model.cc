#include "model.h"

#include <cmath>

#include "tessera/ir/loaders.h"

namespace tessera::trainer {
namespace {

// SplitMix64: a counter-based generator, so any element can be drawn without drawing the others.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

double uniform(uint64_t k) {  // in (0, 1)
  return (double(k >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Box-Muller from two independent uniforms.
float normal(uint64_t k) {
  const double u1 = uniform(mix(k ^ 0x51ed270b27a3f6c1ULL));
  const double u2 = uniform(mix(k ^ 0x2545f4914f6cdd1dULL));
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

constexpr uint64_t kDataStream = 0xda7a, kTeacherStream = 0x7eac4e2, kParamStream = 0x9a2a;

}  // namespace

Result<ModelSpec> model_spec_preset(const std::string& name) {
  if (name == "tiny") return ModelSpec{32, 2, 0, 8};
  if (name == "small") return ModelSpec{64, 4, 0, 16};
  if (name == "medium") return ModelSpec{128, 8, 0, 32};
  if (name == "large") return ModelSpec{256, 8, 0, 64};
  return invalid_argument("model size '" + name + "': expected tiny, small, medium or large");
}

Status validate_spec(const ModelSpec& spec) {
  if (spec.hidden < 1 || spec.blocks < 1 || spec.classes < 2 || spec.ffn < 0) {
    return invalid_argument("model: hidden " + std::to_string(spec.hidden) + ", blocks " +
                            std::to_string(spec.blocks) + ", classes " +
                            std::to_string(spec.classes) +
                            " (need hidden >= 1, blocks >= 1, classes >= 2)");
  }
  return Status();
}

ir::Model model_ir(const ModelSpec& spec) {
  ir::Model m;
  m.name = "tessera-mlp-h" + std::to_string(spec.hidden) + "-l" + std::to_string(spec.blocks);
  for (int64_t b = 0; b < spec.blocks; ++b) {
    ir::Layer mlp;
    mlp.kind = ir::LayerKind::kMlp;
    mlp.hidden = spec.hidden;
    mlp.ffn = spec.ffn_size();
    mlp.activation = ir::MlpActivation::kGelu;
    mlp.bias = true;
    m.layers.push_back(mlp);
    m.block_of.push_back(int(b));
  }
  ir::Layer head;
  head.kind = ir::LayerKind::kLmHead;
  head.hidden = spec.hidden;
  head.vocab = spec.classes;
  m.layers.push_back(head);
  m.block_of.push_back(ir::kPostBlock);
  ir::finalize_model(m);
  return m;
}

int64_t ParamInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamInfo> model_params(const ModelSpec& spec) {
  const int64_t h = spec.hidden, f = spec.ffn_size();
  std::vector<ParamInfo> out;
  for (int b = 0; b < int(spec.blocks); ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    out.push_back({p + "w1", ParamKind::kW1, b, {h, f}});
    out.push_back({p + "b1", ParamKind::kB1, b, {f}});
    out.push_back({p + "w2", ParamKind::kW2, b, {f, h}});
    out.push_back({p + "b2", ParamKind::kB2, b, {h}});
  }
  out.push_back({"head.w", ParamKind::kHeadW, -1, {h, spec.classes}});
  out.push_back({"head.b", ParamKind::kHeadB, -1, {spec.classes}});
  for (size_t i = 0; i < out.size(); ++i) out[i].id = int(i);
  return out;
}

float initial_value(const ParamInfo& info, uint64_t seed, int64_t flat) {
  if (info.shape.size() == 1) return 0.0f;
  const double fan_in = double(info.shape[0]);
  return float(normal(key(seed, kParamStream, uint64_t(info.id), uint64_t(flat))) /
               std::sqrt(fan_in));
}

void make_inputs(const ModelSpec& spec, uint64_t seed, int64_t step, int64_t first, int64_t count,
                 float* out_x) {
  const int64_t h = spec.hidden;
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t sample = key(seed, kDataStream, uint64_t(step), uint64_t(first + j));
    for (int64_t i = 0; i < h; ++i) out_x[j * h + i] = normal(mix(sample ^ uint64_t(i)));
  }
}

void make_labels(const ModelSpec& spec, uint64_t seed, int64_t step, int64_t first, int64_t count,
                 int32_t* out_labels) {
  const int64_t h = spec.hidden;
  std::vector<float> x(size_t(h * count));
  make_inputs(spec, seed, step, first, count, x.data());
  // The teacher: argmax over classes of T tanh(x), T fixed by the seed.
  std::vector<float> teacher(size_t(h * spec.classes));
  for (int64_t c = 0; c < spec.classes; ++c) {
    for (int64_t i = 0; i < h; ++i) {
      teacher[size_t(c * h + i)] = normal(key(seed, kTeacherStream, uint64_t(c), uint64_t(i)));
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    int32_t best = 0;
    double best_score = -1e300;
    for (int64_t c = 0; c < spec.classes; ++c) {
      double score = 0;
      for (int64_t i = 0; i < h; ++i) {
        score += double(teacher[size_t(c * h + i)]) * std::tanh(double(x[size_t(j * h + i)]));
      }
      if (score > best_score) {
        best_score = score;
        best = int32_t(c);
      }
    }
    out_labels[j] = best;
  }
}

}  // namespace tessera::trainer
