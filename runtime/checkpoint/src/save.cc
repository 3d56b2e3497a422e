// The training-thread side of saving: options, the snapshot into reused buffers, and the
// background worker that persists one snapshot at a time (commit.cc).
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "fs.h"
#include "impl.h"
#include "tessera/common/log.h"
#include "utf8.h"

namespace tessera::ckpt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Lowers the calling thread's CPU priority (Linux: nice and SCHED_IDLE are per thread).
void lower_this_thread(PersistPriority priority) {
  if (priority == PersistPriority::kNormal) return;
  if (priority == PersistPriority::kIdle) {
    sched_param param{};
    const int err = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param);
    if (err == 0) return;
    TSR_LOG(kWarn, "ckpt") << "persist thread: SCHED_IDLE refused (" << std::strerror(err)
                           << "); trying nice 19";
  }
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19) != 0) {
    TSR_LOG(kWarn, "ckpt") << "persist thread: nice 19 refused (" << std::strerror(errno)
                           << "); it runs at the normal priority";
  }
}

// The layout and metadata go into manifest.json; JSON cannot hold invalid UTF-8, and finding
// that out at the first commit would fail every save.
Status check_manifest_text(const CheckpointOptions& options) {
  if (!valid_utf8(options.layout)) {
    return invalid_argument("checkpointer: option 'layout' is not valid UTF-8");
  }
  for (const auto& [key, value] : options.metadata) {
    if (!valid_utf8(key)) {
      return invalid_argument("checkpointer: option 'metadata' key '" + escaped(key) +
                              "' is not valid UTF-8");
    }
    if (!valid_utf8(value)) {
      return invalid_argument("checkpointer: option 'metadata' entry '" + key +
                              "' is not valid UTF-8");
    }
  }
  return Status();
}

}  // namespace

std::string_view fault_point_name(FaultPoint point) {
  switch (point) {
    case FaultPoint::kMidShard: return "mid-shard";
    case FaultPoint::kAfterShards: return "after-shards";
    case FaultPoint::kAfterManifest: return "after-manifest";
    case FaultPoint::kDuringLatest: return "during-latest";
    case FaultPoint::kDuringGc: return "during-gc";
  }
  return "unknown";
}

std::string shard_key(const std::string& name, const Slice& slice) {
  return name + "@" + slice_text(slice);
}

Checkpointer::Checkpointer(CheckpointOptions options, std::shared_ptr<RankGroup> group)
    : options_(std::move(options)), group_(std::move(group)), impl_(new Impl(this)) {
  // Registration asks this device's backend what each pointer is (state.h).
  registry_.device_ = options_.device;
}

Result<std::unique_ptr<Checkpointer>> Checkpointer::create(CheckpointOptions options,
                                                           std::shared_ptr<RankGroup> group) {
  if (!group) return invalid_argument("checkpointer: no rank group");
  if (options.dir.empty()) return invalid_argument("checkpointer: option 'dir' is empty");
  if (options.chunk_bytes == 0) return invalid_argument("checkpointer: 'chunk_bytes' is 0");
  if (options.chunk_bytes > kMaxChunkBytes) {
    return invalid_argument("checkpointer: 'chunk_bytes' is " +
                            std::to_string(options.chunk_bytes) + ", above the limit of " +
                            std::to_string(kMaxChunkBytes) + " (a chunk is decoded whole)");
  }
  TSR_RETURN_IF_ERROR(check_manifest_text(options));
  if (options.keep_last < 1) return invalid_argument("checkpointer: 'keep_last' must be >= 1");
  if (options.full_every < 1) return invalid_argument("checkpointer: 'full_every' must be >= 1");
  if (options.max_write_mbps < 0) {
    return invalid_argument("checkpointer: 'max_write_mbps' must be >= 0");
  }
  if (options.replica_stride < 0) {
    return invalid_argument("checkpointer: 'replica_stride' must be >= 0 (0: chosen by host)");
  }
  TSR_RETURN_IF_ERROR(fs::make_dirs(options.dir));
  std::unique_ptr<Checkpointer> ck(new Checkpointer(std::move(options), std::move(group)));
  if (ck->options_.device) {
    TSR_ASSIGN_OR_RETURN(hal::Stream stream, ck->options_.device->create_stream());
    ck->impl_->stream = std::move(stream);
  }
  Impl* impl = ck->impl_.get();
  impl->worker = std::thread([impl] { impl->worker_loop(); });
  return ck;
}

