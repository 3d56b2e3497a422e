// ProcessGroupTessera: torch.distributed's `tessera` backend, a c10d process group over one
// Tessera communicator (collectives/include/tessera/coll/communicator.h).
//
// Threading: every operation is checked on the calling thread (a bad tensor, dtype or reduce op
// throws there, naming the operation), then queued to the group's one worker thread, which runs
// the communicator's blocking call and completes the Work and its Future. The caller (DDP's
// autograd hooks, a training loop) goes on computing meanwhile; operations run in issue order,
// which is also the order every rank must issue them in (the communicator checks it).
//
// Memory: CPU tensors, dense and contiguous, as host memory. Reductions take the dtypes the
// communicator reduces (f32, f16, bf16, f64, i32, i64, u8); data movement (broadcast, allgather,
// alltoall, send/recv) takes any dtype, moved as bytes when the communicator has no such type.
//
// Faults: a dead peer or a timeout fails the operation with the communicator's error (it names
// the rank and the operation), raised by wait() / the Future as RuntimeError; abort() makes every
// pending and later operation fail at once. The worker never blocks longer than the timeout.
//
// torch 1.13 derives c10d::ProcessGroup; torch >= 2.0 c10d::Backend (wrapped by a ProcessGroup
// in Python, torch.distributed.Backend.register_backend(..., devices=["cpu"])). Only 1.13 is
// built and tested here (Debian 12's libtorch).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "tessera/coll/communicator.h"

namespace tessera::torch_c10d {

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

// One queued operation. Completed once, by the worker thread; its Future holds the output
// tensors (what DDP's communication hooks read) or the error.
class TesseraWork final : public c10d::Work {
 public:
  TesseraWork(int rank, int size, c10d::OpType type, std::string op,
              std::vector<at::Tensor> outputs, std::function<void(std::string)> abort);

  // Waits up to `timeout` (0: until done, which the communicator's timeout bounds); throws the
  // operation's error, or a timeout naming the operation and rank (the operation keeps running).
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  // Aborts the whole communicator (an operation cannot be cancelled alone): this one and every
  // other pending one fail with ABORTED.
  void abort() override;

  // Worker thread: records the outcome, wakes waiters, completes the Future.
  void complete(const Status& status);
  const std::string& op() const { return op_; }

 private:
  const int size_;
  const std::string op_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::function<void(std::string)> abort_;
};

class ProcessGroupTessera final : public ProcessGroupBase {
 public:
  // Collective over the `size` ranks sharing `store`: bootstraps the communicator through it
  // (keys under "tessera/"), with `timeout` bounding every wait. Throws naming the rank and what
  // failed (a rank that never arrives, a transport that cannot be set up).
  ProcessGroupTessera(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                      std::chrono::milliseconds timeout);
  ~ProcessGroupTessera() override;

  const std::string getBackendName() const override { return "tessera"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Fails every pending and later operation (of every rank the communicator reaches) with
  // `reason`. Safe from any thread.
  void abort(const std::string& reason);
  // The communicator's last operations, one per line (collectives' flight recorder).
  std::string flight_record() const;

 private:
  using Run = std::function<Status(coll::Communicator&)>;
  // Queues `run` for the worker; the Work completes with its status.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* op,
                                         std::vector<at::Tensor> outputs, Run run);
  void worker_loop();

  std::shared_ptr<coll::Communicator> comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<c10::intrusive_ptr<TesseraWork>, Run>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace tessera::torch_c10d
