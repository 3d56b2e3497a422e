// The decoder's parameters on device memory, in one flat layout per rank:
//   master  f32   the weights AdamW updates
//   work    act   the working copy the forward and backward read (bf16, or f32 for tight checks);
//                 rewritten from master by every optimizer step
//   grad    f32   gradients; accumulate across micro-batches, zeroed by zero_grads()
//   m, v    f32   AdamW moments
// One flat buffer per role makes the optimizer, clipping and the data-parallel allreduce one
// span each; a tensor is an offset into it. Under ZeRO (shard_state, zero.h) a buffer may hold
// only this dp rank's shard, and grad() / work() of a tensor point wherever its unit is bound.
//
// Weights are stored as PyTorch does, row-major [out, in] (y = x W^T), so a column-parallel split
// (QKV, gate, up, vocab-parallel embedding and head) takes contiguous rows of the full matrix and
// a row-parallel split (attention out, MLP down) takes a column range. The tied LM head is the
// token embedding itself ([vocab, hidden] is [out, in] of the head).
//
// Initialisation is a pure function of (seed, tensor name, full shape): every tensor is generated
// whole on the host and each tensor-parallel rank keeps its shard, so any tp degree starts from
// the weights of the 1-rank run. Move-only; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config.h"
#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/platform.h"
#include "tessera/hal/stream.h"

namespace tessera::gpt {

using hal::DType;
using hal::ReduceOp;

// How tensor parallelism divides a tensor of full shape [rows, cols].
enum class Split {
  kReplicated,  // every tp rank holds all of it (norms, row-parallel biases, router, positions)
  kRows,        // rank r holds rows [r * rows/tp, (r+1) * rows/tp): column-parallel linears
  kCols,        // rank r holds columns [r * cols/tp, ...): row-parallel linears
};

struct ParamSpec {
  std::string name;  // "block1.attn.wq", "embed.wte", ...
  int64_t rows = 0;  // full shape (1-D tensors: rows = length, cols = 1)
  int64_t cols = 0;
  Split split = Split::kReplicated;
  int64_t local_rows = 0;  // this rank's shard
  int64_t local_cols = 0;
  uint64_t offset = 0;  // elements into the flat buffers
  float init_std = 0;   // > 0: normal(0, init_std); else the constant init_value
  float init_value = 0;
  bool decay = false;  // AdamW weight decay applies (matrices, not norms or biases)

  uint64_t local_count() const { return uint64_t(local_rows) * uint64_t(local_cols); }
};

// Indices into ParamLayout::specs; -1 where the model has no such tensor.
struct ExpertParams {
  int gate = -1, up = -1, down = -1;
};
struct BlockParams {
  int norm1_w = -1, norm1_b = -1;
  int wq = -1, wk = -1, wv = -1, bq = -1, bk = -1, bv = -1, wo = -1, bo = -1;
  int norm2_w = -1, norm2_b = -1;
  int gate = -1, up = -1, down = -1, b_up = -1, b_down = -1;  // dense MLP (gate: SwiGLU only)
  int router = -1;                                            // MoE: [experts, hidden]
  std::vector<ExpertParams> experts;
};

struct ParamLayout {
  std::vector<ParamSpec> specs;
  uint64_t total = 0;                                             // local elements
  int wte = -1, wpe = -1, head = -1, final_w = -1, final_b = -1;  // head == wte when tied
  std::vector<BlockParams> blocks;
  int tp_rank = 0, tp_size = 1;

  const ParamSpec& at(int index) const { return specs[size_t(index)]; }
};

// ZeRO's sharding of the flat buffers over dp (zero.h builds it). Tensors are grouped in units
// the model uses together (the embedding, each block, the final norm and head); each unit is
// padded to a multiple of dp and dp rank r owns the r-th slice of every unit, as FSDP shards its
// flat parameters, so a unit's reduce-scatter or allgather is one collective. A rank's shard is
// its slices, unit after unit.
struct ShardUnit {
  uint64_t begin = 0, count = 0;  // layout elements [begin, begin + count)
  uint64_t slice = 0;             // ceil(count / dp): elements each rank owns (the last padded)
  uint64_t padded_begin = 0;      // the unit in full-size buffers (slice * dp elements per unit)
  uint64_t padded = 0;            // slice * dp
  uint64_t shard_at = 0;          // this rank's slice in the shard buffers
};
// Tensor `tensor`'s elements [first, first + count) are this rank's, at shard element `at`.
struct ShardPiece {
  int tensor = -1;
  uint64_t first = 0, count = 0, at = 0;
};
struct ShardLayout {
  std::vector<ShardUnit> units;
  std::vector<int> unit_of;        // the unit of each tensor
  std::vector<ShardPiece> pieces;  // at most one per tensor (a tensor lies in one unit)
  uint64_t shard = 0;              // elements per rank: the sum of the slices
  uint64_t padded = 0;             // the sum of slice * dp
  int dp_rank = 0, dp_size = 1;
  // Tensor `index`'s first element in the padded full-size buffers.
  uint64_t padded_offset(const ParamLayout& layout, int index) const {
    const ShardUnit& u = units[size_t(unit_of[size_t(index)])];
    return u.padded_begin + layout.at(index).offset - u.begin;
  }
};

// The layout of `config` on tensor-parallel rank `tp_rank` of `tp_size`. INVALID_ARGUMENT naming
// the size that tp does not divide (heads, kv_heads, ffn, vocab).
Result<ParamLayout> make_layout(const GptConfig& config, int tp_rank, int tp_size);

// The full initial value of `spec` for `seed` (deterministic on any platform: splitmix64 and
// Box-Muller, no std:: distributions).
std::vector<float> initial_value(const ParamSpec& spec, uint64_t seed);
// This rank's shard of a full tensor (row-major [rows, cols]).
std::vector<float> shard_of(const ParamSpec& spec, std::span<const float> full, int tp_rank,
                            int tp_size);

class Params {
 public:
  // Allocates the five flat buffers on `device`; `act` is kF32, kBF16 or kF16.
  static Result<Params> create(const hal::Device& device, ParamLayout layout, DType act);

