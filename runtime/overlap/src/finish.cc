// GradSync::finish (the end of a step, its counters, trace and log line), codec state, compute
// spans and accessors.
#include <algorithm>
#include <sstream>

#include "engine.h"
#include "tessera/common/log.h"

namespace tessera::overlap {
namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

constexpr uint64_t kStateMagic = 0x3150564f52535431ull;  // "1TSROVP1"-ish tag, version 1

void write_trace(GradSync::Impl& m, const StepStats& stats, Clock::time_point exposed_from,
                 Clock::time_point done) {
  Trace& trace = *m.trace;
  Clock::time_point previous_done{};
  for (size_t i = 0; i < m.buckets.size(); ++i) {
    const Bucket& b = m.buckets[i];
    const BucketTimes& t = b.times;
    const std::string name = "bucket " + std::to_string(i);
    std::ostringstream args;
    args << "\"bucket\":" << i << ",\"params\":" << b.info.params.size()
         << ",\"bytes\":" << b.info.bytes << ",\"wire_bytes\":"
         << (b.codec ? b.codec->wire_bytes() : b.shard * hal::dtype_size(b.info.dtype))
         << ",\"algorithm\":" << json_string(b.algorithm)
         << ",\"codec\":" << json_string(b.codec ? b.codec->name() : "reduce_scatter")
         << ",\"step\":" << stats.step;
    const std::string a = args.str();
    trace.span(name + " wait", "wait", Trace::kComm, std::max(t.launched, previous_done), t.started,
               a);
    trace.span(name + " compress", "compress", Trace::kComm, t.started, t.encoded, a);
    trace.span(name + " communicate", "communicate", Trace::kComm, t.encoded, t.communicated, a);
    trace.span(name + " decompress", "decompress", Trace::kComm, t.communicated, t.done, a);
    previous_done = t.done;
  }
  std::ostringstream args;
  args << "\"step\":" << stats.step << ",\"comm_s\":" << stats.comm_seconds
       << ",\"exposed_s\":" << stats.exposed_seconds << ",\"overlap_ratio\":" << stats.overlap_ratio
       << ",\"payload_bytes\":" << stats.payload_bytes << ",\"wire_bytes\":" << stats.wire_bytes;
  trace.span("step " + std::to_string(stats.step), "step", Trace::kEngine, m.step_start, done,
             args.str());
  trace.span("exposed communication", "exposed", Trace::kEngine, exposed_from, done, args.str());
  trace.flush();
}

// finish() refuses to end a step while a parameter is gathered: its gathered copy would go stale
// under the optimizer.
Status check_nothing_gathered(const GradSync::Impl& m) {
  for (const Param& p : m.params) {
    if (p.holds > 0) {
      return failed_precondition("finish(): parameter '" + p.name + "' is still gathered (" +
                                 std::to_string(p.holds) + " gather() without release())");
    }
  }
  return Status();
}

// Gradients neither marked ready nor unused: refused (naming the first eight), or marked unused
// (zero-filled) when the options say so. Counts the unused parameters into `stats`.
Status settle_unmarked(GradSync::Impl& m, StepStats& stats) {
  std::vector<std::string> unmarked;
  for (auto& p : m.params) {
    if (p.mark == Mark::kNone) unmarked.push_back(p.name);
  }
  if (!unmarked.empty() && !m.options.zero_fill_unmarked) {
    std::string names;
    for (size_t i = 0; i < unmarked.size() && i < 8; ++i) {
      names += (i ? ", '" : "'") + unmarked[i] + "'";
    }
    if (unmarked.size() > 8) names += ", ...";
    return m.fail_step(failed_precondition("finish() in step " + std::to_string(m.step) +
                                           " before " + std::to_string(unmarked.size()) + " of " +
                                           std::to_string(m.params.size()) +
                                           " gradients were marked ready or unused: " + names +
                                           " (mark_unused() them, or set zero_fill_unmarked)"),
                       /*abort_comm=*/true);
  }
  for (auto& p : m.params) {
    if (p.mark == Mark::kNone) {
      p.mark = Mark::kUnused;
      --m.buckets[size_t(p.bucket)].pending;
    }
    if (p.mark == Mark::kUnused) ++stats.unused_params;
  }
  return Status();
}

// When compute ended: the engine's events complete exactly when the gradients were ready.
Result<Clock::time_point> wait_for_gradients(GradSync::Impl& m) {
  for (auto& p : m.params) {
    if (p.mark != Mark::kReady) continue;
    if (Status s = p.ready.synchronize(); !s.ok()) {
      return m.fail_step(s.with_context("waiting for the gradient of '" + p.name + "'"), true);
    }
  }
  return Clock::now();
}

// Every bucket's collectives, the communication stream, prefetched gathers and the stream
// callbacks' errors: the step's communication is over when this returns OK.
Status wait_for_communication(GradSync::Impl& m) {
  for (size_t i = 0; i < m.buckets.size(); ++i) {
    Bucket& b = m.buckets[i];
    const std::string what = "step " + std::to_string(m.step) + ", bucket " + std::to_string(i) +
                             " (" + std::to_string(b.info.bytes) + " bytes, first parameter '" +
                             m.params[size_t(b.info.params.front())].name + "')";
    if (Status s = m.wait_works(b.works, what); !s.ok()) return m.fail_step(s, true);
    b.works.clear();
  }
  if (Status s = m.comm_stream.synchronize(); !s.ok()) {
    return m.fail_step(s.with_context("overlap communication stream"), true);
  }
  if (m.sharded_params()) {
    // Prefetches nobody asked for may still read the shards the optimizer is about to update.
    if (Status s = m.wait_gathers("step " + std::to_string(m.step)); !s.ok()) {
      return m.fail_step(s, true);
    }
    m.forget_gathered();
  }
  std::lock_guard lock(m.callback_mutex);
  if (!m.callback_error.ok()) return m.fail_step(m.callback_error, true);
  return Status();
}

// The step's bytes and times from its buckets: communication is exposed from when both the
// trainer called finish() and compute ended, until `done`.
void account_step(GradSync::Impl& m, StepStats& stats, Clock::time_point exposed_from,
                  Clock::time_point done) {
  for (Bucket& b : m.buckets) {
    // Steps a bucket did not stamp took no time: encoding (the plain codec), decoding.
    if (b.times.encoded == Clock::time_point{}) b.times.encoded = b.times.started;
    if (b.done_at_communicated) b.times.done = b.times.communicated;
    stats.payload_bytes += b.info.bytes;
    stats.wire_bytes +=
        b.codec ? b.codec->wire_bytes() : b.shard * hal::dtype_size(b.info.dtype) * m.world();
    stats.comm_seconds += seconds(b.times.done - b.times.started);
  }
  stats.buckets = m.buckets.size();
  stats.step_seconds = seconds(done - m.step_start);
  stats.exposed_seconds = std::max(0.0, seconds(done - exposed_from));
  stats.overlap_ratio = stats.comm_seconds > 0
                            ? std::clamp(1.0 - stats.exposed_seconds / stats.comm_seconds, 0.0, 1.0)
                            : 1.0;
}

void log_step(const GradSync::Impl& m, const StepStats& stats) {
  TSR_LOG(kInfo, "overlap") << "rank " << m.rank() << " step " << stats.step << ": "
                            << stats.buckets << " buckets, " << stats.payload_bytes
                            << " bytes (wire " << stats.wire_bytes << "), step "
                            << stats.step_seconds * 1e3 << " ms, communication "
                            << stats.comm_seconds * 1e3 << " ms, exposed "
                            << stats.exposed_seconds * 1e3 << " ms, overlap "
                            << stats.overlap_ratio * 100 << "%";
}

}  // namespace

