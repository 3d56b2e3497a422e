#include "params.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tessera::gpt {
namespace {

constexpr float kInitStd = 0.02f;

class LayoutBuilder {
 public:
  LayoutBuilder(ParamLayout& layout) : layout_(layout) {}

  int add(std::string name, int64_t rows, int64_t cols, Split split, float std, float value,
          bool decay) {
    ParamSpec s;
    s.name = std::move(name);
    s.rows = rows;
    s.cols = cols;
    s.split = split;
    const int64_t tp = layout_.tp_size;
    s.local_rows = split == Split::kRows ? rows / tp : rows;
    s.local_cols = split == Split::kCols ? cols / tp : cols;
    s.offset = layout_.total;
    s.init_std = std;
    s.init_value = value;
    s.decay = decay;
    layout_.total += s.local_count();
    layout_.specs.push_back(std::move(s));
    return int(layout_.specs.size()) - 1;
  }
  int matrix(std::string name, int64_t out, int64_t in, Split split, float std) {
    return add(std::move(name), out, in, split, std, 0, true);
  }
  int vector(std::string name, int64_t n, Split split, float value) {
    return add(std::move(name), n, 1, split, 0, value, false);
  }

 private:
  ParamLayout& layout_;
};

Status divides(const GptConfig& c, const char* what, int64_t size, int tp) {
  if (size % tp == 0) return Status();
  return invalid_argument(c.name + ": tensor parallelism " + std::to_string(tp) +
                          " does not divide " + what + " " + std::to_string(size));
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : text) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

}  // namespace

Result<ParamLayout> make_layout(const GptConfig& c, int tp_rank, int tp_size) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return invalid_argument("tensor-parallel rank " + std::to_string(tp_rank) + " of " +
                            std::to_string(tp_size));
  }
  TSR_RETURN_IF_ERROR(divides(c, "heads", c.heads, tp_size));
  TSR_RETURN_IF_ERROR(divides(c, "kv_heads", c.kv_heads, tp_size));
  TSR_RETURN_IF_ERROR(divides(c, "ffn", c.ffn, tp_size));
  TSR_RETURN_IF_ERROR(divides(c, "vocab", c.vocab, tp_size));
  ParamLayout layout;
  layout.tp_rank = tp_rank;
  layout.tp_size = tp_size;
  LayoutBuilder b(layout);
  const bool ln_bias = c.norm == NormKind::kLayerNorm;
  const int64_t h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  // Residual-branch outputs start smaller so the stream's variance does not grow with depth
  // (GPT-2's 1/sqrt(2L) scaling).
  const float out_std = kInitStd / std::sqrt(2.0f * float(c.layers));
  layout.wte = b.matrix("embed.wte", c.vocab, h, Split::kRows, kInitStd);
  if (!c.rope()) layout.wpe = b.matrix("embed.wpe", c.positions, h, Split::kReplicated, kInitStd);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    BlockParams bp;
    bp.norm1_w = b.vector(p + "norm1.w", h, Split::kReplicated, 1.0f);
    if (ln_bias) bp.norm1_b = b.vector(p + "norm1.b", h, Split::kReplicated, 0.0f);
    bp.wq = b.matrix(p + "attn.wq", q, h, Split::kRows, kInitStd);
    bp.wk = b.matrix(p + "attn.wk", kv, h, Split::kRows, kInitStd);
    bp.wv = b.matrix(p + "attn.wv", kv, h, Split::kRows, kInitStd);
    if (c.bias) {
      bp.bq = b.vector(p + "attn.bq", q, Split::kRows, 0.0f);
      bp.bk = b.vector(p + "attn.bk", kv, Split::kRows, 0.0f);
      bp.bv = b.vector(p + "attn.bv", kv, Split::kRows, 0.0f);
    }
    bp.wo = b.matrix(p + "attn.wo", h, q, Split::kCols, out_std);
    if (c.bias) bp.bo = b.vector(p + "attn.bo", h, Split::kReplicated, 0.0f);
    bp.norm2_w = b.vector(p + "norm2.w", h, Split::kReplicated, 1.0f);
    if (ln_bias) bp.norm2_b = b.vector(p + "norm2.b", h, Split::kReplicated, 0.0f);
    if (c.moe()) {
      // Experts carry no biases (Mixtral); the router is replicated on every tp rank.
      bp.router = b.matrix(p + "moe.router", c.experts, h, Split::kReplicated, kInitStd);
      for (int64_t e = 0; e < c.experts; ++e) {
        const std::string x = p + "moe.expert" + std::to_string(e) + ".";
        ExpertParams ep;
        if (c.swiglu) ep.gate = b.matrix(x + "gate", c.ffn, h, Split::kRows, kInitStd);
        ep.up = b.matrix(x + "up", c.ffn, h, Split::kRows, kInitStd);
        ep.down = b.matrix(x + "down", h, c.ffn, Split::kCols, out_std);
        bp.experts.push_back(ep);
      }
    } else {
      if (c.swiglu) bp.gate = b.matrix(p + "mlp.gate", c.ffn, h, Split::kRows, kInitStd);
      bp.up = b.matrix(p + "mlp.up", c.ffn, h, Split::kRows, kInitStd);
      bp.down = b.matrix(p + "mlp.down", h, c.ffn, Split::kCols, out_std);
      if (c.bias) {
        bp.b_up = b.vector(p + "mlp.b_up", c.ffn, Split::kRows, 0.0f);
        bp.b_down = b.vector(p + "mlp.b_down", h, Split::kReplicated, 0.0f);
      }
    }
    layout.blocks.push_back(std::move(bp));
  }
  layout.final_w = b.vector("final_norm.w", h, Split::kReplicated, 1.0f);
  if (ln_bias) layout.final_b = b.vector("final_norm.b", h, Split::kReplicated, 0.0f);
  layout.head = c.tied ? layout.wte : b.matrix("head.w", c.vocab, h, Split::kRows, kInitStd);
  return layout;
}

