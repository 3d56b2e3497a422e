// GptModel's MoE layers: top-k routing (dropless: every token reaches its top_k experts), the
// per-expert MLPs as one GEMM group per expert over its rows of an expert-sorted buffer, and the
// weighted combine. The routing decision is read back to the host (T x top_k indices) to size
// the per-expert GEMMs; everything else stays on the device.
#include <algorithm>

#include "linear.h"
#include "model.h"

namespace tessera::gpt {

// Sorts the (token, j) slots by expert, stably, and uploads the maps: slot[t*k+j] = its row in
// the expert-sorted buffers, gather[row] = its token; fraction[e] = rows of e / (T*k). Also the
// load-balancing loss E * sum_e fraction[e] * mean_t probs[t, e] (without router_aux_coef).
Status GptModel::moe_route(const hal::Stream& s, int layer) {
  MoeActivations& m = block(layer).moe;
  const int64_t T = tokens(), k = config_.top_k, E = config_.experts;
  TSR_ASSIGN_OR_RETURN(m.top, download<int32_t>(s, m.top_index, size_t(T * k)));
  const std::vector<int32_t>& top = m.top;
  TSR_ASSIGN_OR_RETURN(std::vector<float> probs, download<float>(s, m.probs, size_t(T * E)));
  m.count.assign(size_t(E), 0);
  for (int32_t e : top) {
    if (e < 0 || e >= E) {
      return internal_error("MoE layer " + std::to_string(layer) + ": router chose expert " +
                            std::to_string(e) + " of " + std::to_string(E));
    }
    ++m.count[size_t(e)];
  }
  m.offset.assign(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e)
    m.offset[size_t(e)] = m.offset[size_t(e - 1)] + m.count[size_t(e - 1)];
  std::vector<int64_t> cursor = m.offset;
  std::vector<int32_t> slot(size_t(T * k)), gather(size_t(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t row = cursor[size_t(top[size_t(i)])]++;
    slot[size_t(i)] = int32_t(row);
    gather[size_t(row)] = int32_t(i / k);
  }
  std::vector<float> fraction(static_cast<size_t>(E));
  m.aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    fraction[size_t(e)] = float(double(m.count[size_t(e)]) / double(T * k));
    double mean_prob = 0;
    for (int64_t t = 0; t < T; ++t) mean_prob += probs[size_t(t * E + e)];
    m.aux += double(fraction[size_t(e)]) * mean_prob / double(T);
  }
  m.aux *= double(E);
  TSR_RETURN_IF_ERROR(upload(s, m.slot, slot));
  TSR_RETURN_IF_ERROR(upload(s, m.gather, gather));
  return upload(s, m.fraction, fraction);
}

uint64_t GptModel::routing_signature() const {
  uint64_t h = 1469598103934665603ull;
  for (const BlockActivations& b : a_.blocks) {
    for (int32_t e : b.moe.top) h = (h ^ uint64_t(uint32_t(e))) * 1099511628211ull;
  }
  return h;
}

Status GptModel::moe_forward(const hal::Stream& s, int layer) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  BlockActivations& b = block(layer);
  MoeActivations& m = b.moe;
  void* out = a_.resid[size_t(layer) + 1];
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden), f = uint64_t(ffn_l_);
  const uint64_t k = uint64_t(config_.top_k), E = uint64_t(config_.experts);
  TSR_RETURN_IF_ERROR(norm_forward(s, b.mid, p.norm2_w, p.norm2_b, b.y2, b.mean2, b.rstd2));
  TSR_RETURN_IF_ERROR(linear_forward(s, {tokens(), config_.hidden, config_.experts}, b.y2,
                                     params_.work(p.router), m.logits, act(), DType::kF32));
  TSR_RETURN_IF_ERROR(kernels_.router_forward(s, m.logits, m.probs, m.top_index, m.top_weight, T, E,
                                              k, config_.normalize_top_k ? 1 : 0));
  TSR_RETURN_IF_ERROR(moe_route(s, layer));
  TSR_RETURN_IF_ERROR(kernels_.gather_rows(s, b.y2, m.gather, m.xe, T * k, h, act_abi()));
  const size_t esize = hal::dtype_size(act());
  for (size_t e = 0; e < size_t(E); ++e) {
    const int64_t n = m.count[e];
    if (n == 0) continue;
    const ExpertParams& ep = p.experts[e];
    const uint64_t r0 = uint64_t(m.offset[e]);
    auto at = [&](void* base, uint64_t width) {
      return static_cast<char*>(base) + r0 * width * esize;
    };
    const LinearShape in_shape{n, config_.hidden, ffn_l_};
    TSR_RETURN_IF_ERROR(
        linear_forward(s, in_shape, at(m.xe, h), params_.work(ep.up), at(m.up, f), act(), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(linear_forward(s, in_shape, at(m.xe, h), params_.work(ep.gate),
                                         at(m.gate, f), act(), act()));
      TSR_RETURN_IF_ERROR(kernels_.swiglu_forward(s, at(m.gate, f), at(m.up, f), at(m.act, f),
                                                  uint64_t(n) * f, act_abi()));
    } else {
      TSR_RETURN_IF_ERROR(
          kernels_.gelu_forward(s, at(m.up, f), at(m.act, f), uint64_t(n) * f, act_abi()));
    }
    TSR_RETURN_IF_ERROR(linear_forward(s, {n, ffn_l_, config_.hidden}, at(m.act, f),
                                       params_.work(ep.down), at(m.out, h), act(), act()));
  }
  // The combine is linear, so the row-parallel partial sums are allreduced after it.
  TSR_RETURN_IF_ERROR(
      kernels_.combine_rows(s, m.out, m.slot, m.top_weight, out, T, k, h, act_abi()));
  TSR_RETURN_IF_ERROR(tp_sum(s, out, T * h, act(), "MoE output"));
  return kernels_.add(s, out, b.mid, out, T * h, act_abi());
}

