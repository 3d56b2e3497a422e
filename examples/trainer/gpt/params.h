// The decoder's parameters on device memory, in one flat layout per rank:
//   master  f32   the weights AdamW updates
//   work    act   the working copy the forward and backward read (bf16, or f32 for tight checks);
//                 rewritten from master by every optimizer step
//   grad    f32   gradients; accumulate across micro-batches, zeroed by zero_grads()
//   m, v    f32   AdamW moments
// One flat buffer per role makes the optimizer, clipping and the data-parallel allreduce one
// span each; a tensor is an offset into it.
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
  // Allocates the five flat buffers on `device`; `act` is kF32 or kBF16.
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

  // ZeRO (zero.h): keep master, m and v only for the flat elements [shard_begin, shard_begin +
  // shard_size) and grow grad and work to `padded` (shard_size * dp) elements so that the dp
  // reduce-scatter and allgather run in place. Reallocates the buffers: call before init().
  // Afterwards master(), refresh_work() and download_master() refuse (the trainer gathers).
  Status shard_state(const hal::Device& device, uint64_t shard_begin, uint64_t shard_size,
                     uint64_t padded);
  bool sharded() const { return shard_size_ > 0; }
  uint64_t shard_begin() const { return shard_begin_; }
  uint64_t shard_size() const { return shard_size_; }
  // Device bytes held per role (the trainer's memory accounting).
  struct Bytes {
    uint64_t master = 0, work = 0, grad = 0, m = 0, v = 0;
    uint64_t total() const { return master + work + grad + m + v; }
  };
  Bytes bytes() const { return {master_.size(), work_.size(), grad_.size(), m_.size(), v_.size()}; }

 private:
  ParamLayout layout_;
  DType act_ = DType::kF32;
  hal::DeviceBuffer master_, work_, grad_, m_, v_;
  Status upload_sharded(const hal::Stream& stream, std::vector<float> flat) const;

  uint64_t shard_begin_ = 0, shard_size_ = 0;  // shard_size_ 0: not sharded
  uint64_t capacity_ = 0;                      // elements of grad and work (>= layout total)
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
