// Pipeline parallelism of the GPT/MoE decoder: which blocks a stage owns, its parameter layout,
// and the 1F1B schedule of one step's micro-batches over the pipeline group (parallel.h).
//
// Stage s of pp owns a contiguous run of blocks (as even as possible, earlier stages larger, as
// examples/trainer/layout.h splits them); stage 0 also the embedding, the last stage the final
// norm, the head and the loss. With a tied head the first and last stage each hold a copy of the
// embedding matrix, initialised alike; their gradients are summed over ParallelGroups::embed.
//
// 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): stage s runs min(pp - s - 1, M)
// warm-up forwards, then alternates one forward and one backward, then the remaining backwards.
// The residual stream goes forward and its gradient backward with point-to-point send/recv on
// the compute stream. A stage keeps one set of activations: it keeps the input of each micro-batch
// in flight (at most pp - s; none on the first stage, whose input is the embedding of the tokens)
// and, before a backward whose forward was not the stage's last one, replays that forward from the
// kept input (the same kernels on the same data, so bitwise the activations of the first run, as
// under full recomputation).
// Device bytes of the schedule itself (Pipeline::bytes): pp - s kept inputs on stages s > 0, one
// received output gradient on every stage but the last, each act [T, h]; 16 bytes of loss sums.
// Under ZeRO (zero.h) each stage shards its own units over dp; zero 2 reduces each part's
// gradient after its backward of every micro-batch, zero 3 gathers a part before its forward,
// replay and backward, as without pp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model.h"
#include "stage.h"

namespace tessera::gpt {

// One step's forward and backward passes over a pipeline stage.
class Pipeline {
 public:
  static Result<Pipeline> create(const hal::Device& device, const GptModel& model);
  // Runs the 1F1B schedule over `micro_batches` micro-batches (`batch_of(j)`: micro-batch j's
  // tokens, the same on every stage), accumulating the gradient of weight * loss of each into
  // the stage's parameters, then sums a tied embedding's gradient over the embedding group.
  // Returns the sums over micro-batches of every stage's loss terms (xent from the last stage,
  // aux from each stage's MoE layers), summed over the pipeline group: the same on every stage.
  // Synchronises the stream.
  Result<StepLoss> run(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                       const std::function<Batch(int64_t)>& batch_of, float weight);
  // The device bytes this schedule allocated (kept inputs, received gradient, loss sums); all of
  // it is allocated at create, nothing per step.
  uint64_t bytes() const;

 private:
  Pipeline() = default;
  // Copies micro-batch j's kept input to the model's stage input (nothing on the first stage).
  Status restore_input(const hal::Stream& s, GptModel& model, int64_t j);

  // act [T, h]: the kept inputs of micro-batches in flight, micro-batch j in j % size (stages
  // after the first)
  std::vector<hal::DeviceBuffer> inputs_;
  hal::DeviceBuffer grad_;     // act [T, h]: the received output gradient (stages before the last)
  hal::DeviceBuffer scalars_;  // f64 [2]: the loss sums over the pipeline
};

}  // namespace tessera::gpt
