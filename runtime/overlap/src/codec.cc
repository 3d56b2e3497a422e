#include "codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

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
    return ctx.collective(
        [&comm, data, op, this] { return comm.allreduce(data, data, count_, dtype_, op); },
        &times.encoded, &times.communicated);
  }

 private:
  DType dtype_;
  size_t count_;
};

// ---- bf16 wire: cast, allreduce in bf16 (f32 accumulation per step), cast back ---------------

class Bf16Codec final : public Codec {
 public:
  explicit Bf16Codec(size_t count) : count_(count), wire_(count) {}
  std::string_view name() const override { return "bf16"; }
  size_t wire_bytes() const override { return count_ * 2; }
  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    TSR_RETURN_IF_ERROR(ctx.stream.cast(wire_.data(), DType::kBF16, data, DType::kF32, count_));
    const hal::ReduceOp op = reduce_op(ctx.reduction);
    coll::Communicator& comm = ctx.comm;
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&comm, op, this] {
          return comm.allreduce(wire_.data(), wire_.data(), count_, DType::kBF16, op);
        },
        &times.encoded, &times.communicated));
    return ctx.stream.cast(data, DType::kF32, wire_.data(), DType::kBF16, count_);
  }

 private:
  size_t count_;
  std::vector<uint16_t> wire_;
};

// ---- top-k with error feedback: (index, value) pairs by all-gather ---------------------------

class TopKCodec final : public Codec {
 public:
  TopKCodec(const CodecOptions& options, size_t count, int world)
      : count_(count),
        k_(std::clamp<size_t>(size_t(std::ceil(options.topk_ratio * double(count))), 1, count)),
        world_(world),
        error_feedback_(options.error_feedback),
        residual_(error_feedback_ ? count : 0, 0.0f),
        send_(2 * k_),
        recv_(2 * k_ * size_t(world)) {}
  std::string_view name() const override { return "topk"; }
  size_t wire_bytes() const override { return k_ * 8; }
  coll::OpKind wire_op() const override { return coll::OpKind::kAllGather; }
  size_t wire_message_bytes() const override { return k_ * 8 * size_t(world_); }

  Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) override {
    float* g = static_cast<float*>(data);
    TSR_RETURN_IF_ERROR(ctx.host([this, g, &times] {
      encode(g);
      times.encoded = Clock::now();
    }));
    coll::Communicator& comm = ctx.comm;
    TSR_RETURN_IF_ERROR(ctx.collective(
        [&comm, this] { return comm.allgather(send_.data(), recv_.data(), 2 * k_, DType::kI32); },
        nullptr, nullptr));
    const bool average = ctx.reduction == Reduction::kAverage;
    return ctx.host([this, g, average, &times] {
      times.communicated = Clock::now();
      decode(g, average);
    });
  }

  void save(ByteWriter& out) const override {
    out.u64(residual_.size());
    out.floats(residual_);
  }
  Status load(ByteReader& in, const std::string& where) override {
    uint64_t n = 0;
    TSR_RETURN_IF_ERROR(in.u64(&n, where + " residual size"));
    if (n != residual_.size()) {
      return invalid_argument(where + ": residual of " + std::to_string(n) +
                              " elements, this engine has " + std::to_string(residual_.size()));
    }
    return in.floats(residual_, where + " residual");
  }

 private:
  // acc = g + residual; send the k largest |acc| as (index, value bits); keep the rest.
  void encode(float* g) {
    if (error_feedback_) {
      for (size_t i = 0; i < count_; ++i) residual_[i] += g[i];
    }
    const float* acc = error_feedback_ ? residual_.data() : g;
    // The k first in the order (|acc| descending, index ascending): a unique set on every run.
    auto before = [acc](uint32_t a, uint32_t b) {
      const float x = std::fabs(acc[a]), y = std::fabs(acc[b]);
      return x > y || (x == y && a < b);
    };
    if (!select_candidates(acc)) {
      order_.resize(count_);
      std::iota(order_.begin(), order_.end(), uint32_t(0));
    }
    std::nth_element(order_.begin(), order_.begin() + ptrdiff_t(k_ - 1), order_.end(), before);
    for (size_t j = 0; j < k_; ++j) {
      const uint32_t i = order_[j];
      float v = acc[i];
      send_[j] = int32_t(i);
      std::memcpy(&send_[k_ + j], &v, 4);
      if (error_feedback_) residual_[i] = 0.0f;
    }
  }
  // Large buckets: a threshold from a strided sample keeps about 2k candidates, and the exact
  // top k are chosen among them (all of the top k are candidates whenever at least k are, since
  // the k-th largest is then at or above the threshold). One pass instead of a selection over
  // the whole bucket. False: too few candidates, select over everything.
  bool select_candidates(const float* acc) {
    constexpr size_t kSample = 1 << 14;
    if (count_ < 16 * kSample || k_ * 8 > count_) return false;
    const size_t stride = count_ / kSample;
    sample_.resize(kSample);
    for (size_t j = 0; j < kSample; ++j) sample_[j] = std::fabs(acc[j * stride]);
    const size_t rank = std::min(kSample - 1, 2 * k_ * kSample / count_ + 1);
    std::nth_element(sample_.begin(), sample_.begin() + ptrdiff_t(rank), sample_.end(),
                     std::greater<float>());
    const float threshold = sample_[rank];
    order_.clear();
    for (size_t i = 0; i < count_; ++i) {
      if (std::fabs(acc[i]) >= threshold) order_.push_back(uint32_t(i));
    }
    return order_.size() >= k_;
  }

  // Every rank sums the same pairs in the same (rank) order, so all get the same bits.
  void decode(float* g, bool average) {
    std::fill(g, g + count_, 0.0f);
    for (int r = 0; r < world_; ++r) {
      const int32_t* block = recv_.data() + size_t(r) * 2 * k_;
      for (size_t j = 0; j < k_; ++j) {
        float v;
        std::memcpy(&v, &block[k_ + j], 4);
        g[uint32_t(block[j])] += v;
      }
    }
    if (average) {
      for (size_t i = 0; i < count_; ++i) g[i] /= float(world_);
    }
  }

  size_t count_;
  size_t k_;
  int world_;
  bool error_feedback_;
  std::vector<float> residual_;
  std::vector<uint32_t> order_;  // candidate indices
  std::vector<float> sample_;
  std::vector<int32_t> send_;  // k indices, then k float bit patterns
  std::vector<int32_t> recv_;
};

}  // namespace

std::unique_ptr<Codec> make_codec(const CodecOptions& options, DType dtype, size_t count, int world,
                                  int bucket) {
  if (dtype != DType::kF32) return std::make_unique<PlainCodec>(dtype, count);
  switch (options.kind) {
    case CodecKind::kNone: break;
    case CodecKind::kBf16: return std::make_unique<Bf16Codec>(count);
    case CodecKind::kTopK: return std::make_unique<TopKCodec>(options, count, world);
    case CodecKind::kPowerSgd:
      if (powersgd_compresses(count, options.powersgd_rank)) {
        return make_powersgd_codec(options, count, world, bucket);
      }
      break;
  }
  return std::make_unique<PlainCodec>(dtype, count);
}

}  // namespace tessera::overlap
