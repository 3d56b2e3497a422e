// ProcessGroupTessera (process_group.h): argument checks on the caller's thread, operations on
// the group's worker thread.
#include "process_group.h"

#include <unistd.h>

#include <exception>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "stores.h"
#include "tessera/common/env.h"

namespace tessera::torch_c10d {
namespace {

using coll::DType;
using hal::ReduceOp;

std::optional<DType> native_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kF32;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kDouble: return DType::kF64;
    case at::kInt: return DType::kI32;
    case at::kLong: return DType::kI64;
    case at::kByte: return DType::kU8;
    default: return std::nullopt;
  }
}

// Every tensor an operation touches: on the CPU, dense and contiguous (the communicator reads
// and writes flat host memory).
void check_tensor(const char* op, const at::Tensor& t, const char* arg) {
  TORCH_CHECK(t.device().is_cpu(), "tessera ", op, ": ", arg, " is on ", t.device().str(),
              "; the tessera backend moves CPU tensors only");
  TORCH_CHECK(t.layout() == at::kStrided, "tessera ", op, ": ", arg, " is not a dense tensor");
  TORCH_CHECK(t.is_contiguous(), "tessera ", op, ": ", arg, " is not contiguous");
}

const at::Tensor& single(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "tessera ", op, ": takes one tensor per process, got ",
              tensors.size());
  check_tensor(op, tensors[0], "the tensor");
  return tensors[0];
}

void check_same(const char* op, const at::Tensor& t, const at::Tensor& like, const char* arg) {
  check_tensor(op, t, arg);
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(), "tessera ", op,
              ": ", arg, " is ", t.scalar_type(), "[", t.numel(), "], expected ",
              like.scalar_type(), "[", like.numel(), "]");
}

// Reductions need a dtype the communicator adds up.
DType reduce_dtype(const char* op, const at::Tensor& t) {
  auto dtype = native_dtype(t.scalar_type());
  TORCH_CHECK(dtype.has_value(), "tessera ", op, ": dtype ", t.scalar_type(),
              " is not supported (reductions take Float, Half, BFloat16, Double, Int, Long, Byte)");
  return *dtype;
}

// Data movement takes any dtype: the communicator's own when it has it (its flight record then
// says f32, not u8), else the tensor's bytes.
struct Elements {
  DType dtype;
  size_t per_element;  // communicator elements per tensor element
};
Elements move_elements(const at::Tensor& t) {
  if (auto dtype = native_dtype(t.scalar_type())) return {*dtype, 1};
  return {DType::kU8, static_cast<size_t>(t.element_size())};
}

ReduceOp reduce_op(const char* op, const c10d::ReduceOp& r) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    default: break;
  }
  TORCH_CHECK(false, "tessera ", op, ": reduce op ", static_cast<int>(r.op_),
              " (BAND, BOR, BXOR or PREMUL_SUM) is not supported (SUM, PRODUCT, MIN, MAX, AVG)");
}

size_t count_of(const at::Tensor& t) {
  return static_cast<size_t>(t.numel());
}

// Counts and displacements (in elements of the flat buffer) of alltoall_base's split sizes: an
// empty list splits dim 0 evenly.
std::pair<std::vector<size_t>, std::vector<size_t>> splits_of(const char* op, const at::Tensor& t,
                                                              const std::vector<int64_t>& splits,
                                                              int size, const char* arg) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t row_elements = rows == 0 ? 0 : count_of(t) / static_cast<size_t>(rows);
  std::vector<size_t> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "tessera ", op, ": ", arg, " has ", rows,
                " rows, not divisible by the group size ", size);
    for (auto& c : counts) c = static_cast<size_t>(rows / size) * row_elements;
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == size, "tessera ", op, ": ", arg, " splits has ",
                splits.size(), " entries for a group of ", size);
    int64_t total = 0;
    for (size_t i = 0; i < splits.size(); ++i) {
      TORCH_CHECK(splits[i] >= 0, "tessera ", op, ": ", arg, " split ", i, " is negative");
      total += splits[i];
      counts[i] = static_cast<size_t>(splits[i]) * row_elements;
    }
    TORCH_CHECK(total == rows, "tessera ", op, ": ", arg, " splits add up to ", total, ", not ",
                rows, " rows");
  }
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), size_t{0});
  return {counts, displs};
}