Result<StepStats> GradSync::finish() {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (m.params.empty()) return StepStats{.step = m.step++};
  const Clock::time_point entry = Clock::now();
  TSR_RETURN_IF_ERROR(check_nothing_gathered(m));
  if (!m.in_step) {  // a step in which nothing was marked
    TSR_RETURN_IF_ERROR(m.build());
    m.begin_step(entry);
  }
  StepStats stats;
  stats.step = m.step;
  TSR_RETURN_IF_ERROR(settle_unmarked(m, stats));
  TSR_RETURN_IF_ERROR(m.launch_ready_buckets());
  TSR_ASSIGN_OR_RETURN(const Clock::time_point compute_end, wait_for_gradients(m));
  TSR_RETURN_IF_ERROR(wait_for_communication(m));
  const Clock::time_point done = Clock::now();
  const Clock::time_point exposed_from = std::max(entry, compute_end);
  account_step(m, stats, exposed_from, done);
  if (m.trace) write_trace(m, stats, exposed_from, done);
  log_step(m, stats);
  m.in_step = false;
  ++m.step;
  return stats;
}

// ---- codec state ---------------------------------------------------------------------------

Result<std::vector<uint8_t>> GradSync::codec_state() {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (m.in_step) return failed_precondition("codec_state: a step is in flight; finish() first");
  TSR_RETURN_IF_ERROR(m.build());
  TSR_RETURN_IF_ERROR(m.comm_stream.synchronize());
  ByteWriter out;
  out.u64(kStateMagic);
  out.u64(uint64_t(m.options.codec.kind));
  out.u64(m.buckets.size());
  for (const Bucket& b : m.buckets) {
    out.u64(b.info.count);
    if (b.codec) TSR_RETURN_IF_ERROR(b.codec->save(m.comm_stream, out));
  }
  return std::move(out.bytes());
}

