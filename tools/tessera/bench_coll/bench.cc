#include "bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

namespace tessera::tools::bench_coll {
namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<void, FreeDeleter>;

constexpr size_t kAlign = 4096;

size_t page_rounded(size_t bytes) {
  return std::max<size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
}

Result<AlignedBuffer> allocate(size_t bytes) {
  const size_t rounded = page_rounded(bytes);
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) {
    return resource_exhausted("could not allocate " + std::to_string(rounded) + " bytes");
  }
  return AlignedBuffer(p);
}

// Device buffers the operations run on when BenchOptions::device is set; the host buffers keep
// the inputs and the checked results, moved through one pinned buffer by the device's copies.
class DeviceSide {
 public:
  static Result<std::unique_ptr<DeviceSide>> create(const hal::Device& device, size_t bytes) {
    auto d = std::make_unique<DeviceSide>();
    TSR_ASSIGN_OR_RETURN(d->send_, device.allocate(std::max<size_t>(bytes, 1)));
    TSR_ASSIGN_OR_RETURN(d->recv_, device.allocate(std::max<size_t>(bytes, 1)));
    TSR_ASSIGN_OR_RETURN(d->pinned_, device.allocate_host(std::max<size_t>(bytes, 1)));
    TSR_ASSIGN_OR_RETURN(hal::Stream stream, device.create_stream());
    d->stream_.emplace(std::move(stream));
    return d;
  }
  void* send() const { return send_.data(); }
  void* recv() const { return recv_.data(); }
  Status to_device(void* dst, const void* host, size_t bytes) {
    std::memcpy(pinned_.data(), host, bytes);
    TSR_RETURN_IF_ERROR(stream_->copy(dst, pinned_.data(), bytes));
    return stream_->synchronize();
  }
  Status to_host(void* host, const void* src, size_t bytes) {
    TSR_RETURN_IF_ERROR(stream_->copy(pinned_.data(), src, bytes));
    TSR_RETURN_IF_ERROR(stream_->synchronize());
    std::memcpy(host, pinned_.data(), bytes);
    return Status();
  }

 private:
  hal::DeviceBuffer send_, recv_;
  hal::HostBuffer pinned_;
  std::optional<hal::Stream> stream_;
};

// The per-iteration time of every rank combined as options.time_reduction says, in seconds.
Result<double> reduce_time(coll::Communicator& comm, double seconds, TimeReduction how) {
  double value = seconds;
  switch (how) {
    case TimeReduction::kRank0:
      TSR_RETURN_IF_ERROR(comm.broadcast(&value, &value, 1, hal::DType::kF64, 0));
      return value;
    case TimeReduction::kAverage:
      TSR_RETURN_IF_ERROR(comm.allreduce(&value, &value, 1, hal::DType::kF64, hal::ReduceOp::kSum));
      return value / comm.size();
    case TimeReduction::kMin:
      TSR_RETURN_IF_ERROR(comm.allreduce(&value, &value, 1, hal::DType::kF64, hal::ReduceOp::kMin));
      return value;
    case TimeReduction::kMax:
      TSR_RETURN_IF_ERROR(comm.allreduce(&value, &value, 1, hal::DType::kF64, hal::ReduceOp::kMax));
      return value;
  }
  return value;
}

// `run` on host buffers; with `device`, the operations run on its buffers instead.
Result<Measurement> measure(coll::Communicator& comm, const BenchOptions& o, const Run& run,
                            DeviceSide* device) {
  const int rank = comm.rank();
  const int nranks = comm.size();
  const size_t bytes = std::max(run.layout.send, run.layout.recv) * hal::dtype_size(run.dtype);
  Run on = run;
  if (device != nullptr) {
    on.send_base = device->send();
    on.recv_base = device->recv();
  }
  // Inputs are written on the host and copied to the device buffers.
  auto prepare = [&]() -> Status {
    fill_inputs(run, rank, nranks);
    if (device == nullptr) return Status();
    TSR_RETURN_IF_ERROR(device->to_device(device->send(), run.send_base, bytes));
    return device->to_device(device->recv(), run.recv_base, bytes);
  };
  Measurement m;
  m.available = true;
  TSR_RETURN_IF_ERROR(prepare());
  for (int i = 0; i < o.warmup; ++i) TSR_RETURN_IF_ERROR(run_once(comm, on));
  TSR_RETURN_IF_ERROR(comm.barrier());
  const auto start = Clock::now();
  for (int i = 0; i < o.iters; ++i) TSR_RETURN_IF_ERROR(run_once(comm, on));
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count() / std::max(o.iters, 1);
  TSR_ASSIGN_OR_RETURN(const double reduced, reduce_time(comm, seconds, o.time_reduction));
  m.time_us = reduced * 1e6;
  m.algbw_gbps = reduced > 0 ? double(run.layout.algbw_bytes) / 1e9 / reduced : 0;
  m.busbw_gbps = m.algbw_gbps * bus_factor(run.op, nranks);
  if (o.check) {
    TSR_RETURN_IF_ERROR(prepare());
    TSR_RETURN_IF_ERROR(run_once(comm, on));
    if (device != nullptr) {
      TSR_RETURN_IF_ERROR(device->to_host(run.recv_base, device->recv(), bytes));
    }
    int64_t wrong = count_wrong(run, rank, nranks);
    TSR_RETURN_IF_ERROR(comm.allreduce(&wrong, &wrong, 1, hal::DType::kI64, hal::ReduceOp::kSum));
    m.wrong = wrong;
  }
  return m;
}

}  // namespace