std::vector<size_t> scaled(std::vector<size_t> v, size_t factor) {
  for (auto& x : v) x *= factor;
  return v;
}

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

// ---- TesseraWork ---------------------------------------------------------------------------

TesseraWork::TesseraWork(int rank, int size, c10d::OpType type, std::string op,
                         std::vector<at::Tensor> outputs, std::function<void(std::string)> abort)
    : c10d::Work(rank, type),
      size_(size),
      op_(std::move(op)),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      abort_(std::move(abort)) {}

bool TesseraWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "tessera ", op_, " (rank ", rank_, " of ", size_, "): not done within ",
                timeout.count(), " ms (wait timeout; the operation is still running)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> TesseraWork::getFuture() {
  return future_;
}

std::vector<at::Tensor> TesseraWork::result() {
  return outputs_;
}

void TesseraWork::abort() {
  abort_("Work.abort() of " + op_ + " on rank " + std::to_string(rank_));
}

void TesseraWork::complete(const Status& status) {
  if (status.ok()) {
    finish();
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  auto error = std::make_exception_ptr(
      std::runtime_error("tessera " + op_ + " (rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + "): " + status.to_string()));
  finish(error);
  future_->setError(error);
}

// ---- ProcessGroupTessera: creation, the worker -----------------------------------------------

ProcessGroupTessera::ProcessGroupTessera(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                         std::chrono::milliseconds timeout)
    : ProcessGroupBase(rank, size) {
  coll::LaunchInfo info;
  info.rank = rank;
  info.size = size;
  info.hostname = hostname();
  auto bootstrap = coll::Bootstrap::from_parts(
      std::move(info), wrap_c10d_store(std::move(store), "tessera/"), {.timeout = timeout});
  coll::CommOptions options;
  // init_process_group(timeout=...) bounds every wait, unless TESSERA_COLL_TIMEOUT_MS says else.
  if (!env::get("TESSERA_COLL_TIMEOUT_MS")) options.timeout = timeout;
  auto comm = coll::Communicator::create(std::move(bootstrap), options);
  TORCH_CHECK(comm.ok(), "tessera process group (rank ", rank, " of ", size,
              "): creating the communicator: ", comm.status().to_string());
  comm_ = std::move(*comm);
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupTessera::~ProcessGroupTessera() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();  // runs what is queued first; the communicator's timeout bounds each
}

void ProcessGroupTessera::worker_loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    auto [work, run] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status status;
    try {
      status = run(*comm_);
    } catch (const std::exception& e) {  // a copy into an output tensor, an allocation
      status = internal_error(e.what());
    }
    work->complete(status);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::enqueue(c10d::OpType type, const char* op,
                                                            std::vector<at::Tensor> outputs,
                                                            Run run) {
  std::weak_ptr<coll::Communicator> comm = comm_;
  auto work = c10::make_intrusive<TesseraWork>(rank_, size_, type, op, std::move(outputs),
                                               [comm](std::string reason) {
                                                 if (auto c = comm.lock()) c->abort(reason);
                                               });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(work, std::move(run));
  }
  cv_.notify_one();
  return work;
}

void ProcessGroupTessera::abort(const std::string& reason) {
  comm_->abort(reason);
}

std::string ProcessGroupTessera::flight_record() const {
  return comm_->flight_record();
}

// ---- operations ------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::allreduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  at::Tensor t = single("allreduce", tensors);
  const DType dtype = reduce_dtype("allreduce", t);
  const ReduceOp op = reduce_op("allreduce", opts.reduceOp);
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", {t}, [t, dtype, op](coll::Communicator& c) {
    return c.allreduce(t.data_ptr(), t.data_ptr(), count_of(t), dtype, op);
  });
}

