// GradSync: options, registration, marks and bucket launches (finish() is in finish.cc).
#include "tessera/overlap/grad_sync.h"

#include <cstdlib>
#include <exception>

#include "engine.h"
#include "tessera/common/log.h"

namespace tessera::overlap {
namespace {

hal::ReduceOp reduce_op(Reduction r) {
  return r == Reduction::kAverage ? hal::ReduceOp::kAvg : hal::ReduceOp::kSum;
}

}  // namespace

GradSync::GradSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GradSync::~GradSync() {
  // Collectives of an abandoned step would wait for peers until the timeout: release them.
  if (impl_->in_step && impl_->next_launch > 0 && impl_->failure.ok()) {
    impl_->comm->abort("GradSync destroyed in the middle of step " + std::to_string(impl_->step));
  }
  if (impl_->gather_comm && impl_->failure.ok()) {
    for (const Bucket& b : impl_->buckets) {
      for (const coll::Work& w : b.gather_works) {
        if (!w.done()) {
          impl_->gather_comm->abort("GradSync destroyed with a parameter all-gather in flight");
          break;
        }
      }
      if (impl_->gather_comm->aborted()) break;
    }
  }
  // Nothing queued may outlive the buffers and codecs it uses.
  for (hal::Stream* s : {&impl_->relay_stream, &impl_->comm_stream, &impl_->gather_stream}) {
    if (s->handle() == nullptr) continue;
    if (Status st = s->synchronize(); !st.ok()) {
      TSR_LOG(kWarn, "overlap") << "GradSync teardown: " << st.to_string();
    }
  }
}

Result<std::unique_ptr<GradSync>> GradSync::create(std::shared_ptr<coll::Communicator> comm,
                                                   const hal::Device& device,
                                                   GradSyncOptions options) {
  if (comm == nullptr) return invalid_argument("GradSync: communicator is null");
  const CodecOptions& c = options.codec;
  if (!(c.topk_ratio > 0 && c.topk_ratio <= 1)) {
    return invalid_argument("GradSync: codec.topk_ratio " + std::to_string(c.topk_ratio) +
                            " is outside (0, 1]");
  }
  if (c.powersgd_rank < 1) {
    return invalid_argument("GradSync: codec.powersgd_rank " + std::to_string(c.powersgd_rank) +
                            " must be at least 1");
  }
  if (options.mode != SyncMode::kAllReduce && c.kind != CodecKind::kNone) {
    return invalid_argument(std::string("GradSync: codec '") + std::string(codec_name(c.kind)) +
                            "' is only supported in allreduce mode, not with the sharded modes");
  }
  if (options.prefetch_buckets < 0) {
    return invalid_argument("GradSync: prefetch_buckets " +
                            std::to_string(options.prefetch_buckets) + " is negative");
  }
  // The codecs run on the device: each needs its backend's kernels.
  const tsr_backend_api_v1& api = device.backend()->api();
  const char* missing = nullptr;
  if (c.kind == CodecKind::kPowerSgd && api.gemm_async == nullptr) missing = "GEMM (gemm_async)";
  if (c.kind == CodecKind::kBf16 && api.cast_async == nullptr) missing = "cast (cast_async)";
  if ((c.kind == CodecKind::kPowerSgd || c.kind == CodecKind::kTopK) && c.error_feedback &&
      api.reduce_async == nullptr) {
    missing = "reduce (reduce_async), for error feedback";
  }
  if (missing != nullptr) {
    return unimplemented("GradSync: codec '" + std::string(codec_name(c.kind)) + "' needs " +
                         missing + ", which backend '" + device.backend_name() + "' lacks");
  }
  auto impl = std::make_unique<Impl>(device);
  impl->comm = std::move(comm);
  impl->options = std::move(options);
  if (impl->options.timeout.count() > 0) impl->timeout = impl->options.timeout;
  if (impl->options.bucket_bytes > 0) {
    impl->bucket_bytes = impl->options.bucket_bytes;
  } else {
    TSR_ASSIGN_OR_RETURN(impl->bucket_bytes, default_bucket_bytes(*impl->comm));
  }
  // Higher priority for communication: the next forward waits on it.
  TSR_ASSIGN_OR_RETURN(impl->comm_stream, device.create_stream(-1));
  TSR_ASSIGN_OR_RETURN(impl->relay_stream, device.create_stream(0));
  std::string trace_path = impl->options.trace_path;
  if (trace_path.empty()) {
    if (const char* env = std::getenv("TESSERA_TRACE")) trace_path = env;
  }
  if (!trace_path.empty()) {
    TSR_ASSIGN_OR_RETURN(std::unique_ptr<Trace> trace, Trace::open(trace_path, impl->comm->rank()));
    impl->trace = std::move(trace);
    impl->spans->trace = impl->trace;
  }
  return std::unique_ptr<GradSync>(new GradSync(std::move(impl)));
}

Result<int> GradSync::add_parameter(std::string name, void* data, void* grad, size_t count,
                                    DType dtype) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(m.check_new_param(name, data, grad, count, dtype));
  Param p;
  p.name = std::move(name);
  p.data = data;
  p.grad = grad;
  p.count = count;
  p.dtype = dtype;
  p.bytes = count * hal::dtype_size(dtype);
  m.params.push_back(std::move(p));
  return int(m.params.size()) - 1;
}