coll::OpKind op_kind(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce: return coll::OpKind::kAllReduce;
    case BenchOp::kReduce: return coll::OpKind::kReduce;
    case BenchOp::kBroadcast: return coll::OpKind::kBroadcast;
    case BenchOp::kAllGather: return coll::OpKind::kAllGather;
    case BenchOp::kReduceScatter: return coll::OpKind::kReduceScatter;
    case BenchOp::kAllToAll: return coll::OpKind::kAllToAll;
    case BenchOp::kSendRecv: return coll::OpKind::kSend;
  }
  return coll::OpKind::kAllReduce;
}
std::string_view time_reduction_name(TimeReduction reduction) {
  switch (reduction) {
    case TimeReduction::kRank0: return "rank0";
    case TimeReduction::kAverage: return "avg";
    case TimeReduction::kMin: return "min";
    case TimeReduction::kMax: return "max";
  }
  return "?";
}

std::vector<size_t> sweep_sizes(const BenchOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.min_bytes; size <= o.max_bytes;) {
    sizes.push_back(size);
    const size_t next = o.step_factor > 1 ? size * size_t(o.step_factor) : size + o.step_bytes;
    if (next <= size) break;  // a zero step or an overflow
    size = next;
  }
  return sizes;
}

MemoryNeed memory_need(const BenchOptions& o, int nranks) {
  MemoryNeed need;
  const size_t ts = hal::dtype_size(o.dtype);
  for (size_t size : sweep_sizes(o)) {
    const Layout l = layout_for(o.op, size, o.dtype, nranks);
    need.largest = std::max({need.largest, l.send * ts, l.recv * ts});
  }
  need.host = 2 * uint64_t(page_rounded(need.largest));
  if (o.device != nullptr) {
    need.host += std::max<size_t>(need.largest, 1);
    need.device = 2 * uint64_t(std::max<size_t>(need.largest, 1));
  }
  return need;
}

Result<std::vector<Row>> run_sweep(coll::Communicator& comm, const BenchOptions& o,
                                   const std::function<void(const Row&)>& on_row) {
  const std::vector<size_t> sizes = sweep_sizes(o);
  const size_t largest = memory_need(o, comm.size()).largest;
  TSR_ASSIGN_OR_RETURN(AlignedBuffer send, allocate(largest));
  TSR_ASSIGN_OR_RETURN(AlignedBuffer recv, allocate(largest));
  std::unique_ptr<DeviceSide> device;
  if (o.device != nullptr) {
    TSR_ASSIGN_OR_RETURN(device, DeviceSide::create(*o.device, largest));
  }

  std::vector<Row> rows;
  for (size_t size : sizes) {
    Run run{o.op,  o.dtype,    o.redop,   o.root, layout_for(o.op, size, o.dtype, comm.size()),
            false, send.get(), recv.get()};
    Row row;
    row.bytes = run.layout.printed_bytes;
    row.count = run.layout.param;
    row.algorithm = comm.algorithm_for(op_kind(o.op), run.layout.algbw_bytes);
    const std::string where =
        std::string(bench_op_name(o.op)) + " of " + std::to_string(size) + " bytes";
    auto out_of_place = measure(comm, o, run, device.get());
    if (!out_of_place.ok()) return out_of_place.status().with_context(where + ", out of place");
    row.out_of_place = *out_of_place;
    if (supports_in_place(o.op)) {
      run.in_place = true;
      auto in_place = measure(comm, o, run, device.get());
      if (!in_place.ok()) return in_place.status().with_context(where + ", in place");
      row.in_place = *in_place;
    }
    on_row(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tessera::tools::bench_coll
