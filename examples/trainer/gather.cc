// Trainer::gather_params: rank 0 assembles the global parameters from the DP-rank-0 replica of
// every (stage, TP shard), in global order, with blocking point-to-point calls on the world
// communicator (each owner sends its shards in the same global order rank 0 receives them).
#include <cstring>

#include "dump.h"
#include "trainer.h"

namespace tessera::trainer {
namespace {

// Copies a local row-major slice into the global row-major tensor.
void place(const LocalParam& lp, const float* local, float* global) {
  if (lp.len.size() == 1) {
    std::memcpy(global + lp.offset[0], local, size_t(lp.len[0]) * sizeof(float));
    return;
  }
  const int64_t cols = lp.info.shape[1];
  for (int64_t i = 0; i < lp.len[0]; ++i) {
    std::memcpy(global + (lp.offset[0] + i) * cols + lp.offset[1], local + i * lp.len[1],
                size_t(lp.len[1]) * sizeof(float));
  }
}

}  // namespace

Result<uint64_t> Trainer::gather_params(const std::string& path) {
  const TrainPlan& plan = layout_.plan;
  const std::string where = "rank " + std::to_string(layout_.rank) + ": gathering parameters";
  std::vector<NamedTensor> all;
  for (const ParamInfo& info : model_params(options_.model)) {
    const int stage = layout_.stage_of_block(info.block);
    NamedTensor t;
    t.name = info.name;
    t.shape = info.shape;
    if (layout_.rank == 0) t.values.resize(size_t(info.elements()));
    for (int tp = 0; tp < plan.tp; ++tp) {
      const LocalParam lp = param_slice(info, plan.tp, tp);
      if (!lp.tp_sharded && tp > 0) continue;
      const int owner = layout_.rank_of(tp, 0, stage);
      const Param* mine = nullptr;
      if (owner == layout_.rank) {
        for (const Param& p : params_) {
          if (p.local.info.name == info.name) mine = &p;
        }
        if (mine == nullptr) return internal_error(where + ": " + info.name + " not held here");
      }
      if (layout_.rank == 0) {
        std::vector<float> buf(size_t(lp.elements()));
        if (owner == 0) {
          std::memcpy(buf.data(), mine->value(), buf.size() * sizeof(float));
        } else {
          Status s = world_->recv(buf.data(), buf.size(), hal::DType::kF32, owner);
          if (!s.ok()) return s.with_context(where + ": " + info.name);
        }
        place(lp, buf.data(), t.values.data());
      } else if (owner == layout_.rank) {
        Status s = world_->send(mine->value(), size_t(mine->count()), hal::DType::kF32, 0);
        if (!s.ok()) return s.with_context(where + ": " + info.name);
      }
    }
    all.push_back(std::move(t));
  }
  int64_t checksum = 0;
  if (layout_.rank == 0) {
    checksum = int64_t(params_checksum(all));
    if (!path.empty()) TSR_RETURN_IF_ERROR(write_params_file(path, all));
  }
  Status s = world_->broadcast(&checksum, &checksum, 1, hal::DType::kI64, 0);
  if (!s.ok()) return s.with_context(where + ": checksum broadcast");
  return uint64_t(checksum);
}

}  // namespace tessera::trainer
