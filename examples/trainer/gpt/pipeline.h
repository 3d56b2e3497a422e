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
//
// Interleaved 1F1B (virtual stages, vp > 1; Megatron's interleaved schedule, Narayanan et al. 2021
// §2.2): the blocks are cut into pp * vp chunks (stage_chunks) and stage s holds chunks s, s + pp,
// s + 2pp, ...; the embedding goes with chunk 0 (stage 0), the head with chunk pp * vp - 1 (stage
// pp - 1). The micro-batches run in groups of pp (micro_batches must be a multiple of pp, refused
// by name otherwise): stage s runs min((pp - s - 1) * 2 + (vp - 1) * pp, M * vp) warm-up forwards
// of its M * vp (chunk, micro-batch) pairs in Megatron's order (forward k: chunk (k / pp) % vp,
// micro-batch (k / (pp * vp)) * pp + k % pp; backwards the chunks reversed), then one forward one
// backward, then the remaining backwards (the planner's timeline.cc simulates the same order).
// Chunk c's output goes to stage s + 1, and from stage pp - 1 to stage 0's chunk c + 1; the
// gradients go back the same way. The point-to-point operations are blocking and the stages form
// a ring, so their order is fixed by one global simulation every stage runs alike
// (interleaved_schedule): each transfer sits right after the compute that produced it in one total
// order of every stage's computes and transfers, and each stage issues its own in that order; the
// earliest operation not done then always has both of its sides issued, so none waits forever.
// A received input is kept (one buffer per (chunk, micro-batch) in flight) until the pair's
// backward; the backward of a pair whose forward is not the chunk's last one replays that forward
// from the kept input, as above (per chunk: the chunks' activations are apart). The received
// gradients wait in buffers of their own until their backward. Device bytes: as many kept inputs
// and gradients as the schedule has in flight (interleaved_schedule's counts, allocated at create
// for the trainer's micro_batches), each act [T, h]; 16 bytes of loss sums.
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

// One operation of a stage under the interleaved schedule: a chunk's forward or backward of a
// micro-batch, or a point-to-point transfer with `peer` of the chunk's input (received into a
// kept input), its output (sent from the chunk's stage output), its output gradient (received
// into a gradient buffer) or its input gradient (sent from the residual gradient).
struct PipelineOp {
  enum Kind { kForward, kBackward, kRecvInput, kSendOutput, kRecvGrad, kSendGrad };
  Kind kind = kForward;
  int chunk = 0;  // the stage's chunk (0..vp-1)
  int64_t micro_batch = 0;
  int peer = -1;  // transfers: the other stage
  // The pair's kept input (receive, forward, backward's replay) and received gradient (receive,
  // backward); -1: none (the model's first chunk takes the embedding, its last the loss).
  int input = -1, grad = -1;
};
struct InterleavedSchedule {
  std::vector<PipelineOp> ops;  // this stage's, in issue order
  int input_slots = 0;          // kept inputs in flight at most
  int grad_slots = 0;           // received gradients waiting at most
};
// Stage `stage`'s operations under the interleaved schedule of `pp` stages with `vp` chunks each
// over `micro_batches` (pipeline.h, above). INVALID_ARGUMENT naming micro_batches where pp does not
// divide it, and naming vp / pp where below 1 / 2.
Result<InterleavedSchedule> interleaved_schedule(int stage, int pp, int vp, int64_t micro_batches);

// One step's forward and backward passes over a pipeline stage.
class Pipeline {
 public:
  // `micro_batches` (> 0): under vp, sizes the kept inputs and gradients for that many per step
  // now (run allocates more if a later step needs them).
  static Result<Pipeline> create(const hal::Device& device, const GptModel& model,
                                 int64_t micro_batches = 0);
  // Runs the 1F1B schedule (interleaved where the model's stage holds several chunks: vp, above;
  // INVALID_ARGUMENT naming micro_batches where pp does not divide them) over `micro_batches`
  // micro-batches (`batch_of(j)`: micro-batch j's tokens, the same on every stage), accumulating
  // the gradient of weight * loss of each into the stage's parameters, then sums a tied
  // embedding's gradient over the embedding group.
  // Returns the sums over micro-batches of every stage's loss terms (xent from the last stage,
  // aux from each stage's MoE layers), summed over the pipeline group: the same on every stage.
  // Synchronises the stream.
  Result<StepLoss> run(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                       const std::function<Batch(int64_t)>& batch_of, float weight);
  // The device bytes this schedule allocated (kept inputs, received gradient, loss sums); all of
  // it is allocated at create (under vp: for create's micro_batches; a step with more allocates
  // what it needs beyond, once), nothing per step.
  uint64_t bytes() const;

 private:
  Pipeline() = default;
  // Copies micro-batch j's kept input to the model's stage input (nothing on the first stage).
  Status restore_input(const hal::Stream& s, GptModel& model, int64_t j);
  // vp > 1: the interleaved schedule (pipeline.h, above); then the same sums as run.
  Status run_interleaved(const hal::Stream& s, GptModel& model, int64_t micro_batches,
                         const std::function<Batch(int64_t)>& batch_of, float weight,
                         StepLoss* sum);
  // vp > 1: at least `inputs` kept inputs and `grads` gradient buffers.
  Status reserve(const GptModel& model, int inputs, int grads);
  // The tied embedding's gradient sum and the losses over the pipeline (both schedules).
  Result<StepLoss> finish(const hal::Stream& s, GptModel& model, StepLoss sum);

  const hal::Device* device_ = nullptr;

  // act [T, h]: the kept inputs of micro-batches in flight, micro-batch j in j % size (stages
  // after the first)
  std::vector<hal::DeviceBuffer> inputs_;
  hal::DeviceBuffer grad_;     // act [T, h]: the received output gradient (stages before the last)
  hal::DeviceBuffer scalars_;  // f64 [2]: the loss sums over the pipeline
  // vp > 1: the kept inputs and the received gradients, by the schedule's slots
  std::vector<hal::DeviceBuffer> chunk_inputs_, chunk_grads_;
};

}  // namespace tessera::gpt
