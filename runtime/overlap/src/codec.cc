#include "codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "device_memory.h"
#include "tessera/overlap/codec_host.h"

namespace tessera::overlap {

std::string_view codec_name(CodecKind kind) {
  switch (kind) {
    case CodecKind::kNone: return "none";
    case CodecKind::kBf16: return "bf16";
    case CodecKind::kTopK: return "topk";
    case CodecKind::kPowerSgd: return "powersgd";
  }
  return "unknown";
}

// ---- byte strings ---------------------------------------------------------------------------

void ByteWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(uint8_t(v >> (8 * i)));
}

void ByteWriter::floats(std::span<const float> v) {
  const size_t at = bytes_.size();
  bytes_.resize(at + v.size_bytes());
  if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size_bytes());
}

Status ByteReader::u64(uint64_t* out, std::string_view what) {
  if (remaining() < 8) {
    return invalid_argument("codec state ends before " + std::string(what) + " (offset " +
                            std::to_string(offset_) + ")");
  }
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(bytes_[offset_ + size_t(i)]) << (8 * i);
  offset_ += 8;
  *out = v;
  return Status();
}

Status ByteReader::floats(std::span<float> out, std::string_view what) {
  if (remaining() < out.size_bytes()) {
    return invalid_argument("codec state ends inside " + std::string(what) + " (needs " +
                            std::to_string(out.size_bytes()) + " bytes at offset " +
                            std::to_string(offset_) + ", has " + std::to_string(remaining()) + ")");
  }
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset_, out.size_bytes());
  offset_ += out.size_bytes();
  return Status();
}

namespace {

hal::ReduceOp reduce_op(Reduction r) {
  return r == Reduction::kAverage ? hal::ReduceOp::kAvg : hal::ReduceOp::kSum;
}

// ---- none: the plain collective, in place ----------------------------------------------------

class PlainCodec final : public Codec {
 public:
  PlainCodec(DType dtype, size_t count) : dtype_(dtype), count_(count) {}
  std::string_view name() const override { return "none"; }
  size_t wire_bytes() const override { return count_ * hal::dtype_size(dtype_); }
  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    const hal::ReduceOp op = reduce_op(ctx.reduction);
    coll::Communicator& comm = ctx.comm;
    const hal::Stream& stream = ctx.stream;
    // Nothing to encode: finish() takes `started` for `encoded`.
    TSR_RETURN_IF_ERROR(
        ctx.collective([&] { return comm.allreduce(data, data, count_, dtype_, op, stream); }));
    return ctx.host([&times] { times.communicated = Clock::now(); });
  }

 private:
  DType dtype_;
  size_t count_;
};

// ---- bf16 wire: cast, allreduce in bf16 (f32 accumulation per step), cast back ---------------

class Bf16Codec final : public Codec {
 public:
  Bf16Codec(size_t count, hal::DeviceBuffer wire) : count_(count), wire_(std::move(wire)) {}
  std::string_view name() const override { return "bf16"; }
  size_t wire_bytes() const override { return count_ * 2; }
  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    void* wire = wire_.data();
    TSR_RETURN_IF_ERROR(ctx.stream.cast(wire, DType::kBF16, data, DType::kF32, count_));
    TSR_RETURN_IF_ERROR(ctx.host([&times] { times.encoded = Clock::now(); }));
    const hal::ReduceOp op = reduce_op(ctx.reduction);
    coll::Communicator& comm = ctx.comm;
    const hal::Stream& stream = ctx.stream;
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&] { return comm.allreduce(wire, wire, count_, DType::kBF16, op, stream); }));
    TSR_RETURN_IF_ERROR(ctx.host([&times] { times.communicated = Clock::now(); }));
    return ctx.stream.cast(data, DType::kF32, wire, DType::kBF16, count_);
  }

 private:
  size_t count_;
  hal::DeviceBuffer wire_;  // device: count bf16
};

// ---- top-k with error feedback: (index, value) pairs by all-gather ---------------------------
//
// No backend operation selects or scatters, so those two steps run on the host, on pinned
// copies: the accumulated gradient is staged device -> pinned, the k largest are picked in a
// callback (which also clears them from the error feedback), the pairs go back to the device and
// are all-gathered there, the gathered pairs are staged to pinned again and scatter-added into a
// dense pinned gradient, which is copied into the bucket. The error-feedback add is a device
// reduce.

struct TopKBuffers {
  hal::DeviceBuffer residual;  // device: count f32 (error feedback), else empty
  hal::DeviceBuffer send;      // device: k indices, then k f32 bit patterns (as i32)
  hal::DeviceBuffer recv;      // device: world x send
  hal::HostBuffer dense;       // pinned: count f32 (the accumulated gradient, then the decoded)
  hal::HostBuffer pairs;       // pinned: world x send (this rank's pairs in the first block)
};