// One allreduce over the tensors packed into one buffer (DDP's coalesced path, fewer headers and
// synchronisations than one allreduce each), unpacked into them afterwards.
c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "tessera allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    check_tensor("allreduce_coalesced", t, "a tensor");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "tessera allreduce_coalesced: tensors mix dtypes ", tensors[0].scalar_type(),
                " and ", t.scalar_type());
  }
  const DType dtype = reduce_dtype("allreduce_coalesced", tensors[0]);
  const ReduceOp op = reduce_op("allreduce_coalesced", opts.reduceOp);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
                 [tensors, dtype, op](coll::Communicator& c) {
                   std::vector<at::Tensor> flat_views;
                   for (const at::Tensor& t : tensors) flat_views.push_back(t.view(-1));
                   at::Tensor flat = at::cat(flat_views);
                   TSR_RETURN_IF_ERROR(
                       c.allreduce(flat.data_ptr(), flat.data_ptr(), count_of(flat), dtype, op));
                   int64_t offset = 0;
                   for (const at::Tensor& t : tensors) {
                     t.view(-1).copy_(flat.narrow(0, offset, t.numel()));
                     offset += t.numel();
                   }
                   return Status();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  at::Tensor t = single("reduce", tensors);
  const DType dtype = reduce_dtype("reduce", t);
  const ReduceOp op = reduce_op("reduce", opts.reduceOp);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, "reduce", {t}, [t, dtype, op, root](coll::Communicator& c) {
    return c.reduce(t.data_ptr(), t.data_ptr(), count_of(t), dtype, op, root);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  at::Tensor t = single("broadcast", tensors);
  const Elements e = move_elements(t);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", {t}, [t, e, root](coll::Communicator& c) {
    return c.broadcast(t.data_ptr(), t.data_ptr(), count_of(t) * e.per_element, e.dtype, root);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  at::Tensor in = single("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "tessera allgather: takes one list of ", size_, " output tensors");
  for (const at::Tensor& out : outputs[0]) check_same("allgather", out, in, "an output tensor");
  const Elements e = move_elements(in);
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, "allgather", outs, [in, outs, e](coll::Communicator& c) {
    at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()), in.numel()}, in.options());
    TSR_RETURN_IF_ERROR(
        c.allgather(in.data_ptr(), flat.data_ptr(), count_of(in) * e.per_element, e.dtype));
    for (size_t r = 0; r < outs.size(); ++r) outs[r].view(-1).copy_(flat[static_cast<int64_t>(r)]);
    return Status();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::_allgather_base(at::Tensor& output,
                                                                    at::Tensor& input,
                                                                    const c10d::AllgatherOptions&) {
  check_tensor("_allgather_base", input, "the input");
  check_tensor("_allgather_base", output, "the output");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
      "tessera _allgather_base: the output must be ", input.scalar_type(), "[",
      input.numel() * size_, "] (group size x input), got ", output.scalar_type(), "[",
      output.numel(), "]");
  const Elements e = move_elements(input);
  at::Tensor in = input, out = output;
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {out}, [in, out, e](coll::Communicator& c) {
        return c.allgather(in.data_ptr(), out.data_ptr(), count_of(in) * e.per_element, e.dtype);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = single("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "tessera reduce_scatter: takes one list of ", size_, " input tensors");
  for (const at::Tensor& in : inputs[0]) check_same("reduce_scatter", in, out, "an input tensor");
  const DType dtype = reduce_dtype("reduce_scatter", out);
  const ReduceOp op = reduce_op("reduce_scatter", opts.reduceOp);
  std::vector<at::Tensor> ins = inputs[0];
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out},
                 [out, ins, dtype, op](coll::Communicator& c) {
                   std::vector<at::Tensor> flat_views;
                   for (const at::Tensor& t : ins) flat_views.push_back(t.view(-1));
                   at::Tensor flat = at::cat(flat_views);
                   return c.reduce_scatter(flat.data_ptr(), out.data_ptr(), count_of(out), dtype,
                                           op);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor("_reduce_scatter_base", input, "the input");
  check_tensor("_reduce_scatter_base", output, "the output");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * size_,
      "tessera _reduce_scatter_base: the input must be ", output.scalar_type(), "[",
      output.numel() * size_, "] (group size x output), got ", input.scalar_type(), "[",
      input.numel(), "]");
  const DType dtype = reduce_dtype("_reduce_scatter_base", output);
  const ReduceOp op = reduce_op("_reduce_scatter_base", opts.reduceOp);
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {out},
                 [in, out, dtype, op](coll::Communicator& c) {
                   return c.reduce_scatter(in.data_ptr(), out.data_ptr(), count_of(out), dtype, op);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  check_tensor("alltoall_base", input, "the input");
  check_tensor("alltoall_base", output, "the output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tessera alltoall_base: input is ",
              input.scalar_type(), ", output ", output.scalar_type());
  const Elements e = move_elements(input);
  at::Tensor in = input, out = output;
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0,
                "tessera alltoall_base: input and output must have the same number of elements, "
                "divisible by the group size ",
                size_, " (got ", in.numel(), " and ", out.numel(), ")");
    return enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {out},
                   [in, out, e, n = count_of(in) / size_](coll::Communicator& c) {
                     return c.alltoall(in.data_ptr(), out.data_ptr(), n * e.per_element, e.dtype);
                   });
  }
  auto [send_counts, send_displs] = splits_of("alltoall_base", in, input_splits, size_, "input");
  auto [recv_counts, recv_displs] = splits_of("alltoall_base", out, output_splits, size_, "output");
  const size_t k = e.per_element;
  return enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {out},
                 [in, out, e, sc = scaled(send_counts, k), sd = scaled(send_displs, k),
                  rc = scaled(recv_counts, k), rd = scaled(recv_displs, k)](coll::Communicator& c) {
                   return c.alltoallv(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, e.dtype);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "tessera alltoall: takes ", size_, " input and ", size_, " output tensors, got ",
              inputs.size(), " and ", outputs.size());
  std::vector<size_t> sc, rc;
  for (int r = 0; r < size_; ++r) {
    check_tensor("alltoall", inputs[r], "an input tensor");
    check_tensor("alltoall", outputs[r], "an output tensor");
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                "tessera alltoall: tensors mix dtypes");
  }
  const Elements e = move_elements(inputs[0]);
  for (int r = 0; r < size_; ++r) {
    sc.push_back(count_of(inputs[r]) * e.per_element);
    rc.push_back(count_of(outputs[r]) * e.per_element);
  }
  std::vector<size_t> sd(sc.size()), rd(rc.size());
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), size_t{0});
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), size_t{0});
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(
      c10d::OpType::ALLTOALL, "alltoall", outs,
      [ins, outs, e, sc, sd, rc, rd](coll::Communicator& c) {
        std::vector<at::Tensor> flat_views;
        for (const at::Tensor& t : ins) flat_views.push_back(t.view(-1));
        at::Tensor send = at::cat(flat_views);
        at::Tensor recv =
            at::empty({static_cast<int64_t>(std::accumulate(rc.begin(), rc.end(), size_t{0}) /
                                            e.per_element)},
                      send.options());
        TSR_RETURN_IF_ERROR(c.alltoallv(send.data_ptr(), sc, sd, recv.data_ptr(), rc, rd, e.dtype));
        for (size_t r = 0; r < outs.size(); ++r) {
          outs[r].view(-1).copy_(
              recv.narrow(0, static_cast<int64_t>(rd[r] / e.per_element), outs[r].numel()));
        }
        return Status();
      });
}

// Tags are not matched: messages between two ranks arrive in the order they were sent (the
// communicator checks the count and dtype of each), so the tag argument is accepted and ignored.
c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::send(std::vector<at::Tensor>& tensors, int dst,
                                                         int /*tag*/) {
  at::Tensor t = single("send", tensors);
  const Elements e = move_elements(t);
  return enqueue(c10d::OpType::SEND, "send", {t}, [t, e, dst](coll::Communicator& c) {
    return c.send(t.data_ptr(), count_of(t) * e.per_element, e.dtype, dst);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::recv(std::vector<at::Tensor>& tensors, int src,
                                                         int /*tag*/) {
  at::Tensor t = single("recv", tensors);
  const Elements e = move_elements(t);
  return enqueue(c10d::OpType::RECV, "recv", {t}, [t, e, src](coll::Communicator& c) {
    return c.recv(t.data_ptr(), count_of(t) * e.per_element, e.dtype, src);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTessera::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "barrier", {},
                 [](coll::Communicator& c) { return c.barrier(); });
}

}  // namespace tessera::torch_c10d