Status GptModel::moe_backward(const hal::Stream& s, int layer, float weight) {
  const BlockParams& p = params_.layout().blocks[size_t(layer)];
  const BlockActivations& b = block(layer);
  const MoeActivations& m = b.moe;
  const uint64_t T = uint64_t(tokens()), h = uint64_t(config_.hidden), f = uint64_t(ffn_l_);
  const uint64_t k = uint64_t(config_.top_k), E = uint64_t(config_.experts);
  const size_t esize = hal::dtype_size(act());
  // g_.dx holds d(block output) = d(combined MoE output).
  TSR_RETURN_IF_ERROR(s.memset(g_.de_out, 0, T * k * h * esize));
  TSR_RETURN_IF_ERROR(kernels_.combine_backward(s, g_.dx, m.out, m.slot, m.top_weight, g_.de_out,
                                                g_.dweight, T, k, h, act_abi()));
  // m.out holds this rank's partial expert outputs: their dot products sum to the full one.
  TSR_RETURN_IF_ERROR(tp_sum(s, g_.dweight, T * k, DType::kF32, "MoE combine weight gradient"));
  for (size_t e = 0; e < size_t(E); ++e) {
    const int64_t n = m.count[e];
    if (n == 0) continue;
    const ExpertParams& ep = p.experts[e];
    const uint64_t r0 = uint64_t(m.offset[e]);
    auto at = [&](void* base, uint64_t width) {
      return static_cast<char*>(base) + r0 * width * esize;
    };
    const LinearShape down{n, ffn_l_, config_.hidden};
    TSR_RETURN_IF_ERROR(linear_backward_input(s, down, at(g_.de_out, h), params_.work(ep.down),
                                              at(g_.dh, f), act(), false));
    TSR_RETURN_IF_ERROR(linear_backward_weight(s, down, at(g_.de_out, h), at(m.act, f),
                                               params_.grad(ep.down), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(kernels_.swiglu_backward(s, at(m.gate, f), at(m.up, f), at(g_.dh, f),
                                                   at(g_.dgate, f), at(g_.dup, f), uint64_t(n) * f,
                                                   act_abi()));
    } else {
      TSR_RETURN_IF_ERROR(kernels_.gelu_backward(s, at(m.up, f), at(g_.dh, f), at(g_.dup, f),
                                                 uint64_t(n) * f, act_abi()));
    }
    const LinearShape in_shape{n, config_.hidden, ffn_l_};
    TSR_RETURN_IF_ERROR(linear_backward_input(s, in_shape, at(g_.dup, f), params_.work(ep.up),
                                              at(g_.dxe, h), act(), false));
    TSR_RETURN_IF_ERROR(linear_backward_weight(s, in_shape, at(g_.dup, f), at(m.xe, h),
                                               params_.grad(ep.up), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(linear_backward_input(s, in_shape, at(g_.dgate, f), params_.work(ep.gate),
                                                at(g_.dxe, h), act(), true));
      TSR_RETURN_IF_ERROR(linear_backward_weight(s, in_shape, at(g_.dgate, f), at(m.xe, h),
                                                 params_.grad(ep.gate), act()));
    }
  }
  // Scatter the expert-input gradients back to their tokens (the backward of gather_rows); rows
  // of experts with no tokens were never written, and no slot names them.
  TSR_RETURN_IF_ERROR(kernels_.combine_rows(s, g_.dxe, m.slot, nullptr, g_.dy, T, k, h, act_abi()));
  TSR_RETURN_IF_ERROR(tp_sum(s, g_.dy, T * h, act(), "MoE input gradient"));
  // The router is replicated and its gradient (from the allreduced dweight) too: added after.
  TSR_RETURN_IF_ERROR(kernels_.router_backward(s, m.probs, m.top_index, g_.dweight, m.fraction,
                                               g_.drouter, T, E, k, config_.normalize_top_k ? 1 : 0,
                                               config_.router_aux_coef * weight));
  TSR_RETURN_IF_ERROR(s.cast(g_.drouter_act, act(), g_.drouter, DType::kF32, T * E));
  const LinearShape router{tokens(), config_.hidden, config_.experts};
  TSR_RETURN_IF_ERROR(
      linear_backward_input(s, router, g_.drouter_act, params_.work(p.router), g_.dy, act(), true));
  TSR_RETURN_IF_ERROR(
      linear_backward_weight(s, router, g_.drouter_act, b.y2, params_.grad(p.router), act()));
  return norm_backward(s, g_.dy, b.mid, p.norm2_w, p.norm2_b, b.mean2, b.rstd2, g_.dx);
}

}  // namespace tessera::gpt
