#include "cases.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>

#include "values.h"  // tools/tessera/bench_coll/values.h

namespace tessera::coll::testing {
namespace {

using hal::DType;
using hal::ReduceOp;
namespace values = tools::bench_coll;

constexpr unsigned char kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;
constexpr size_t kBig = (size_t(1) << 20) + 3;
constexpr size_t kAlltoallvStride = 17;  // index offset per destination in alltoallv inputs
constexpr int kMaxDetails = 4;

// A byte buffer between guard bytes; the data starts `misalign` bytes past a 16-byte boundary.
class Buffer {
 public:
  Buffer(size_t bytes, size_t misalign)
      : storage_(bytes + 2 * kGuardBytes + 8, kGuard),
        offset_(kGuardBytes + misalign),
        bytes_(bytes) {}
  unsigned char* data() { return storage_.data() + offset_; }
  // The whole storage, guard bytes included (mirrored to device memory for device cases).
  std::vector<unsigned char>& storage() { return storage_; }
  // Guard bytes (outside the data) that no longer hold the guard pattern.
  int64_t damaged_guards() const {
    int64_t damaged = 0;
    for (size_t i = 0; i < offset_; ++i) damaged += storage_[i] != kGuard;
    for (size_t i = offset_ + bytes_; i < storage_.size(); ++i) damaged += storage_[i] != kGuard;
    return damaged;
  }

