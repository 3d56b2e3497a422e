#include "ep.h"

#include <algorithm>
#include <string>

namespace tessera::gpt {

Result<ParamLayout> expert_layout(const GptConfig& config, const ParamLayout& full, int ep_rank,
                                  int ep) {
  if (!config.moe()) {
    return invalid_argument(config.name + ": expert parallelism ep " + std::to_string(ep) +
                            " needs a MoE model (this one has no experts)");
  }
  if (ep < 1 || config.experts % ep != 0 || ep_rank < 0 || ep_rank >= ep) {
    return invalid_argument(config.name + ": expert parallelism ep " + std::to_string(ep) +
                            " does not divide experts " + std::to_string(config.experts));
  }
  const int64_t local = config.experts / ep, first = local * ep_rank;
  // Under pp (stage_layout) the blocks of other stages are empty: they hold no experts to shard.
  auto on_stage = [&](const BlockParams& b) { return !b.experts.empty(); };
  for (size_t l = 0; l < full.blocks.size(); ++l) {
    const size_t n = full.blocks[l].experts.size();
    if (n != 0 && n != size_t(config.experts)) {
      return internal_error(config.name + ": block " + std::to_string(l) + " of the layout holds " +
                            std::to_string(n) + " experts, the config " +
                            std::to_string(config.experts) + " (already sharded?)");
    }
  }
  // Which specs are whose: -1 not an expert tensor, else the expert's global index.
  std::vector<int64_t> expert_of(full.specs.size(), -1);
  for (const BlockParams& b : full.blocks) {
    for (size_t e = 0; e < b.experts.size(); ++e) {
      for (int index : {b.experts[e].gate, b.experts[e].up, b.experts[e].down})
        if (index >= 0) expert_of[size_t(index)] = int64_t(e);
    }
  }
  ParamLayout out;
  out.tp_rank = full.tp_rank;
  out.tp_size = full.tp_size;
  std::vector<int> moved(full.specs.size(), -1);
  auto keep = [&](size_t index) {
    ParamSpec spec = full.specs[index];
    spec.offset = out.total;
    out.total += spec.local_count();
    out.specs.push_back(std::move(spec));
    moved[index] = int(out.specs.size()) - 1;
  };
  for (size_t i = 0; i < full.specs.size(); ++i)
    if (expert_of[i] < 0) keep(i);
  for (const BlockParams& b : full.blocks) {
    if (!on_stage(b)) continue;
    for (int64_t e = first; e < first + local; ++e) {
      for (int index :
           {b.experts[size_t(e)].gate, b.experts[size_t(e)].up, b.experts[size_t(e)].down})
        if (index >= 0) keep(size_t(index));
    }
  }
  auto map = [&](int index) { return index < 0 ? -1 : moved[size_t(index)]; };
  out.wte = map(full.wte);
  out.wpe = map(full.wpe);
  out.head = map(full.head);
  out.final_w = map(full.final_w);
  out.final_b = map(full.final_b);
  for (const BlockParams& b : full.blocks) {
    BlockParams o = b;
    for (int* field :
         {&o.norm1_w, &o.norm1_b, &o.wq, &o.wk, &o.wv, &o.bq, &o.bk, &o.bv, &o.wo, &o.bo,
          &o.norm2_w, &o.norm2_b, &o.gate, &o.up, &o.down, &o.b_up, &o.b_down, &o.router})
      *field = map(*field);
    o.experts.clear();
    for (int64_t e = first; on_stage(b) && e < first + local; ++e) {
      const ExpertParams& x = b.experts[size_t(e)];
      o.experts.push_back({map(x.gate), map(x.up), map(x.down)});
    }
    out.blocks.push_back(std::move(o));
  }
  return out;
}

uint64_t expert_begin(const ParamLayout& layout) {
  uint64_t begin = layout.total;
  for (const BlockParams& b : layout.blocks) {
    for (const ExpertParams& x : b.experts) {
      for (int index : {x.gate, x.up, x.down})
        if (index >= 0) begin = std::min(begin, layout.at(index).offset);
    }
  }
  return begin;
}

Status allreduce_gradients(const ParallelGroups& groups, const hal::Stream& stream,
                           const ParamLayout& layout, void* data, DType dtype, const char* what) {
  if (groups.ep_size() == 1) {
    return allreduce_on(groups.dp, stream, data, layout.total, dtype, ReduceOp::kSum, what);
  }
  const uint64_t begin = expert_begin(layout);
  TSR_RETURN_IF_ERROR(allreduce_on(groups.dp, stream, data, begin, dtype, ReduceOp::kSum, what));
  void* experts = static_cast<char*>(data) + begin * hal::dtype_size(dtype);
  return allreduce_on(groups.expert_dp, stream, experts, layout.total - begin, dtype,
                      ReduceOp::kSum, "expert gradients");
}

}  // namespace tessera::gpt