Checkpointer::~Checkpointer() {
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return !impl_->busy; });
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  // create() can fail (no device stream) before the worker starts.
  if (impl_->worker.joinable()) impl_->worker.join();
}

bool Checkpointer::busy() const {
  std::lock_guard lock(impl_->mu);
  return impl_->busy;
}

Status Checkpointer::Impl::fault(FaultPoint point) const {
  if (!self->options_.fault_hook) return Status();
  Status s = self->options_.fault_hook(point);
  if (!s.ok()) return s.with_context("fault at " + std::string(fault_point_name(point)));
  return s;
}

Status Checkpointer::Impl::reserve(Snapshot& into, size_t bytes) {
  into.valid = false;
  if (into.capacity >= bytes && into.data != nullptr) return Status();
  // Allocated once (and again only if the registry grew).
  into.pinned.reset();
  into.plain.reset();
  const size_t alloc = bytes == 0 ? 1 : bytes;
  if (self->options_.device) {
    TSR_ASSIGN_OR_RETURN(hal::HostBuffer pinned, self->options_.device->allocate_host(alloc));
    into.data = static_cast<std::byte*>(pinned.data());
    into.pinned = std::move(pinned);
  } else {
    // Aligned for O_DIRECT writes from it; large buffers on 2 MiB boundaries and advised to use
    // transparent huge pages (a hint): 512x fewer page faults when the buffer is first filled and
    // fewer TLB misses in every snapshot copy.
    constexpr size_t kPage = 4096, kHugePage = 2u << 20;
    const size_t align = alloc >= kHugePage ? kHugePage : kPage;
    const size_t rounded = (alloc + align - 1) / align * align;
    into.plain.reset(static_cast<std::byte*>(std::aligned_alloc(align, rounded)));
    if (!into.plain) {
      return resource_exhausted("checkpointer: no memory for a " + std::to_string(alloc) +
                                "-byte snapshot buffer");
    }
    if (align == kHugePage) ::madvise(into.plain.get(), rounded, MADV_HUGEPAGE);
    into.data = into.plain.get();
  }
  into.capacity = alloc;
  return Status();
}

Status Checkpointer::Impl::snapshot(Snapshot& into, int64_t step) {
  const StateRegistry& reg = self->registry_;
  TSR_RETURN_IF_ERROR(reserve(into, reg.total_tensor_bytes()));
  into.valid = false;
  into.offsets.clear();
  size_t offset = 0;
  for (const TensorEntry& t : reg.tensors()) {
    into.offsets.push_back(offset);
    if (t.memory == Memory::kDevice) {
      if (!stream) {
        return failed_precondition("tensor '" + t.name +
                                   "' is in device memory but CheckpointOptions::device is unset");
      }
      TSR_RETURN_IF_ERROR(stream->copy(into.data + offset, t.data, t.bytes()));
    } else if (t.bytes() > 0) {
      std::memcpy(into.data + offset, t.data, t.bytes());
    }
    offset += t.bytes();
  }
  into.entries.assign(reg.tensors().begin(), reg.tensors().end());
  into.blob_names.clear();
  for (const auto& b : reg.blobs()) into.blob_names.push_back(b.name);
  into.blobs.resize(reg.blobs().size());
  for (size_t i = 0; i < reg.blobs().size(); ++i) into.blobs[i] = reg.blobs()[i].get();
  if (stream) TSR_RETURN_IF_ERROR(stream->synchronize());
  into.step = step;
  into.valid = true;
  return Status();
}

Result<SaveStart> Checkpointer::save_async(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  // step-N names only N >= 0 (list_steps and `latest` read digits; a manifest refuses a
  // negative step): refused here, not by the commit in the background.
  if (step < 0) {
    return invalid_argument("save_async: step " + std::to_string(step) + " is negative");
  }
  if (impl_->shrink) {
    return failed_precondition("save_async of step " + std::to_string(step) + " on rank " +
                               std::to_string(group_->rank()) +
                               ": after rebind_shrunk, reshard_from_memory or load first");
  }
  SaveStart start;
  start.step = step;
  int index;
  {
    std::unique_lock lock(impl_->mu);
    if (impl_->busy) {
      if (options_.busy_policy == BusyPolicy::kSkip) {
        start.skipped = true;
        TSR_LOG(kInfo, "ckpt") << "step " << step << ": skipped, a save is in flight";
        return start;
      }
      start.waited = true;
      impl_->cv.wait(lock, [&] { return !impl_->busy; });
      start.wait_s = seconds_since(t0);
    }
    // The other buffer than the newest committed snapshot, which the replica may still need.
    index = impl_->committed_buffer == 0 ? 1 : 0;
  }
  const auto t1 = std::chrono::steady_clock::now();
  Status s = impl_->snapshot(impl_->buffers[index], step);
  if (!s.ok()) return s.with_context("snapshot of step " + std::to_string(step));
  start.blocking_s = seconds_since(t1);
  start.snapshot_bytes = registry_.total_tensor_bytes();
  {
    std::lock_guard lock(impl_->mu);
    impl_->busy = true;
    impl_->last_snapshot = index;
    impl_->job_buffer = index;
    impl_->job_start = start;
  }
  impl_->cv.notify_all();
  return start;
}