 private:
  std::vector<unsigned char> storage_;
  size_t offset_;
  size_t bytes_;
};

bool is_reduction(OpKind op) {
  return op == OpKind::kAllReduce || op == OpKind::kReduce || op == OpKind::kReduceScatter;
}

// Counts and displacements of the v-variants: some ranks contribute nothing, blocks are separated
// by gaps that must stay untouched.
size_t gather_count(size_t count, int rank) {
  return rank % 3 == 1 ? 0 : count + size_t(rank);
}
size_t exchange_count(size_t count, int a, int b) {  // symmetric, so in place works
  return (a + b) % 3 == 0 ? 0 : count + size_t((a + b) % 4);
}
std::vector<size_t> displacements(const std::vector<size_t>& counts, size_t gap) {
  std::vector<size_t> displs(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = at;
    at += counts[i] + gap;
  }
  return displs;
}

// Where each operation reads and writes, in elements, and what it expects.
struct Plan {
  size_t send_elems = 0;  // out of place
  size_t recv_elems = 0;
  size_t inplace_elems = 0;    // the single buffer in place
  size_t inplace_send_at = 0;  // the send pointer's offset into it
  size_t inplace_recv_at = 0;
  size_t checked_elems = 0;  // elements checked from the receive pointer
  // input(j) / expected(i) depend on j / i only through j % kInputPeriod: computed for one
  // period and copied (the large sizes would otherwise spend most of the test here).
  bool periodic_input = false;
  bool periodic_expected = false;
  std::vector<size_t> counts, displs;                      // allgatherv
  std::vector<size_t> scounts, sdispls, rcounts, rdispls;  // alltoallv
  std::function<std::optional<double>(size_t)> input;      // send element j; nullopt: a gap
  std::function<std::optional<double>(size_t)> expected;   // receive element i; nullopt: a gap
};

Plan make_plan(const Case& c, int rank, int n) {
  Plan p;
  const size_t count = c.count;
  const DType dt = c.dtype;
  const ReduceOp redop = c.redop;
  auto movement = [dt](int r, size_t i) -> std::optional<double> {
    return values::movement_input(dt, r, i);
  };
  // Reductions cost O(ranks) per element: computed once per input period.
  std::vector<double> reduced;
  if (is_reduction(c.op)) {
    reduced.resize(values::kInputPeriod);
    for (size_t j = 0; j < reduced.size(); ++j) {
      reduced[j] = values::reduction_expected(redop, dt, n, j);
    }
  }
  auto reduction = [reduced = std::move(reduced)](size_t i) -> std::optional<double> {
    return reduced[i % values::kInputPeriod];
  };
  switch (c.op) {
    case OpKind::kAllReduce:
    case OpKind::kReduce:
      p.send_elems = p.recv_elems = p.inplace_elems = p.checked_elems = count;
      p.input = [=](size_t j) { return values::reduction_input(redop, dt, n, rank, j); };
      p.expected = reduction;
      p.periodic_input = p.periodic_expected = true;
      if (c.op == OpKind::kReduce && rank != c.root) p.checked_elems = 0;
      break;
    case OpKind::kBroadcast:
      p.send_elems = p.recv_elems = p.inplace_elems = p.checked_elems = count;
      p.input = [=](size_t j) { return movement(rank, j); };
      p.expected = [=, root = c.root](size_t i) { return movement(root, i); };
      p.periodic_input = p.periodic_expected = true;
      break;
    case OpKind::kAllGather:
      p.send_elems = count;
      p.recv_elems = p.inplace_elems = p.checked_elems = count * size_t(n);
      p.inplace_send_at = size_t(rank) * count;
      p.input = [=](size_t j) { return movement(rank, j); };
      p.periodic_input = true;
      p.expected = [=](size_t i) { return movement(int(i / count), i % count); };
      break;
    case OpKind::kAllGatherV: {
      for (int r = 0; r < n; ++r) p.counts.push_back(gather_count(count, r));
      p.displs = displacements(p.counts, 2);
      p.send_elems = p.counts[size_t(rank)];
      p.recv_elems = p.inplace_elems = p.checked_elems = p.displs.back() + p.counts.back();
      p.inplace_send_at = p.displs[size_t(rank)];
      p.input = [=](size_t j) { return movement(rank, j); };
      p.expected = [=, counts = p.counts, displs = p.displs](size_t i) -> std::optional<double> {
        for (int r = 0; r < n; ++r) {
          if (i >= displs[size_t(r)] && i < displs[size_t(r)] + counts[size_t(r)]) {
            return movement(r, i - displs[size_t(r)]);
          }
        }
        return std::nullopt;
      };
      break;
    }
    case OpKind::kReduceScatter:
      p.send_elems = p.inplace_elems = count * size_t(n);
      p.recv_elems = p.checked_elems = count;
      p.inplace_recv_at = size_t(rank) * count;
      p.input = [=](size_t j) { return values::reduction_input(redop, dt, n, rank, j); };
      p.expected = [=](size_t i) { return reduction(size_t(rank) * count + i); };
      p.periodic_input = p.periodic_expected = true;
      break;
    case OpKind::kAllToAll:
      p.send_elems = p.recv_elems = p.inplace_elems = p.checked_elems = count * size_t(n);
      p.input = [=](size_t j) { return movement(rank, j); };
      p.periodic_input = true;
      p.expected = [=](size_t i) {
        return movement(int(i / count), size_t(rank) * count + i % count);
      };
      break;
    case OpKind::kAllToAllV: {
      for (int q = 0; q < n; ++q) {
        p.scounts.push_back(exchange_count(count, rank, q));
        p.rcounts.push_back(exchange_count(count, q, rank));
      }
      p.sdispls = displacements(p.scounts, 1);
      p.rdispls = displacements(p.rcounts, 1);
      p.send_elems = p.sdispls.back() + p.scounts.back();
      p.recv_elems = p.inplace_elems = p.checked_elems = p.rdispls.back() + p.rcounts.back();
      auto block = [n](const std::vector<size_t>& counts, const std::vector<size_t>& displs,
                       size_t i) -> std::optional<std::pair<int, size_t>> {
        for (int q = 0; q < n; ++q) {
          if (i >= displs[size_t(q)] && i < displs[size_t(q)] + counts[size_t(q)]) {
            return std::make_pair(q, i - displs[size_t(q)]);
          }
        }
        return std::nullopt;
      };
      p.input = [=, sc = p.scounts, sd = p.sdispls](size_t j) -> std::optional<double> {
        auto b = block(sc, sd, j);
        if (!b) return std::nullopt;
        return movement(rank, size_t(b->first) * kAlltoallvStride + b->second);
      };
      p.expected = [=, rc = p.rcounts, rd = p.rdispls](size_t i) -> std::optional<double> {
        auto b = block(rc, rd, i);
        if (!b) return std::nullopt;
        return movement(b->first, size_t(rank) * kAlltoallvStride + b->second);
      };
      break;
    }
    case OpKind::kSend: {
      p.send_elems = p.recv_elems = p.checked_elems = count;
      const int prev = (rank + n - 1) % n;
      p.input = [=](size_t j) { return movement(rank, j); };
      p.expected = [=](size_t i) { return movement(prev, i); };
      p.periodic_input = p.periodic_expected = true;
      break;
    }
    default: break;
  }
  return p;
}

void fill(unsigned char* base, size_t elems, DType dtype,
          const std::function<std::optional<double>(size_t)>& input, bool periodic) {
  const size_t computed = periodic ? std::min(elems, values::kInputPeriod) : elems;
  for (size_t j = 0; j < computed; ++j) {
    if (auto v = input(j)) values::store(base, j, dtype, *v);
  }
  const size_t period_bytes = computed * hal::dtype_size(dtype);
  for (size_t at = computed; at < elems; at += computed) {
    std::memcpy(base + at * hal::dtype_size(dtype), base,
                std::min(period_bytes, (elems - at) * hal::dtype_size(dtype)));
  }
}

struct Call {
  const void* send;
  void* recv;
};

Status call_blocking(Communicator& comm, const Case& c, const Plan& p, Call b) {
  const int rank = comm.rank();
  const int n = comm.size();
  switch (c.op) {
    case OpKind::kAllReduce: return comm.allreduce(b.send, b.recv, c.count, c.dtype, c.redop);
    case OpKind::kReduce: return comm.reduce(b.send, b.recv, c.count, c.dtype, c.redop, c.root);
    case OpKind::kBroadcast: return comm.broadcast(b.send, b.recv, c.count, c.dtype, c.root);
    case OpKind::kAllGather: return comm.allgather(b.send, b.recv, c.count, c.dtype);
    case OpKind::kAllGatherV: return comm.allgatherv(b.send, b.recv, p.counts, p.displs, c.dtype);
    case OpKind::kReduceScatter:
      return comm.reduce_scatter(b.send, b.recv, c.count, c.dtype, c.redop);
    case OpKind::kAllToAll: return comm.alltoall(b.send, b.recv, c.count, c.dtype);
    case OpKind::kAllToAllV:
      return comm.alltoallv(b.send, p.scounts, p.sdispls, b.recv, p.rcounts, p.rdispls, c.dtype);
    case OpKind::kSend: {
      // Blocking: even ranks send first, odd ranks receive first, so no cycle of senders forms.
      const int next = (rank + 1) % n;
      const int prev = (rank + n - 1) % n;
      if (rank % 2 == 0) {
        TSR_RETURN_IF_ERROR(comm.send(b.send, c.count, c.dtype, next));
        return comm.recv(b.recv, c.count, c.dtype, prev);
      }
      TSR_RETURN_IF_ERROR(comm.recv(b.recv, c.count, c.dtype, prev));
      return comm.send(b.send, c.count, c.dtype, next);
    }
    case OpKind::kBarrier: return comm.barrier();
    default: return unimplemented("no blocking call for this case");
  }
}

Status call_on_stream(Communicator& comm, const hal::Stream& s, const Case& c, Call b) {
  Result<Work> work = unimplemented("no stream call for " + std::string(op_name(c.op)));
  switch (c.op) {
    case OpKind::kAllReduce:
      work = comm.allreduce(b.send, b.recv, c.count, c.dtype, c.redop, s);
      break;
    case OpKind::kBroadcast:
      work = comm.broadcast(b.send, b.recv, c.count, c.dtype, c.root, s);
      break;
    case OpKind::kAllGather: work = comm.allgather(b.send, b.recv, c.count, c.dtype, s); break;
    case OpKind::kReduceScatter:
      work = comm.reduce_scatter(b.send, b.recv, c.count, c.dtype, c.redop, s);
      break;
    case OpKind::kAllToAll: work = comm.alltoall(b.send, b.recv, c.count, c.dtype, s); break;
    default: break;
  }
  if (!work.ok()) return work.status();
  return work->wait(std::chrono::milliseconds(120000));
}

// A device copy of a Buffer's whole storage (guards included), so a device case checks the same
// bytes a host case does once they are copied back. The CPU never touches the device pointer.
class DeviceMirror {
 public:
  static Result<DeviceMirror> upload(const hal::Device& device, const hal::Stream& stream,
                                     Buffer& host) {
    DeviceMirror m;
    m.host_ = &host;
    const size_t bytes = host.storage().size();
    TSR_ASSIGN_OR_RETURN(m.memory_, device.allocate(bytes));
    TSR_ASSIGN_OR_RETURN(m.pinned_, device.allocate_host(bytes));
    std::memcpy(m.pinned_.data(), host.storage().data(), bytes);
    TSR_RETURN_IF_ERROR(stream.copy(m.memory_.data(), m.pinned_.data(), bytes));
    TSR_RETURN_IF_ERROR(stream.synchronize());
    return m;
  }
  // The device address of `host_ptr`, a pointer into the host buffer.
  void* at(const void* host_ptr) const {
    return static_cast<char*>(memory_.data()) +
           (static_cast<const unsigned char*>(host_ptr) - host_->storage().data());
  }
  Status download(const hal::Stream& stream) {
    const size_t bytes = host_->storage().size();
    TSR_RETURN_IF_ERROR(stream.copy(pinned_.data(), memory_.data(), bytes));
    TSR_RETURN_IF_ERROR(stream.synchronize());
    std::memcpy(host_->storage().data(), pinned_.data(), bytes);
    return Status();
  }

