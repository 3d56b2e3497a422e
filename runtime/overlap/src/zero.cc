// kShardedOptimizer (ZeRO-1/2) after the optimizer step: every rank's updated shard of each
// bucket is all-gathered back into the full parameters, the buckets holding the first layers
// first (they are the last buckets, as buckets follow reverse registration order), so the next
// forward can start on them while the rest still moves.
#include "engine.h"

namespace tessera::overlap {

Status GradSync::gather_parameters(const hal::Stream* optimizer) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (!m.sharded()) {
    return failed_precondition("gather_parameters: only in the sharded modes");
  }
  if (!m.built || m.in_step) {
    return failed_precondition("gather_parameters: call it after finish() and the optimizer");
  }
  if (m.sharded_params()) {
    // ZeRO-3: nothing to copy back; later gathers wait for the optimizer, and the next
    // forward's first prefetch_buckets buckets (the last ones) start moving now.
    if (optimizer != nullptr) {
      TSR_ASSIGN_OR_RETURN(hal::Event done, m.device.create_event(false));
      TSR_RETURN_IF_ERROR(done.record(*optimizer));
      TSR_RETURN_IF_ERROR(m.gather_stream.wait(done));
      // The next step's reduce-scatters overwrite the gradient shards the optimizer reads.
      TSR_RETURN_IF_ERROR(m.comm_stream.wait(done));
    }
    const int last = int(m.buckets.size()) - 1;
    for (int i = last; i >= 0 && i > last - m.options.prefetch_buckets; --i) {
      if (Status s = m.ensure_gathered(i, /*demand=*/false); !s.ok()) return m.fail_step(s, true);
    }
    return Status();
  }
  if (optimizer != nullptr) {
    // The relay stream records after the optimizer's work; the communication stream waits.
    TSR_ASSIGN_OR_RETURN(hal::Event done, m.device.create_event(false));
    TSR_RETURN_IF_ERROR(done.record(*optimizer));
    TSR_RETURN_IF_ERROR(m.comm_stream.wait(done));
  }
  const int rank = m.rank();
  for (int i = int(m.buckets.size()) - 1; i >= 0; --i) {
    Bucket& b = m.buckets[size_t(i)];
    const size_t size = hal::dtype_size(b.info.dtype);
    char* flat = static_cast<char*>(b.flat.data());
    b.gather_works.clear();
    // This rank's updated shard into its slot of the flat buffer.
    const size_t lo = size_t(rank) * b.shard;
    const size_t hi = std::min(lo + b.shard, b.info.count);
    for (int p : b.info.params) {
      const Param& param = m.params[size_t(p)];
      const size_t a = std::max(lo, param.offset);
      const size_t z = std::min(hi, param.offset + param.count);
      if (a >= z) continue;
      TSR_RETURN_IF_ERROR(m.comm_stream.copy(
          flat + a * size, static_cast<const char*>(param.data) + (a - param.offset) * size,
          (z - a) * size));
    }
    auto work = m.comm->allgather(flat + lo * size, flat, b.shard, b.info.dtype, m.comm_stream);
    if (!work.ok()) return m.fail_step(work.status().with_context("parameter all-gather"), true);
    b.gather_works.push_back(std::move(work.value()));
    for (int p : b.info.params) {
      const Param& param = m.params[size_t(p)];
      TSR_RETURN_IF_ERROR(m.comm_stream.copy(param.data, flat + param.offset * size, param.bytes));
    }
    TSR_RETURN_IF_ERROR(b.gathered.record(m.comm_stream));
  }
  return Status();
}

Status GradSync::wait_parameter(int param, const hal::Stream& compute) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (param < 0 || size_t(param) >= m.params.size()) {
    return out_of_range("wait_parameter: parameter index " + std::to_string(param) +
                        " is not registered");
  }
  if (!m.sharded() || !m.built) {
    return failed_precondition("wait_parameter: no parameter all-gather in this engine yet");
  }
  const Bucket& b = m.buckets[size_t(m.params[size_t(param)].bucket)];
  if (m.sharded_params() && b.slot < 0) {
    return failed_precondition("wait_parameter: parameter '" + m.params[size_t(param)].name +
                               "' is not gathered (in the sharded parameters mode, gather() it)");
  }
  return compute.wait(b.gathered);
}

Status GradSync::wait_parameters() {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  for (size_t i = 0; i < m.buckets.size(); ++i) {
    Bucket& b = m.buckets[i];
    const std::string what = "parameter all-gather of bucket " + std::to_string(i);
    if (Status s = m.wait_works(b.gather_works, what); !s.ok()) return m.fail_step(s, true);
    b.gather_works.clear();
  }
  if (Status s = m.comm_stream.synchronize(); !s.ok()) {
    return m.fail_step(s.with_context("overlap communication stream"), true);
  }
  if (m.sharded_params()) {
    if (Status s = m.wait_gathers("wait_parameters"); !s.ok()) return m.fail_step(s, true);
  }
  return Status();
}

}  // namespace tessera::overlap
