// Per-bucket reduction strategies: the plain collective, bf16 on the wire, top-k with error
// feedback, PowerSGD. A codec enqueues its whole pipeline (encode, collectives, decode) on the
// engine's communication stream: the backend's stream operations on device buffers (copies,
// reduce, cast, GEMM), the collectives through the communicator's stream API, and host steps
// only where no device operation exists (top-k selection and its scatter-add, PowerSGD's
// orthonormalisation), as stream callbacks on pinned staging buffers that wait for nothing.
// Every buffer of a codec (its wire buffers, error feedback, PowerSGD's factors) is device
// memory of the engine's device. Each codec object belongs to one bucket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/overlap/codec_host.h"
#include "tessera/overlap/grad_sync.h"
#include "trace.h"

namespace tessera::overlap {

// Timestamps of one bucket in one step, written by callbacks on the communication stream.
struct BucketTimes {
  Clock::time_point launched;  // enqueued by the trainer's thread
  Clock::time_point started;   // its gradients' events completed, copies done
  Clock::time_point encoded;   // codec input ready (compression done)
  Clock::time_point communicated;
  Clock::time_point done;  // decoded and copied out
};

struct CodecContext {
  coll::Communicator& comm;
  const hal::Stream& stream;
  Reduction reduction;
  // Enqueues host work on `stream` (a callback): clocks, or CPU work on pinned buffers. It must
  // never wait for other streams or processes (all callbacks may share one thread); a failure of
  // the stream or of the work is recorded by the engine and reported by finish().
  std::function<Status(std::function<void()>)> host;
  // Enqueues one collective through the communicator's stream API on `stream` (`enqueue` makes
  // the call and returns its Work); finish() waits for the Work (bounded).
  std::function<Status(const std::function<Result<coll::Work>()>& enqueue)> collective;
};

// Where a codec allocates its buffers and initialises them (in order on `stream`, before the
// engine's first step; the engine synchronises the stream before the step).
struct CodecSetup {
  const hal::Device& device;
  const hal::Stream& stream;
};

// Little-endian byte strings for codec_state().
class ByteWriter {
 public:
  void u64(uint64_t v);
  void floats(std::span<const float> v);
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  // Each fails with INVALID_ARGUMENT naming `what` when the input is short.
  Status u64(uint64_t* out, std::string_view what);
  Status floats(std::span<float> out, std::string_view what);
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string_view name() const = 0;
  // Enqueues the reduction of data[0, count) across the ranks, in place, and the `encoded` and
  // `communicated` stamps of `times`.
  virtual Status enqueue(CodecContext& ctx, void* data, BucketTimes& times) = 0;
  // Bytes this rank hands to the collectives per step.
  virtual size_t wire_bytes() const = 0;
  // The collective and message size that carries most bytes (for algorithm_for in traces).
  virtual coll::OpKind wire_op() const { return coll::OpKind::kAllReduce; }
  virtual size_t wire_message_bytes() const { return wire_bytes(); }
  // Error-feedback state (and PowerSGD's Q), staged through the host on `stream` (blocking;
  // between steps only).
  virtual Status save(const hal::Stream& stream, ByteWriter& out) const { return Status(); }
  virtual Status load(const hal::Stream& stream, ByteReader& in, const std::string& where) {
    return Status();
  }
};

// The codec for a bucket of `count` elements of `dtype`: options.kind for f32 buckets (kNone for
// other dtypes, and for PowerSGD when the factors would not be smaller than the bucket).
// Fails when its device buffers cannot be allocated or initialised.
Result<std::unique_ptr<Codec>> make_codec(const CodecOptions& options, DType dtype, size_t count,
                                          int world, int bucket, const CodecSetup& setup);

// PowerSGD (powersgd.cc).
Result<std::unique_ptr<Codec>> make_powersgd_codec(const CodecOptions& options, size_t count,
                                                   int world, int bucket, const CodecSetup& setup);
// powersgd_compresses: tessera/overlap/codec_host.h.

}  // namespace tessera::overlap