// ---- internals ------------------------------------------------------------------------------

void GradSync::Impl::record_callback_error(Status status) {
  std::lock_guard lock(callback_mutex);
  if (callback_error.ok()) callback_error = std::move(status);
}

Status GradSync::Impl::host(std::function<void()> fn) {
  return comm_stream.add_callback([this, fn = std::move(fn)](Status upstream) {
    if (!upstream.ok()) {
      record_callback_error(upstream.with_context("communication stream"));
      return;
    }
    try {
      fn();
    } catch (const std::exception& e) {
      record_callback_error(internal_error(std::string("overlap host step: ") + e.what()));
    }
  });
}

Status GradSync::Impl::check_usable() const {
  if (!failure.ok()) {
    return failed_precondition("GradSync is unusable after an earlier failure: " +
                               failure.message());
  }
  return Status();
}

Status GradSync::Impl::fail_step(Status status, bool abort_comm) {
  if (abort_comm) {
    comm->abort("overlap step " + std::to_string(step) + ": " + status.message());
    if (gather_comm)
      gather_comm->abort("overlap step " + std::to_string(step) + ": " + status.message());
  }
  // The aborted communicator releases every queued collective, so the streams drain.
  comm_stream.synchronize().ignore();
  if (gather_stream.handle() != nullptr) gather_stream.synchronize().ignore();
  relay_stream.synchronize().ignore();
  failure = status;
  in_step = false;
  return status;
}

Status GradSync::Impl::wait_works(std::vector<coll::Work>& works, const std::string& what) {
  for (auto& work : works) {
    Status s = work.wait(timeout);
    if (s.code() == StatusCode::kDeadlineExceeded) {
      TSR_LOG(kError, "overlap") << what << " timed out; flight record:\n" << comm->flight_record();
      return deadline_exceeded(what + ": not done within " + std::to_string(timeout.count()) +
                               " ms (a rank did not take part; see the flight record)");
    }
    if (!s.ok()) return s.with_context(what);
  }
  return Status();
}

Status GradSync::Impl::collective(int index, const std::function<Result<coll::Work>()>& enqueue) {
  TSR_ASSIGN_OR_RETURN(coll::Work work, enqueue());
  buckets[size_t(index)].works.push_back(std::move(work));
  return Status();
}

Status GradSync::Impl::launch(int index) {
  Bucket& b = buckets[size_t(index)];
  const size_t size = hal::dtype_size(b.info.dtype);
  char* flat = static_cast<char*>(sharded_params() ? staging.data() : b.flat.data());
  b.times = BucketTimes{};
  b.times.launched = Clock::now();
  b.works.clear();
  for (int p : b.info.params) {
    const Param& param = params[size_t(p)];
    char* slot = b.in_place ? static_cast<char*>(param.grad) : flat + param.offset * size;
    if (param.mark == Mark::kReady) {
      TSR_RETURN_IF_ERROR(comm_stream.wait(param.ready));
      if (!b.in_place) TSR_RETURN_IF_ERROR(comm_stream.copy(slot, param.grad, param.bytes));
    } else {
      TSR_RETURN_IF_ERROR(comm_stream.memset(slot, 0, param.bytes));
    }
  }
  BucketTimes& t = b.times;
  if (sharded()) {
    // The shared staging buffer's padding may hold another bucket's values: zero it.
    const size_t padded = b.shard * size_t(world());
    if (sharded_params() && padded > b.info.count) {
      TSR_RETURN_IF_ERROR(
          comm_stream.memset(flat + b.info.count * size, 0, (padded - b.info.count) * size));
    }
    void* shard = b.reduced_shard.data();
    const size_t count = b.shard;
    const DType dtype = b.info.dtype;
    const hal::ReduceOp op = reduce_op(options.reduction);
    TSR_RETURN_IF_ERROR(host([&t] { t.started = t.encoded = Clock::now(); }));
    TSR_RETURN_IF_ERROR(collective(
        index, [&] { return comm->reduce_scatter(flat, shard, count, dtype, op, comm_stream); }));
    TSR_RETURN_IF_ERROR(host([&t] { t.communicated = Clock::now(); }));
    b.algorithm = std::string(
        comm->algorithm_for(coll::OpKind::kReduceScatter, b.shard * size * size_t(world())));
    b.done_at_communicated = true;
  } else {
    TSR_RETURN_IF_ERROR(host([&t] { t.started = Clock::now(); }));
    CodecContext ctx{*comm, comm_stream, options.reduction,
                     [this](std::function<void()> fn) { return host(std::move(fn)); },
                     [this, index](const std::function<Result<coll::Work>()>& enqueue) {
                       return collective(index, enqueue);
                     }};
    TSR_RETURN_IF_ERROR(b.codec->enqueue(ctx, b.in_place ? b.in_place : flat, t));
    for (int p : b.in_place ? std::vector<int>{} : b.info.params) {
      const Param& param = params[size_t(p)];
      TSR_RETURN_IF_ERROR(comm_stream.copy(param.grad, flat + param.offset * size, param.bytes));
    }
    b.algorithm =
        std::string(comm->algorithm_for(b.codec->wire_op(), b.codec->wire_message_bytes()));
    // Nothing after the collective (an in-place plain allreduce): its end is the bucket's, and a
    // callback only to read the clock would cost the stream a hop.
    b.done_at_communicated = b.in_place != nullptr && b.codec->name() == "none";
  }
  if (!b.done_at_communicated) TSR_RETURN_IF_ERROR(host([&t] { t.done = Clock::now(); }));
  b.launched = true;
  return Status();
}