std::vector<float> initial_value(const ParamSpec& spec, uint64_t seed) {
  const size_t n = size_t(spec.rows) * size_t(spec.cols);
  std::vector<float> out(n, spec.init_value);
  if (spec.init_std <= 0) return out;
  uint64_t state = seed ^ fnv1a(spec.name);
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    // Box-Muller on two 53-bit uniforms in (0, 1].
    const double u1 = double((splitmix64(state) >> 11) + 1) * 0x1.0p-53;
    const double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)) * spec.init_std;
    out[i] = float(r * std::cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = float(r * std::sin(two_pi * u2));
  }
  return out;
}

std::vector<float> shard_of(const ParamSpec& spec, std::span<const float> full, int tp_rank,
                            int tp_size) {
  const int64_t rows = spec.split == Split::kRows ? spec.rows / tp_size : spec.rows;
  const int64_t cols = spec.split == Split::kCols ? spec.cols / tp_size : spec.cols;
  const int64_t row0 = spec.split == Split::kRows ? tp_rank * rows : 0;
  const int64_t col0 = spec.split == Split::kCols ? tp_rank * cols : 0;
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[size_t(r * cols + c)] = full[size_t((row0 + r) * spec.cols + col0 + c)];
    }
  }
  return out;
}

Result<Params> Params::create_sharded(const hal::Device& device, ParamLayout layout, DType act,
                                      ShardLayout shards, ShardOptions options) {
  if (act != DType::kF32 && act != DType::kBF16 && act != DType::kF16) {
    return invalid_argument("GPT parameters: the activation dtype must be f32, bf16 or f16");
  }
  Params p;
  p.layout_ = std::move(layout);
  p.act_ = act;
  TSR_RETURN_IF_ERROR(p.shard_state(device, std::move(shards), options));
  return p;
}