class TopKCodec final : public Codec {
 public:
  static size_t k_for(const CodecOptions& options, size_t count) {
    return topk_k(options.topk_ratio, count);
  }
  TopKCodec(const CodecOptions& options, size_t count, int world, TopKBuffers buffers)
      : count_(count),
        k_(k_for(options, count)),
        world_(world),
        error_feedback_(options.error_feedback),
        buf_(std::move(buffers)) {}
  std::string_view name() const override { return "topk"; }
  size_t wire_bytes() const override { return k_ * 8; }
  coll::OpKind wire_op() const override { return coll::OpKind::kAllGather; }
  size_t wire_message_bytes() const override { return k_ * 8 * size_t(world_); }

  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    const hal::Stream& stream = ctx.stream;
    const size_t bytes = count_ * sizeof(float);
    const size_t pair_bytes = 2 * k_ * sizeof(int32_t);
    // acc = g + residual (device), staged to the pinned dense buffer.
    const void* acc = data;
    if (error_feedback_) {
      const void* const sources[] = {buf_.residual.data(), data};
      TSR_RETURN_IF_ERROR(
          stream.reduce(buf_.residual.data(), sources, count_, DType::kF32, hal::ReduceOp::kSum));
      acc = buf_.residual.data();
    }
    TSR_RETURN_IF_ERROR(stream.copy(buf_.dense.data(), acc, bytes));
    TSR_RETURN_IF_ERROR(ctx.host([this, &times] {
      encode();
      times.encoded = Clock::now();
    }));
    // What was not sent stays in the error feedback (the dense copy, sent entries cleared).
    if (error_feedback_) {
      TSR_RETURN_IF_ERROR(stream.copy(buf_.residual.data(), buf_.dense.data(), bytes));
    }
    TSR_RETURN_IF_ERROR(stream.copy(buf_.send.data(), buf_.pairs.data(), pair_bytes));
    coll::Communicator& comm = ctx.comm;
    void* send = buf_.send.data();
    void* recv = buf_.recv.data();
    TSR_RETURN_IF_ERROR(
        ctx.collective([&] { return comm.allgather(send, recv, 2 * k_, DType::kI32, stream); }));
    TSR_RETURN_IF_ERROR(stream.copy(buf_.pairs.data(), recv, pair_bytes * size_t(world_)));
    const bool average = ctx.reduction == Reduction::kAverage;
    TSR_RETURN_IF_ERROR(ctx.host([this, average, &times] {
      times.communicated = Clock::now();
      decode(average);
    }));
    return stream.copy(data, buf_.dense.data(), bytes);
  }

  Status save(const hal::Stream& stream, ByteWriter& out) const override {
    std::vector<float> residual;
    if (error_feedback_)
      TSR_RETURN_IF_ERROR(download(stream, buf_.residual.data(), count_, residual));
    out.u64(residual.size());
    out.floats(residual);
    return Status();
  }
  Status load(const hal::Stream& stream, ByteReader& in, const std::string& where) override {
    const size_t size = error_feedback_ ? count_ : 0;
    uint64_t n = 0;
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " residual size"));
    if (n != size) {
      return invalid_argument(where + ": residual of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(size));
    }
    std::vector<float> residual(size);
    TSR_RETURN_IF_ERROR(in.floats(residual, where + " residual"));
    return size == 0 ? Status() : upload(stream, buf_.residual.data(), residual);
  }

 private:
  float* dense() const { return static_cast<float*>(buf_.dense.data()); }
  int32_t* pairs() const { return static_cast<int32_t*>(buf_.pairs.data()); }

  // On the pinned copy of acc: the k largest |acc| as (index, value bits) into the first block of
  // `pairs`; with error feedback, the sent entries of acc become 0 (the new residual).
  void encode() { selector_.encode(dense(), count_, k_, error_feedback_, pairs()); }
  // Every rank sums the same pairs in the same (rank) order, so all get the same bits.
  void decode(bool average) { topk_decode(pairs(), world_, k_, count_, average, dense()); }

  size_t count_;
  size_t k_;
  int world_;
  bool error_feedback_;
  TopKBuffers buf_;
  TopKSelector selector_;  // host scratch of the selection
};

Result<std::unique_ptr<Codec>> make_topk(const CodecOptions& options, size_t count, int world,
                                         const CodecSetup& setup) {
  const size_t k = TopKCodec::k_for(options, count);
  const size_t pair_bytes = 2 * k * sizeof(int32_t);
  TopKBuffers b;
  if (options.error_feedback) {
    TSR_ASSIGN_OR_RETURN(b.residual, setup.device.allocate(count * sizeof(float)));
    TSR_RETURN_IF_ERROR(setup.stream.memset(b.residual.data(), 0, count * sizeof(float)));
  }
  TSR_ASSIGN_OR_RETURN(b.send, setup.device.allocate(pair_bytes));
  TSR_ASSIGN_OR_RETURN(b.recv, setup.device.allocate(pair_bytes * size_t(world)));
  TSR_ASSIGN_OR_RETURN(b.dense, setup.device.allocate_host(count * sizeof(float)));
  TSR_ASSIGN_OR_RETURN(b.pairs, setup.device.allocate_host(pair_bytes * size_t(world)));
  return std::unique_ptr<Codec>(new TopKCodec(options, count, world, std::move(b)));
}

}  // namespace

Result<std::unique_ptr<Codec>> make_codec(const CodecOptions& options, DType dtype, size_t count,
                                          int world, int bucket, const CodecSetup& setup) {
  if (dtype != DType::kF32) return std::unique_ptr<Codec>(new PlainCodec(dtype, count));
  switch (options.kind) {
    case CodecKind::kNone: break;
    case CodecKind::kBf16: {
      TSR_ASSIGN_OR_RETURN(hal::DeviceBuffer wire, setup.device.allocate(count * 2));
      return std::unique_ptr<Codec>(new Bf16Codec(count, std::move(wire)));
    }
    case CodecKind::kTopK: return make_topk(options, count, world, setup);
    case CodecKind::kPowerSgd:
      if (powersgd_compresses(count, options.powersgd_rank)) {
        return make_powersgd_codec(options, count, world, bucket, setup);
      }
      break;
  }
  return std::unique_ptr<Codec>(new PlainCodec(dtype, count));
}

}  // namespace tessera::overlap
