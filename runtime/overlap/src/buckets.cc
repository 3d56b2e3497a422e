// Registration checks, the bucket layout (reverse registration order, bucket_bytes each, one
// dtype per bucket), the layout check across ranks and the ZeRO shard map.
#include <algorithm>
#include <cstring>

#include "device_memory.h"
#include "engine.h"
#include "tessera/common/env.h"
#include "tessera/common/log.h"

namespace tessera::overlap {
namespace {

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

Result<size_t> default_bucket_bytes(const coll::Communicator& comm) {
  // Fractional MiB allowed; 0 (out of range) means unset.
  TSR_ASSIGN_OR_RETURN(const double mb, env::get_number("TESSERA_BUCKET_MB", 0, 0.001, 65536));
  if (mb > 0) return size_t(mb * 1048576.0);
  // Alpha-beta: a ring allreduce of B bytes over N ranks costs 2(N-1) alpha + 2(N-1)/N B/beta,
  // plus the engine's own per-bucket cost (stream hops, callbacks). Latency terms stay under
  // 10% of the bandwidth term when B >= 9 * (latency terms) * beta * N / (2(N-1)).
  const bool one_host = comm.num_hosts() <= 1;
  const double alpha = one_host ? 0.5e-6 : 20e-6;  // the tuner's defaults (docs/COLLECTIVES.md)
  const double beta = one_host ? 4e9 : 1.25e9;     // bytes/s
  constexpr double kEngineOverhead = 50e-6;        // seconds per bucket
  const double n = std::max(2, comm.size());
  const double latency = 2 * (n - 1) * alpha + kEngineOverhead;
  const double bytes = 9 * latency * beta * n / (2 * (n - 1));
  return std::clamp<size_t>(size_t(bytes), size_t(1) << 20, size_t(64) << 20);
}

Status GradSync::Impl::check_new_param(const std::string& name, const void* data, const void* grad,
                                       size_t count, DType dtype) const {
  const std::string what = "parameter '" + name + "'";
  if (built) {
    return failed_precondition(what + ": registered after the first step began (buckets are " +
                               "formed then; register every parameter first)");
  }
  if (name.empty()) return invalid_argument("a parameter needs a name");
  for (const auto& p : params) {
    if (p.name == name) return already_exists(what + " is already registered");
  }
  if (grad == nullptr) return invalid_argument(what + ": gradient buffer is null");
  if (count == 0) return invalid_argument(what + ": count is 0");
  if (options.mode == SyncMode::kShardedOptimizer && data == nullptr) {  // ZeRO-3: zeros
    return invalid_argument(what + ": parameter buffer is null (the sharded optimizer mode " +
                            "all-gathers parameters into it)");
  }
  const size_t size = hal::dtype_size(dtype);
  const size_t bytes = count * size;
  if (reinterpret_cast<uintptr_t>(grad) % size != 0 ||
      (data != nullptr && reinterpret_cast<uintptr_t>(data) % size != 0)) {
    return invalid_argument(what + ": buffer not aligned to its " + std::to_string(size) +
                            "-byte " + std::string(hal::dtype_name(dtype)) + " elements");
  }
  // The engine hands both buffers to its device's stream operations only.
  TSR_RETURN_IF_ERROR(check_device_range(device, grad, bytes, what + ": gradient buffer"));
  TSR_RETURN_IF_ERROR(check_device_range(device, data, bytes, what + ": parameter buffer"));
  if (data != nullptr && ranges_overlap(data, bytes, grad, bytes)) {
    return invalid_argument(what + ": parameter and gradient buffers overlap");
  }
  for (const auto& p : params) {
    const void* mine[] = {grad, data};
    const void* theirs[] = {p.grad, p.data};
    for (const void* a : mine) {
      for (const void* b : theirs) {
        if (a != nullptr && b != nullptr && ranges_overlap(a, bytes, b, p.bytes)) {
          return invalid_argument(what + ": buffers overlap those of parameter '" + p.name + "'");
        }
      }
    }
  }
  return Status();
}

// The start of the bucket's gradients when they are adjacent in memory (bucket order is reverse
// registration order, so memory order ascends from the bucket's last parameter), else null.
void* GradSync::Impl::adjacent_gradients(const Bucket& b) const {
  const auto& ids = b.info.params;
  for (size_t k = 0; k + 1 < ids.size(); ++k) {
    const Param& later = params[size_t(ids[k])];
    const Param& earlier = params[size_t(ids[k + 1])];
    if (static_cast<const char*>(earlier.grad) + earlier.bytes != later.grad) return nullptr;
  }
  return params[size_t(ids.back())].grad;
}

std::vector<ShardPiece> GradSync::Impl::shard_pieces(const Bucket& b) const {
  std::vector<ShardPiece> pieces;
  const size_t lo = size_t(rank()) * b.shard;
  const size_t hi = std::min(lo + b.shard, b.info.count);
  for (int p : b.info.params) {
    const Param& param = params[size_t(p)];
    const size_t a = std::max(lo, param.offset);
    const size_t z = std::min(hi, param.offset + param.count);
    if (a < z) pieces.push_back({p, a - lo, a - param.offset, z - a});
  }
  return pieces;
}

void GradSync::Impl::assign_buckets() {
  // Buckets in reverse registration order: the last layers' gradients come first in backward.
  for (int p = int(params.size()) - 1; p >= 0; --p) {
    Param& param = params[size_t(p)];
    const bool fits = !buckets.empty() && buckets.back().info.dtype == param.dtype &&
                      buckets.back().info.bytes < bucket_bytes;
    if (!fits) {
      buckets.emplace_back();
      buckets.back().info.dtype = param.dtype;
    }
    Bucket& b = buckets.back();
    param.bucket = int(buckets.size()) - 1;
    param.offset = b.info.count;
    b.info.params.push_back(p);
    b.info.count += param.count;
    b.info.bytes += param.bytes;
  }
}

// Every rank must have the same layout, or the collectives would mismatch mid-step.
Status GradSync::Impl::check_layout_agrees() {
  const int n = world();
  uint64_t hash = 14695981039346656037ull;
  for (const auto& p : params) hash = fnv(fnv(hash, p.count), uint64_t(p.dtype));
  hash = fnv(hash, buckets.size());
  const int64_t mine[3] = {int64_t(params.size()), int64_t(buckets.size()), int64_t(hash)};
  std::vector<int64_t> all(3 * size_t(n));
  TSR_RETURN_IF_ERROR(
      comm->allgather(mine, all.data(), 3, DType::kI64).with_context("overlap layout check"));
  for (int r = 0; r < n; ++r) {
    const int64_t* theirs = &all[3 * size_t(r)];
    if (std::memcmp(theirs, mine, sizeof mine) != 0) {
      return failed_precondition(
          "overlap: rank " + std::to_string(r) + " registered " + std::to_string(theirs[0]) +
          " parameters in " + std::to_string(theirs[1]) + " buckets, rank " +
          std::to_string(rank()) + " " + std::to_string(mine[0]) + " in " +
          std::to_string(mine[1]) + (theirs[2] != mine[2] ? " (counts or dtypes differ)" : "") +
          "; every rank must register the same parameters in the same order");
    }
  }
  return Status();
}

Status GradSync::Impl::allocate_bucket(size_t index) {
  Bucket& b = buckets[index];
  const size_t n = size_t(world());
  const size_t size = hal::dtype_size(b.info.dtype);
  b.shard = (b.info.count + n - 1) / n;
  const size_t elements = sharded() ? b.shard * n : b.info.count;
  b.in_place = sharded() ? nullptr : adjacent_gradients(b);
  // ZeRO-3 keeps no full-size buffer per bucket (one shared staging buffer instead).
  if (b.in_place == nullptr && !sharded_params()) {
    TSR_ASSIGN_OR_RETURN(b.flat, device.allocate(elements * size));
    TSR_RETURN_IF_ERROR(comm_stream.memset(b.flat.data(), 0, elements * size));
  }
  if (sharded()) {
    TSR_ASSIGN_OR_RETURN(b.reduced_shard, device.allocate(b.shard * size));
    TSR_RETURN_IF_ERROR(comm_stream.memset(b.reduced_shard.data(), 0, b.shard * size));
    TSR_ASSIGN_OR_RETURN(b.gathered, device.create_event(false));
    return Status();
  }
  TSR_ASSIGN_OR_RETURN(b.codec, make_codec(options.codec, b.info.dtype, b.info.count, int(n),
                                           int(index), CodecSetup{device, comm_stream}));
  // Only an elementwise codec may see the elements in memory order instead of bucket order
  // (top-k indices and PowerSGD's matrix must mean the same on every rank).
  if (b.codec->name() != "none" && b.codec->name() != "bf16") b.in_place = nullptr;
  if (b.in_place == nullptr && !b.flat) {
    TSR_ASSIGN_OR_RETURN(b.flat, device.allocate(elements * size));
    TSR_RETURN_IF_ERROR(comm_stream.memset(b.flat.data(), 0, elements * size));
  }
  return Status();
}

void GradSync::Impl::map_shard_segments() {
  for (Bucket& b : buckets) {
    const size_t size = hal::dtype_size(b.info.dtype);
    for (const ShardPiece& piece : shard_pieces(b)) {
      ShardSegment s;
      s.param = piece.param;
      s.param_offset = piece.param_offset;
      s.count = piece.count;
      s.grad = static_cast<char*>(b.reduced_shard.data()) + piece.shard_offset * size;
      s.data =
          sharded_params()
              ? static_cast<char*>(b.param_shard.data()) + piece.shard_offset * size
              : static_cast<char*>(params[size_t(piece.param)].data) + piece.param_offset * size;
      segments.push_back(s);
      shard_elements += s.count;
    }
  }
}

Status GradSync::Impl::build() {
  if (built) return Status();
  assign_buckets();
  TSR_RETURN_IF_ERROR(check_layout_agrees());
  for (size_t i = 0; i < buckets.size(); ++i) {
    TSR_RETURN_IF_ERROR(allocate_bucket(i));
    bucket_infos.push_back(buckets[i].info);
  }
  for (auto& p : params) {
    TSR_ASSIGN_OR_RETURN(p.ready, device.create_event(false));
  }
  if (sharded_params()) TSR_RETURN_IF_ERROR(build_sharded_parameters());
  if (sharded()) map_shard_segments();
  TSR_RETURN_IF_ERROR(comm_stream.synchronize());
  built = true;
  TSR_LOG(kInfo, "overlap") << "rank " << rank() << ": " << params.size() << " parameters in "
                            << buckets.size() << " buckets of up to " << bucket_bytes
                            << " bytes, codec " << codec_name(options.codec.kind);
  return Status();
}

}  // namespace tessera::overlap
