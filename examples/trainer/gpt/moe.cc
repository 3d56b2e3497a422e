// GptModel's MoE layers: top-k routing (dropless: every token reaches its top_k experts), the
// per-expert MLPs as one GEMM group per expert over its rows of an expert-sorted buffer, and the
// weighted combine. The routing decision is read back to the host (T x top_k indices) to size
// the per-expert GEMMs; everything else stays on the device.
//
// Expert parallelism (ep.h): the expert-sorted buffer becomes the all-to-all's send buffer,
// [E experts][C rows][h] with C = T (a source rank's capacity per expert: a token picks an expert
// at most once, so nothing is ever dropped and a 1-rank run computes the same tokens). Its
// all-to-all delivers [ep sources][E/ep local experts][C][h] to each rank, whose expert GEMMs run
// per (local expert, source) over the rows that source sent (the counts travel in a small
// all-to-all first); a second all-to-all returns the outputs to the sender's layout, where the
// combine reads them. The backward runs the same two exchanges in reverse.
#include <algorithm>

#include "linear.h"
#include "model.h"

namespace tessera::gpt {
namespace {

// One GEMM group's rows: `n` rows of local expert `expert` from row `row` of the expert buffers.
struct ExpertRows {
  size_t expert;
  uint64_t row;
  int64_t n;
};

// Without ep: expert e's rows of the sorted buffer. With ep: per local expert, each source's
// block of the received buffer [source][local expert][C].
std::vector<ExpertRows> expert_rows(const MoeActivations& m, int ep, int64_t capacity) {
  std::vector<ExpertRows> rows;
  if (ep == 1) {
    for (size_t e = 0; e < m.count.size(); ++e)
      if (m.count[e] > 0) rows.push_back({e, uint64_t(m.offset[e]), m.count[e]});
    return rows;
  }
  const size_t local = m.received.size() / size_t(ep);
  for (size_t j = 0; j < local; ++j) {
    for (size_t source = 0; source < size_t(ep); ++source) {
      const int64_t n = m.received[source * local + j];
      if (n > 0) rows.push_back({j, uint64_t(source * local + j) * uint64_t(capacity), n});
    }
  }
  return rows;
}

}  // namespace

// Sorts the (token, j) slots by expert, stably, and uploads the maps: slot[t*k+j] = its row in
// the expert-sorted buffers, gather[row] = its token (-1: a padding row under ep); fraction[e] =
// rows of e / (T*k). Also the load-balancing loss E * sum_e fraction[e] * mean_t probs[t, e]
// (without router_aux_coef). Under ep, expert e's rows start at e * C and the counts are
// exchanged so that each rank knows what it receives (MoeActivations::received).
Status GptModel::moe_route(const hal::Stream& s, int layer) {
  MoeActivations& m = block(layer).moe;
  const int64_t T = tokens(), k = config_.top_k, E = config_.experts;
  const int ep = groups_.ep_size();
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
  for (int64_t e = 1; e < E; ++e) {
    m.offset[size_t(e)] = ep == 1 ? m.offset[size_t(e - 1)] + m.count[size_t(e - 1)] : e * T;
  }
  std::vector<int64_t> cursor = m.offset;
  std::vector<int32_t> slot(size_t(T * k)), gather(size_t(ep == 1 ? T * k : E * T), -1);
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
  TSR_RETURN_IF_ERROR(upload(s, m.fraction, fraction));
  if (ep == 1) return Status();
  // What this rank sends each expert, to the expert's owner: [E] = [ep][E/ep].
  const std::vector<int32_t> sent(m.count.begin(), m.count.end());
  TSR_RETURN_IF_ERROR(upload(s, g_.ep_counts, sent));
  TSR_RETURN_IF_ERROR(alltoall_on(groups_.ep, s, g_.ep_counts, g_.ep_counts + E, uint64_t(E / ep),
                                  DType::kI32, "MoE expert counts"));
  TSR_ASSIGN_OR_RETURN(std::vector<int32_t> received,
                       download<int32_t>(s, g_.ep_counts + E, size_t(E)));
  m.received.assign(received.begin(), received.end());
  return Status();
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
  const int ep = groups_.ep_size();
  TSR_RETURN_IF_ERROR(norm_forward(s, b.mid, p.norm2_w, p.norm2_b, b.y2, b.mean2, b.rstd2));
  TSR_RETURN_IF_ERROR(linear_forward(s, {tokens(), config_.hidden, config_.experts}, b.y2,
                                     params_.work(p.router), m.logits, act(), DType::kF32));
  TSR_RETURN_IF_ERROR(kernels_.router_forward(s, m.logits, m.probs, m.top_index, m.top_weight, T, E,
                                              k, config_.normalize_top_k ? 1 : 0));
  TSR_RETURN_IF_ERROR(moe_route(s, layer));
  // Under ep the tokens are sorted into g_.dxe (free during the forward), sent, and the expert
  // outputs written to g_.de_out and sent back into m.out; m.xe holds what this rank received.
  const uint64_t rows = ep == 1 ? T * k : E * T, per_peer = rows / uint64_t(ep) * h;
  void* sorted = ep == 1 ? m.xe : g_.dxe;
  void* expert_out = ep == 1 ? m.out : g_.de_out;
  TSR_RETURN_IF_ERROR(kernels_.gather_rows(s, b.y2, m.gather, sorted, rows, h, act_abi()));
  if (ep > 1) {
    TSR_RETURN_IF_ERROR(
        alltoall_on(groups_.ep, s, sorted, m.xe, per_peer, act(), "MoE token dispatch"));
  }
  const size_t esize = hal::dtype_size(act());
  for (const ExpertRows& r : expert_rows(m, ep, tokens())) {
    const int64_t n = r.n;
    const ExpertParams& ep_params = p.experts[r.expert];
    auto at = [&](void* base, uint64_t width) {
      return static_cast<char*>(base) + r.row * width * esize;
    };
    const LinearShape in_shape{n, config_.hidden, ffn_l_};
    TSR_RETURN_IF_ERROR(linear_forward(s, in_shape, at(m.xe, h), params_.work(ep_params.up),
                                       at(m.up, f), act(), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(linear_forward(s, in_shape, at(m.xe, h), params_.work(ep_params.gate),
                                         at(m.gate, f), act(), act()));
      TSR_RETURN_IF_ERROR(kernels_.swiglu_forward(s, at(m.gate, f), at(m.up, f), at(m.act, f),
                                                  uint64_t(n) * f, act_abi()));
    } else {
      TSR_RETURN_IF_ERROR(
          kernels_.gelu_forward(s, at(m.up, f), at(m.act, f), uint64_t(n) * f, act_abi()));
    }
    TSR_RETURN_IF_ERROR(linear_forward(s, {n, ffn_l_, config_.hidden}, at(m.act, f),
                                       params_.work(ep_params.down), at(expert_out, h), act(),
                                       act()));
  }
  if (ep > 1) {
    TSR_RETURN_IF_ERROR(
        alltoall_on(groups_.ep, s, expert_out, m.out, per_peer, act(), "MoE expert outputs"));
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
  const int ep = groups_.ep_size();
  const uint64_t rows = ep == 1 ? T * k : E * T, per_peer = rows / uint64_t(ep) * h;
  const size_t esize = hal::dtype_size(act());
  // g_.dx holds d(block output) = d(combined MoE output).
  TSR_RETURN_IF_ERROR(s.memset(g_.de_out, 0, rows * h * esize));
  TSR_RETURN_IF_ERROR(kernels_.combine_backward(s, g_.dx, m.out, m.slot, m.top_weight, g_.de_out,
                                                g_.dweight, T, k, h, act_abi()));
  // m.out holds this rank's partial expert outputs: their dot products sum to the full one.
  TSR_RETURN_IF_ERROR(tp_sum(s, g_.dweight, T * k, DType::kF32, "MoE combine weight gradient"));
  // The expert GEMMs read d(expert output) from dout and write d(expert input) to din, on the
  // received rows under ep (dout arrives in g_.dxe; din, in g_.de_out, is then sent back).
  void* dout = ep == 1 ? g_.de_out : g_.dxe;
  void* din = ep == 1 ? g_.dxe : g_.de_out;
  if (ep > 1) {
    TSR_RETURN_IF_ERROR(alltoall_on(groups_.ep, s, g_.de_out, dout, per_peer, act(),
                                    "MoE expert output gradients"));
  }
  for (const ExpertRows& r : expert_rows(m, ep, tokens())) {
    const int64_t n = r.n;
    const ExpertParams& ep_params = p.experts[r.expert];
    auto at = [&](void* base, uint64_t width) {
      return static_cast<char*>(base) + r.row * width * esize;
    };
    const LinearShape down{n, ffn_l_, config_.hidden};
    TSR_RETURN_IF_ERROR(linear_backward_input(s, down, at(dout, h), params_.work(ep_params.down),
                                              at(g_.dh, f), act(), false));
    TSR_RETURN_IF_ERROR(linear_backward_weight(s, down, at(dout, h), at(m.act, f),
                                               params_.grad(ep_params.down), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(kernels_.swiglu_backward(s, at(m.gate, f), at(m.up, f), at(g_.dh, f),
                                                   at(g_.dgate, f), at(g_.dup, f), uint64_t(n) * f,
                                                   act_abi()));
    } else {
      TSR_RETURN_IF_ERROR(kernels_.gelu_backward(s, at(m.up, f), at(g_.dh, f), at(g_.dup, f),
                                                 uint64_t(n) * f, act_abi()));
    }
    const LinearShape in_shape{n, config_.hidden, ffn_l_};
    TSR_RETURN_IF_ERROR(linear_backward_input(
        s, in_shape, at(g_.dup, f), params_.work(ep_params.up), at(din, h), act(), false));
    TSR_RETURN_IF_ERROR(linear_backward_weight(s, in_shape, at(g_.dup, f), at(m.xe, h),
                                               params_.grad(ep_params.up), act()));
    if (config_.swiglu) {
      TSR_RETURN_IF_ERROR(linear_backward_input(
          s, in_shape, at(g_.dgate, f), params_.work(ep_params.gate), at(din, h), act(), true));
      TSR_RETURN_IF_ERROR(linear_backward_weight(s, in_shape, at(g_.dgate, f), at(m.xe, h),
                                                 params_.grad(ep_params.gate), act()));
    }
  }
  if (ep > 1) {
    TSR_RETURN_IF_ERROR(
        alltoall_on(groups_.ep, s, din, g_.dxe, per_peer, act(), "MoE expert input gradients"));
  }
  // Scatter the expert-input gradients back to their tokens (the backward of gather_rows); rows
  // of experts with no tokens (and padding rows) were never written, and no slot names them.
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