Result<SaveResult> Checkpointer::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return !impl_->busy; });
  if (!impl_->last_result) return failed_precondition("no save was started");
  return *impl_->last_result;
}

Status Checkpointer::rebind(std::shared_ptr<RankGroup> group) {
  if (!group) return invalid_argument("rebind: no rank group");
  if (group->rank() != group_->rank() || group->size() != group_->size()) {
    return invalid_argument("rebind: the new group has rank " + std::to_string(group->rank()) +
                            " of " + std::to_string(group->size()) +
                            ", this checkpointer is rank " + std::to_string(group_->rank()) +
                            " of " + std::to_string(group_->size()));
  }
  std::lock_guard lock(impl_->mu);
  if (impl_->busy) {
    return failed_precondition("rebind on rank " + std::to_string(group_->rank()) +
                               ": a save is in flight (wait() for it first)");
  }
  // The worker touches group_ only while busy, so swapping it under the lock is safe.
  group_ = std::move(group);
  // The buddy stride is chosen again with the new group (a restarted rank may run elsewhere, and
  // it chooses at its first replica too: both sides then take part in the same allgather).
  impl_->replica_stride = 0;
  return Status();
}

Status Checkpointer::set_layout(std::string layout) {
  if (!valid_utf8(layout)) return invalid_argument("set_layout: the layout is not valid UTF-8");
  std::lock_guard lock(impl_->mu);
  if (impl_->busy) {
    return failed_precondition("set_layout on rank " + std::to_string(group_->rank()) +
                               ": a save is in flight (wait() for it first)");
  }
  // The worker reads options_ only while busy (commit writes options_.layout into the manifest).
  options_.layout = std::move(layout);
  return Status();
}

void Checkpointer::Impl::worker_loop() {
  lower_this_thread(self->options_.persist_priority);
  std::unique_lock lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return stop || job_buffer >= 0; });
    if (job_buffer < 0 && stop) return;
    const int index = job_buffer;
    const SaveStart start = job_start;
    lock.unlock();
    SaveResult result = persist_guarded(buffers[index], start);
    if (result.status.ok()) {
      // bench/trainer_bench.sh parses the line up to "(full)"; the timings follow.
      TSR_LOG(kInfo, "ckpt") << "step " << start.step << " committed: " << result.bytes_written
                             << " bytes written (" << (result.delta ? "delta" : "full") << ") in "
                             << result.persist_s << " s, peer replica " << result.replica_s << " s";
    } else {
      TSR_LOG(kWarn, "ckpt") << "step " << start.step
                             << " not saved: " << result.status.to_string();
    }
    lock.lock();
    if (result.status.ok()) committed_buffer = index;
    last_result = std::move(result);
    job_buffer = -1;
    busy = false;
    cv.notify_all();
  }
}

Status Checkpointer::Impl::write_back(const std::byte* data,
                                      const std::vector<std::string>& blobs) {
  const StateRegistry& reg = self->registry_;
  size_t offset = 0;
  for (const TensorEntry& t : reg.tensors()) {
    if (t.memory == Memory::kDevice) {
      if (!stream) return failed_precondition("tensor '" + t.name + "': no device configured");
      TSR_RETURN_IF_ERROR(stream->copy(t.data, data + offset, t.bytes()));
    } else if (t.bytes() > 0) {
      std::memcpy(t.data, data + offset, t.bytes());
    }
    offset += t.bytes();
  }
  if (stream) TSR_RETURN_IF_ERROR(stream->synchronize());
  for (size_t i = 0; i < reg.blobs().size() && i < blobs.size(); ++i) {
    Status s = reg.blobs()[i].set(blobs[i]);
    if (!s.ok()) return s.with_context("blob '" + reg.blobs()[i].name + "'");
  }
  return Status();
}

}  // namespace tessera::ckpt