Result<Params> Params::create(const hal::Device& device, ParamLayout layout, DType act) {
  if (act != DType::kF32 && act != DType::kBF16 && act != DType::kF16) {
    return invalid_argument("GPT parameters: the activation dtype must be f32, bf16 or f16");
  }
  Params p;
  p.layout_ = std::move(layout);
  p.act_ = act;
  const size_t n = std::max<size_t>(p.layout_.total, 1);
  TSR_ASSIGN_OR_RETURN(p.master_, device.allocate(n * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(p.work_, device.allocate(n * hal::dtype_size(act)));
  TSR_ASSIGN_OR_RETURN(p.grad_, device.allocate(n * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(p.m_, device.allocate(n * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(p.v_, device.allocate(n * sizeof(float)));
  return p;
}

float* Params::master(int index) const {
  return index < 0 ? nullptr : master_base() + layout_.at(index).offset;
}
float* Params::grad(int index) const {
  if (index < 0) return nullptr;
  if (!sharded()) return grad_base() + layout_.at(index).offset;
  const int unit = shards_.unit_of[size_t(index)];
  float* base = grad_at_[size_t(unit)];
  return base ? base + (layout_.at(index).offset - shards_.units[size_t(unit)].begin) : nullptr;
}
void* Params::work(int index) const {
  if (index < 0) return nullptr;
  const size_t esize = hal::dtype_size(act_);
  if (!sharded()) return static_cast<char*>(work_.data()) + layout_.at(index).offset * esize;
  const int unit = shards_.unit_of[size_t(index)];
  char* base = work_at_[size_t(unit)];
  return base ? base + (layout_.at(index).offset - shards_.units[size_t(unit)].begin) * esize
              : nullptr;
}

float* Params::shard_grad(const ShardPiece& p) const {
  if (shard_options_.grad) return grad_base() + p.at;
  return grad_base() + shards_.padded_offset(layout_, p.tensor) + p.first;
}
void* Params::shard_work(const ShardPiece& p) const {
  const size_t esize = hal::dtype_size(act_);
  const uint64_t at =
      shard_options_.work ? p.at : shards_.padded_offset(layout_, p.tensor) + p.first;
  return static_cast<char*>(work_.data()) + at * esize;
}

Status Params::shard_state(const hal::Device& device, ShardLayout shards, ShardOptions options) {
  if (shards.units.empty() || shards.unit_of.size() != layout_.specs.size() ||
      shards.padded < layout_.total) {
    return invalid_argument("Params::shard_state: " + std::to_string(shards.units.size()) +
                            " units, " + std::to_string(shards.padded) + " padded elements for " +
                            std::to_string(layout_.total) + " parameters in " +
                            std::to_string(layout_.specs.size()) + " tensors");
  }
  // Release before allocating, so the full-size buffers are not held twice.
  master_ = {};
  m_ = {};
  v_ = {};
  grad_ = {};
  work_ = {};
  const uint64_t shard = std::max<uint64_t>(shards.shard, 1);
  const size_t esize = hal::dtype_size(act_);
  TSR_ASSIGN_OR_RETURN(master_, device.allocate(shard * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(m_, device.allocate(shard * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(v_, device.allocate(shard * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(grad_, device.allocate((options.grad ? shard : shards.padded) * 4));
  TSR_ASSIGN_OR_RETURN(work_, device.allocate((options.work ? shard : shards.padded) * esize));
  if (options.grad) {
    TSR_ASSIGN_OR_RETURN(grad_scratch_, device.allocate(options.grad_scratch * sizeof(float)));
  }
  if (options.work) {
    TSR_ASSIGN_OR_RETURN(work_scratch_, device.allocate(options.work_scratch * esize));
  }
  grad_at_.assign(shards.units.size(), nullptr);
  work_at_.assign(shards.units.size(), nullptr);
  for (size_t u = 0; u < shards.units.size(); ++u) {
    const uint64_t at = shards.units[u].padded_begin;
    if (!options.grad) grad_at_[u] = grad_base() + at;
    if (!options.work) work_at_[u] = static_cast<char*>(work_.data()) + at * esize;
  }
  shards_ = std::move(shards);
  shard_options_ = options;
  return Status();
}

// Sharded: master = the rank's slices; the working copy = cast(values), whole (padded per unit)
// or the rank's slices (zero 3). Whole units are staged in f32 through the gradient memory
// (the whole gradient, or ZeRO-2's scratch, which holds any unit), cleared afterwards.
Status Params::upload_sharded(const hal::Stream& stream, const std::vector<float>& flat) const {
  std::vector<float> shard(shards_.shard, 0.0f);
  float* staging = shard_options_.grad ? grad_scratch() : grad_base();
  const size_t esize = hal::dtype_size(act_);
  for (const ShardUnit& u : shards_.units) {
    std::vector<float> padded(u.padded, 0.0f);
    std::copy_n(flat.begin() + std::ptrdiff_t(u.begin), u.count, padded.begin());
    std::copy_n(padded.begin() + std::ptrdiff_t(uint64_t(shards_.dp_rank) * u.slice), u.slice,
                shard.begin() + std::ptrdiff_t(u.shard_at));
    if (shard_options_.work) continue;
    TSR_RETURN_IF_ERROR(upload(stream, staging, padded));
    TSR_RETURN_IF_ERROR(stream.cast(static_cast<char*>(work_.data()) + u.padded_begin * esize, act_,
                                    staging, DType::kF32, u.padded));
  }
  TSR_RETURN_IF_ERROR(upload(stream, master_.data(), shard));
  if (shard_options_.work) {
    TSR_RETURN_IF_ERROR(stream.cast(work_.data(), act_, master_.data(), DType::kF32, shard.size()));
  }
  TSR_RETURN_IF_ERROR(zero_grads(stream));
  // ZeRO-2/3 keep their gradient scratch zero while no unit is bound to it (zero.h).
  if (grad_scratch_) {
    TSR_RETURN_IF_ERROR(stream.memset(grad_scratch_.data(), 0, grad_scratch_.size()));
  }
  return stream.synchronize();
}

Status Params::init(const hal::Stream& stream, uint64_t seed) {
  std::vector<float> flat(layout_.total);
  for (const ParamSpec& spec : layout_.specs) {
    const std::vector<float> full = initial_value(spec, seed);
    const std::vector<float> local = shard_of(spec, full, layout_.tp_rank, layout_.tp_size);
    std::copy(local.begin(), local.end(), flat.begin() + std::ptrdiff_t(spec.offset));
  }
  const size_t bytes = (sharded() ? shards_.shard : layout_.total) * sizeof(float);
  TSR_RETURN_IF_ERROR(stream.memset(m_.data(), 0, bytes));
  TSR_RETURN_IF_ERROR(stream.memset(v_.data(), 0, bytes));
  if (sharded()) return upload_sharded(stream, flat);
  TSR_RETURN_IF_ERROR(upload(stream, master_.data(), flat));
  TSR_RETURN_IF_ERROR(zero_grads(stream));
  return refresh_work(stream);
}

Status Params::zero_grads(const hal::Stream& stream) const {
  return stream.memset(grad_.data(), 0, grad_.size());
}

Status Params::refresh_work(const hal::Stream& stream) const {
  if (sharded()) {
    return failed_precondition("Params::refresh_work: master is sharded over dp (ZeRO)");
  }
  return stream.cast(work_.data(), act_, master_.data(), DType::kF32, layout_.total);
}

Result<std::vector<float>> Params::download_master(const hal::Stream& stream) const {
  if (sharded()) {
    return failed_precondition("Params::download_master: master is sharded over dp (ZeRO)");
  }
  return download<float>(stream, master_.data(), layout_.total);
}
Result<std::vector<float>> Params::download_grads(const hal::Stream& stream) const {
  if (sharded()) {
    return failed_precondition("Params::download_grads: the gradients are sharded over dp (ZeRO)");
  }
  return download<float>(stream, grad_.data(), layout_.total);
}
Status Params::upload_master(const hal::Stream& stream, const std::vector<float>& values) const {
  if (values.size() != layout_.total) {
    return invalid_argument("Params::upload_master: " + std::to_string(values.size()) +
                            " values for " + std::to_string(layout_.total) + " parameters");
  }
  if (sharded()) return upload_sharded(stream, values);
  TSR_RETURN_IF_ERROR(upload(stream, master_.data(), values));
  TSR_RETURN_IF_ERROR(refresh_work(stream));
  return stream.synchronize();
}

}  // namespace tessera::gpt