Status GradSync::set_codec_state(std::span<const uint8_t> bytes) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (m.in_step) return failed_precondition("set_codec_state: a step is in flight");
  TSR_RETURN_IF_ERROR(m.build());
  TSR_RETURN_IF_ERROR(m.comm_stream.synchronize());
  ByteReader in(bytes);
  uint64_t value = 0;
  TSR_RETURN_IF_ERROR(in.u64(&value, "the header"));
  if (value != kStateMagic) {
    return invalid_argument("codec state: not an overlap codec state (bad magic/version)");
  }
  TSR_RETURN_IF_ERROR(in.u64(&value, "the codec kind"));
  if (value != uint64_t(m.options.codec.kind)) {
    return invalid_argument("codec state: saved with codec " + std::to_string(value) +
                            ", this engine uses '" + std::string(codec_name(m.options.codec.kind)) +
                            "'");
  }
  TSR_RETURN_IF_ERROR(in.u64(&value, "the bucket count"));
  if (value != m.buckets.size()) {
    return invalid_argument("codec state: " + std::to_string(value) + " buckets, this engine has " +
                            std::to_string(m.buckets.size()));
  }
  for (size_t i = 0; i < m.buckets.size(); ++i) {
    Bucket& b = m.buckets[i];
    const std::string where = "codec state bucket " + std::to_string(i);
    TSR_RETURN_IF_ERROR(in.u64(&value, where + " size"));
    if (value != b.info.count) {
      return invalid_argument(where + ": " + std::to_string(value) + " elements, this engine has " +
                              std::to_string(b.info.count));
    }
    if (b.codec) TSR_RETURN_IF_ERROR(b.codec->load(m.comm_stream, in, where));
  }
  if (in.remaining() != 0) {
    return invalid_argument("codec state: " + std::to_string(in.remaining()) +
                            " trailing bytes after the last bucket");
  }
  return Status();
}

// ---- compute spans -------------------------------------------------------------------------

Status GradSync::trace_compute_begin(const hal::Stream& stream, std::string name) {
  Impl& m = *impl_;
  if (!m.trace) return Status();
  return stream.add_callback(
      [book = m.spans, handle = stream.handle(), name = std::move(name)](Status) {
        std::lock_guard lock(book->mutex);
        book->open[handle].emplace_back(name, Clock::now());
      });
}

Status GradSync::trace_compute_end(const hal::Stream& stream) {
  Impl& m = *impl_;
  if (!m.trace) return Status();
  return stream.add_callback([book = m.spans, handle = stream.handle()](Status) {
    const Clock::time_point now = Clock::now();
    std::lock_guard lock(book->mutex);
    auto& open = book->open[handle];
    if (open.empty()) return;  // an end without a begin: nothing to draw
    book->trace->span(open.back().first, "compute", Trace::kCompute, open.back().second, now);
    open.pop_back();
  });
}

// ---- accessors -------------------------------------------------------------------------------

const std::vector<BucketInfo>& GradSync::buckets() {
  impl_->build().ignore();  // on failure the list stays empty; the next mark reports the error
  return impl_->bucket_infos;
}
size_t GradSync::bucket_bytes() const {
  return impl_->bucket_bytes;
}
const GradSyncOptions& GradSync::options() const {
  return impl_->options;
}
uint64_t GradSync::steps_done() const {
  return impl_->step;
}
const std::vector<ShardSegment>& GradSync::shard_segments() const {
  return impl_->segments;
}
size_t GradSync::shard_elements() const {
  return impl_->shard_elements;
}

}  // namespace tessera::overlap