 private:
  Buffer* host_ = nullptr;
  hal::DeviceBuffer memory_;
  hal::HostBuffer pinned_;
};

std::string value_text(const void* base, size_t i, DType dtype) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", values::load(base, i, dtype));
  return text;
}

}  // namespace

std::string describe(const Case& c, int nranks) {
  std::string out = std::string(op_name(c.op) == "send" ? "send/recv" : op_name(c.op));
  if (c.op == OpKind::kBarrier) return out + ", " + std::to_string(nranks) + " ranks";
  out += " " + std::string(hal::dtype_name(c.dtype));
  if (is_reduction(c.op)) out += " " + std::string(hal::reduce_op_name(c.redop));
  out += " x " + std::to_string(c.count) + ", " + std::to_string(nranks) + " ranks";
  if (c.op == OpKind::kReduce || c.op == OpKind::kBroadcast) {
    out += ", root " + std::to_string(c.root);
  }
  out += c.in_place ? ", in place" : ", out of place";
  if (c.unaligned) out += c.in_place ? ", unaligned (+1 B)" : ", unaligned (send +1 B, recv +3 B)";
  if (c.on_stream) out += ", on a stream";
  if (c.device) out += ", device memory";
  return out;
}

std::vector<Case> all_cases(int nranks) {
  struct OpSpec {
    OpKind op;
    bool in_place;
  };
  const OpSpec ops[] = {
      {OpKind::kAllReduce, true}, {OpKind::kReduce, true},     {OpKind::kBroadcast, true},
      {OpKind::kAllGather, true}, {OpKind::kAllGatherV, true}, {OpKind::kReduceScatter, true},
      {OpKind::kAllToAll, true},  {OpKind::kAllToAllV, true},  {OpKind::kSend, false}};
  // The (1<<20)+3 size only for these (op, dtype, redop, in place) combinations, see the header
  // of correctness_test.cc.
  auto big_allowed = [](const Case& c) {
    const bool sum = c.redop == ReduceOp::kSum;
    switch (c.op) {
      case OpKind::kAllReduce:
        return (c.dtype == DType::kF32 && sum) ||
               (!c.in_place &&
                ((c.dtype == DType::kBF16 && sum) || (c.dtype == DType::kI64 && sum) ||
                 (c.dtype == DType::kF16 && c.redop == ReduceOp::kAvg) ||
                 (c.dtype == DType::kF64 && c.redop == ReduceOp::kMax)));
      case OpKind::kReduceScatter: return c.dtype == DType::kF32 && sum;
      case OpKind::kReduce: return !c.in_place && c.dtype == DType::kF32 && sum;
      case OpKind::kBroadcast: return !c.in_place && c.dtype == DType::kU8;
      case OpKind::kAllGather: return !c.in_place && c.dtype == DType::kBF16;
      case OpKind::kAllGatherV: return !c.in_place && c.dtype == DType::kF32;
      case OpKind::kAllToAll: return !c.in_place && c.dtype == DType::kI32;
      case OpKind::kAllToAllV: return !c.in_place && c.dtype == DType::kF16;
      case OpKind::kSend: return c.dtype == DType::kI64;
      default: return false;
    }
  };
  std::vector<Case> cases;
  for (size_t count : {size_t(1), size_t(7), size_t(1000), kBig}) {
    for (DType dtype : hal::kAllDTypes) {
      for (const OpSpec& spec : ops) {
        const bool reduces = is_reduction(spec.op);
        for (ReduceOp redop : hal::kAllReduceOps) {
          if (!reduces && redop != ReduceOp::kSum) continue;
          for (bool in_place : {false, true}) {
            if (in_place && !spec.in_place) continue;
            Case c;
            c.op = spec.op;
            c.dtype = dtype;
            c.redop = redop;
            c.count = count;
            c.in_place = in_place;
            c.unaligned = (count == 7 || count == 1000) && hal::dtype_size(dtype) > 1 &&
                          (int(spec.op) + int(dtype) + int(redop) + (in_place ? 1 : 0)) % 2 == 0;
            c.root = int((count + size_t(spec.op)) % size_t(nranks));
            if (count == kBig && !big_allowed(c)) continue;
            cases.push_back(c);
          }
        }
      }
    }
    Case barrier;
    barrier.op = OpKind::kBarrier;
    cases.push_back(barrier);
  }
  // Device memory: every operation, counts around the staged route's chunk boundaries, both
  // placements; bf16 with every reduction at the small sizes.
  const size_t chunk = kStageChunkBytes / sizeof(float);
  for (size_t count :
       {size_t(1), size_t(7), size_t(1000), chunk - 1, chunk, chunk + 1, 2 * chunk + 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      if (dtype == DType::kBF16 && count > 1000) continue;
      for (const OpSpec& spec : ops) {
        const bool reduces = is_reduction(spec.op);
        for (ReduceOp redop : hal::kAllReduceOps) {
          if (redop != ReduceOp::kSum && (!reduces || dtype != DType::kBF16)) continue;
          for (bool in_place : {false, true}) {
            if (in_place && !spec.in_place) continue;
            Case c;
            c.op = spec.op;
            c.dtype = dtype;
            c.redop = redop;
            c.count = count;
            c.in_place = in_place;
            c.unaligned = (count == 7 || count == 1000) && (int(spec.op) + (in_place ? 1 : 0)) % 2;
            c.root = int((count + size_t(spec.op)) % size_t(nranks));
            c.device = true;
            cases.push_back(c);
          }
        }
      }
    }
  }
  for (OpKind op : {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kAllGather,
                    OpKind::kReduceScatter, OpKind::kAllToAll}) {
    for (size_t count : {size_t(1000), chunk + 1}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.op = op;
        c.dtype = DType::kF32;
        c.count = count;
        c.in_place = in_place;
        c.root = 0;
        c.on_stream = true;
        c.device = true;
        cases.push_back(c);
      }
    }
  }
  for (OpKind op : {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kAllGather,
                    OpKind::kReduceScatter, OpKind::kAllToAll}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.op = op;
        c.dtype = dtype;
        c.count = 1000;
        c.in_place = in_place;
        c.root = nranks - 1;
        c.on_stream = true;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

Outcome run_case(Communicator& comm, const hal::Device* device, const hal::Stream* stream,
                 const Case& c) {
  Outcome out;
  if (c.op == OpKind::kBarrier) {
    out.status = comm.barrier();
    return out;
  }
  const int rank = comm.rank();
  const int n = comm.size();
  const size_t ts = hal::dtype_size(c.dtype);
  const Plan p = make_plan(c, rank, n);
  const size_t send_misalign = c.unaligned ? 1 : 0;
  const size_t recv_misalign = c.unaligned ? (c.in_place ? 1 : 3) : 0;

  Buffer send_buf(c.in_place ? 0 : p.send_elems * ts, send_misalign);
  Buffer recv_buf((c.in_place ? p.inplace_elems : p.recv_elems) * ts, recv_misalign);
  Call call;
  std::vector<unsigned char> sent;  // out of place: the input, which must survive
  if (c.in_place) {
    call.send = recv_buf.data() + p.inplace_send_at * ts;
    call.recv = recv_buf.data() + p.inplace_recv_at * ts;
    fill(recv_buf.data() + p.inplace_send_at * ts, p.send_elems, c.dtype, p.input,
         p.periodic_input);
  } else {
    call.send = send_buf.data();
    call.recv = recv_buf.data();
    fill(send_buf.data(), p.send_elems, c.dtype, p.input, p.periodic_input);
    sent.assign(send_buf.data(), send_buf.data() + p.send_elems * ts);
  }

  std::optional<DeviceMirror> send_dev, recv_dev;
  if (c.device) {
    if (device == nullptr || stream == nullptr) {
      out.status = failed_precondition("a device case needs the device and a stream");
      return out;
    }
    auto uploaded = DeviceMirror::upload(*device, *stream, recv_buf);
    if (!uploaded.ok()) {
      out.status = uploaded.status();
      return out;
    }
    recv_dev.emplace(std::move(*uploaded));
    if (!c.in_place) {
      uploaded = DeviceMirror::upload(*device, *stream, send_buf);
      if (!uploaded.ok()) {
        out.status = uploaded.status();
        return out;
      }
      send_dev.emplace(std::move(*uploaded));
    }
    const DeviceMirror& s = c.in_place ? *recv_dev : *send_dev;
    call.send = s.at(call.send);
    call.recv = recv_dev->at(call.recv);
  }

  const auto start = std::chrono::steady_clock::now();
  out.status =
      c.on_stream ? call_on_stream(comm, *stream, c, call) : call_blocking(comm, c, p, call);
  out.op_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!out.status.ok()) return out;
  if (c.device) {
    // Back to host memory: the checks below read the host copies (guards included).
    out.status = recv_dev->download(*stream);
    if (out.status.ok() && send_dev) out.status = send_dev->download(*stream);
    if (!out.status.ok()) return out;
    call.recv = recv_buf.data() + (c.in_place ? p.inplace_recv_at * ts : 0);
  }

  auto note = [&](const std::string& line) {
    if (++out.wrong <= kMaxDetails) out.detail += "    " + line + "\n";
  };
  const auto* result = static_cast<const unsigned char*>(call.recv);
  // The expected bytes (gaps hold the guard pattern); element by element only when they differ.
  std::vector<unsigned char> expected(p.checked_elems * ts, kGuard);
  for (size_t i = 0; i < p.checked_elems; ++i) {
    if (const std::optional<double> v = p.expected(i))
      values::store(expected.data(), i, c.dtype, *v);
  }
  const bool identical =
      expected.empty() || std::memcmp(result, expected.data(), expected.size()) == 0;
  for (size_t i = 0; i < p.checked_elems && !identical; ++i) {
    const std::optional<double> want = p.expected(i);
    if (!want) {
      for (size_t b = 0; b < ts; ++b) {
        if (result[i * ts + b] != kGuard) {
          note("element " + std::to_string(i) + " lies in a gap between blocks but was written");
          break;
        }
      }
      continue;
    }
    const int ulps = c.redop == ReduceOp::kAvg && is_reduction(c.op) ? 2 : 0;
    if (!values::element_matches(result, i, c.dtype, *want, ulps)) {
      unsigned char expected_bits[8];
      values::store(expected_bits, 0, c.dtype, *want);
      note("element " + std::to_string(i) + ": got " + value_text(result, i, c.dtype) +
           ", expected " + value_text(expected_bits, 0, c.dtype));
    }
  }
  if (const int64_t damaged = recv_buf.damaged_guards(); damaged > 0) {
    note(std::to_string(damaged) + " guard bytes around the receive buffer were overwritten");
  }
  if (!c.in_place) {
    if (const int64_t damaged = send_buf.damaged_guards(); damaged > 0) {
      note(std::to_string(damaged) + " guard bytes around the send buffer were overwritten");
    }
    if (!sent.empty() && std::memcmp(sent.data(), send_buf.data(), sent.size()) != 0) {
      note("the send buffer was modified by an out-of-place operation");
    }
  }
  return out;
}

}  // namespace tessera::coll::testing