  const ParamLayout& layout() const { return layout_; }
  DType act() const { return act_; }
  // Device addresses of tensor `index` (nullptr for index -1).
  float* master(int index) const;
  float* grad(int index) const;
  void* work(int index) const;
  float* master_base() const { return static_cast<float*>(master_.data()); }
  float* grad_base() const { return static_cast<float*>(grad_.data()); }
  float* m_base() const { return static_cast<float*>(m_.data()); }
  float* v_base() const { return static_cast<float*>(v_.data()); }
  void* work_base() const { return work_.data(); }

  // master = initial values for `seed`, moments and gradients zero, work = cast(master).
  Status init(const hal::Stream& stream, uint64_t seed);
  Status zero_grads(const hal::Stream& stream) const;
  // work = cast(master): after any change to master made outside the optimizer.
  Status refresh_work(const hal::Stream& stream) const;
  // Whole flat buffers to and from the host (synchronous; for tests and checkpoints).
  Result<std::vector<float>> download_master(const hal::Stream& stream) const;
  Result<std::vector<float>> download_grads(const hal::Stream& stream) const;
  Status upload_master(const hal::Stream& stream, const std::vector<float>& values) const;

  // ZeRO (zero.h): keep master, m and v only for this rank's shard (`shards.shard` elements) and,
  // per `options`, the gradient and the working copy too; the full-size buffers that stay are
  // padded per unit (ShardLayout::padded). Reallocates the buffers: call before init().
  // Afterwards master(), refresh_work() and download_master() refuse (the trainer gathers).
  struct ShardOptions {
    bool grad = false;          // zero >= 2: grad holds the shard, plus a full-size scratch
    bool work = false;          // zero 3: work holds the shard, plus gather slots
    uint64_t grad_scratch = 0;  // f32 elements (units are bound into it while reduced)
    uint64_t work_scratch = 0;  // act elements (units are bound into it while gathered)
  };
  Status shard_state(const hal::Device& device, ShardLayout shards, ShardOptions options);
  // create() then shard_state() without ever holding the whole buffers.
  static Result<Params> create_sharded(const hal::Device& device, ParamLayout layout, DType act,
                                       ShardLayout shards, ShardOptions options);
  bool sharded() const { return !shards_.units.empty(); }
  const ShardLayout& shards() const { return shards_; }
  const ShardOptions& shard_options() const { return shard_options_; }
  // Where piece p of this rank's shard has its (reduced) gradient and its working copy: the
  // shard buffers, or the piece's place in the full-size ones.
  float* shard_grad(const ShardPiece& p) const;
  void* shard_work(const ShardPiece& p) const;
  float* grad_scratch() const { return static_cast<float*>(grad_scratch_.data()); }
  void* work_scratch() const { return work_scratch_.data(); }
  // Unit u's gradient / working copy lives at `base` (its padded region: slice * dp elements);
  // nullptr: nowhere now. grad() and work() of its tensors point there. Full-size buffers are
  // bound once by shard_state; ZeRO-2/3 rebind scratch (zero.h).
  void bind_grad(int unit, float* base) { grad_at_[size_t(unit)] = base; }
  void bind_work(int unit, void* base) { work_at_[size_t(unit)] = static_cast<char*>(base); }
  float* unit_grad(int unit) const { return grad_at_[size_t(unit)]; }
  void* unit_work(int unit) const { return work_at_[size_t(unit)]; }
  // Device bytes held per role (the trainer's memory accounting).
  struct Bytes {
    uint64_t master = 0, work = 0, grad = 0, m = 0, v = 0;
    uint64_t total() const { return master + work + grad + m + v; }
  };
  // Scratch counts with its role: work includes ZeRO-3's gather slots, grad ZeRO-2's scratch.
  Bytes bytes() const {
    return {master_.size(), work_.size() + work_scratch_.size(),
            grad_.size() + grad_scratch_.size(), m_.size(), v_.size()};
  }

 private:
  ParamLayout layout_;
  DType act_ = DType::kF32;
  hal::DeviceBuffer master_, work_, grad_, m_, v_;
  Status upload_sharded(const hal::Stream& stream, const std::vector<float>& flat) const;

  // Sharded (zero.h): the buffers' layout and the unit bindings of grad() and work().
  ShardLayout shards_;
  ShardOptions shard_options_;
  hal::DeviceBuffer grad_scratch_, work_scratch_;
  std::vector<float*> grad_at_;
  std::vector<char*> work_at_;
};

// Synchronous host <-> device copies of a vector (through the stream, the CPU never touches the
// device side).
template <typename T>
Status upload(const hal::Stream& stream, void* dst, const std::vector<T>& src) {
  if (src.empty()) return Status();
  TSR_RETURN_IF_ERROR(stream.copy(dst, src.data(), src.size() * sizeof(T)));
  return stream.synchronize();
}
template <typename T>
Result<std::vector<T>> download(const hal::Stream& stream, const void* src, size_t count) {
  std::vector<T> out(count);
  if (count == 0) return out;
  TSR_RETURN_IF_ERROR(stream.copy(out.data(), src, count * sizeof(T)));
  TSR_RETURN_IF_ERROR(stream.synchronize());
  return out;
}

}  // namespace tessera::gpt