// Buckets launch in index order on every rank, so the collectives match across ranks.
Status GradSync::Impl::launch_ready_buckets() {
  while (next_launch < int(buckets.size()) && buckets[size_t(next_launch)].pending == 0) {
    if (Status s = launch(next_launch); !s.ok()) {
      return fail_step(s.with_context("launching bucket " + std::to_string(next_launch)), true);
    }
    ++next_launch;
  }
  return Status();
}

void GradSync::Impl::begin_step(Clock::time_point start) {
  in_step = true;
  step_start = start;
  next_launch = 0;
  for (auto& p : params) p.mark = Mark::kNone;
  for (auto& b : buckets) {
    b.pending = int(b.info.params.size());
    b.launched = false;
  }
}

namespace {

Status begin_mark(GradSync::Impl& m, int param, const char* what) {
  TSR_RETURN_IF_ERROR(m.check_usable());
  if (param < 0 || size_t(param) >= m.params.size()) {
    return out_of_range(std::string(what) + ": parameter index " + std::to_string(param) +
                        " is not registered (" + std::to_string(m.params.size()) + " parameters)");
  }
  if (Status s = m.build(); !s.ok()) {
    m.failure = s;  // every rank sees the same layout disagreement; retrying cannot help
    return s;
  }
  if (!m.in_step) m.begin_step(Clock::now());
  const Param& p = m.params[size_t(param)];
  if (p.mark != Mark::kNone) {
    return invalid_argument(std::string(what) + ": parameter '" + p.name + "' (index " +
                            std::to_string(param) + ") was already marked " +
                            (p.mark == Mark::kReady ? "ready" : "unused") + " in step " +
                            std::to_string(m.step));
  }
  return Status();
}

Status end_mark(GradSync::Impl& m, int param, Mark mark) {
  Param& p = m.params[size_t(param)];
  p.mark = mark;
  --m.buckets[size_t(p.bucket)].pending;
  return m.launch_ready_buckets();
}

}  // namespace

Status GradSync::mark_ready(int param, const hal::Event& ready) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(begin_mark(m, param, "mark_ready"));
  // The relay stream does nothing else, so the engine's event completes exactly when the
  // trainer's does, and the trainer may re-record its event at once.
  Param& p = m.params[size_t(param)];
  if (Status s = m.relay_stream.wait(ready); !s.ok()) return s.with_context("mark_ready");
  if (Status s = p.ready.record(m.relay_stream); !s.ok()) return s.with_context("mark_ready");
  return end_mark(m, param, Mark::kReady);
}

Status GradSync::mark_ready(int param, const hal::Stream& compute) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(begin_mark(m, param, "mark_ready"));
  Param& p = m.params[size_t(param)];
  if (Status s = p.ready.record(compute); !s.ok()) return s.with_context("mark_ready");
  return end_mark(m, param, Mark::kReady);
}

Status GradSync::mark_unused(int param) {
  Impl& m = *impl_;
  TSR_RETURN_IF_ERROR(begin_mark(m, param, "mark_unused"));
  return end_mark(m, param, Mark::kUnused);
}

}  // namespace tessera::overlap
