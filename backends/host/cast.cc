#include "cast.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "api.h"
#include "dispatch.h"
#include "dtype.h"
#include "errors.h"
#include "half.h"
#include "half_block.h"
#include "state.h"
#include "store.h"

namespace tessera::host {
namespace {

constexpr size_t kBlock = 2048;  // elements per output block (16 KiB of f64 at most)

// Tags for the 16-bit float types, which share uint16_t storage.
struct F16 {
  using Storage = uint16_t;
};
struct BF16 {
  using Storage = uint16_t;
};
template <typename T>
struct Plain {
  using Storage = T;
};

template <typename Tag>
using StorageOf = typename Tag::Storage;

// ---- to float (f32 or f64) -------------------------------------------------------------------

template <typename From>
inline float to_f32(StorageOf<From> x) {
  if constexpr (std::is_same_v<From, F16>)
    return f16_to_f32(x);
  else if constexpr (std::is_same_v<From, BF16>)
    return bf16_to_f32(x);
  else
    return float(x);  // f64, i32, i64: correctly rounded by the hardware; f32, u8: exact
}

template <typename From>
inline double to_f64(StorageOf<From> x) {
  if constexpr (std::is_same_v<From, F16>)
    return double(f16_to_f32(x));
  else if constexpr (std::is_same_v<From, BF16>)
    return double(bf16_to_f32(x));
  else
    return double(x);  // i64: correctly rounded; the rest exact
}

// A float holding `x` rounded to odd when rounding is needed, so one more rounding to f16/bf16
// is correct. Sources whose values are exact in f32 (f16, bf16, u8) or that can only reach f16's
// narrow range exactly (i32 into f16 is exact up to 2^24) take the plain path.
template <typename From, bool kToBF16>
inline float to_f32_for_half(StorageOf<From> x) {
  if constexpr (std::is_same_v<From, Plain<double>>)
    return f64_to_f32_round_odd(x);
  else if constexpr (std::is_same_v<From, Plain<int64_t>>)
    return i64_to_f32_round_odd(x);
  else if constexpr (std::is_same_v<From, Plain<int32_t>> && kToBF16) {
    return f64_to_f32_round_odd(double(x));  // i32 -> f64 is exact
  } else {
    // f32, f16, bf16, u8 exact; i32 -> f16: any |x| >= 65520 becomes inf either way, and
    // smaller values are exact in f32.
    return to_f32<From>(x);
  }
}

// ---- float -> integer: truncate toward zero, saturate, NaN -> 0 ------------------------------

template <typename I, typename F>
inline I float_to_int(F x) {
  constexpr F kLow = F(std::numeric_limits<I>::min());  // a power of two (or 0): exact
  // 2^bits for signed/unsigned: the first value past the top, also exact.
  constexpr F kPastTop = F(std::numeric_limits<I>::max()) + F(1);
  const bool nan = x != x;
  F clamped = x < kLow ? kLow : x;
  // Below kPastTop every value truncates into range; clamp the rest to something in range and
  // fix the result up afterwards.
  clamped = clamped >= kPastTop ? kLow : clamped;
  clamped = nan ? F(0) : clamped;
  I result = I(clamped);
  result = x >= kPastTop ? std::numeric_limits<I>::max() : result;
  return nan ? I(0) : result;
}

// ---- one element -----------------------------------------------------------------------------

template <typename To, typename From>
inline StorageOf<To> convert(StorageOf<From> x) {
  using T = StorageOf<To>;
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, F16>) {
    return f32_to_f16(to_f32_for_half<From, false>(x));
  } else if constexpr (std::is_same_v<To, BF16>) {
    return f32_to_bf16(to_f32_for_half<From, true>(x));
  } else if constexpr (std::is_same_v<To, Plain<float>>) {
    return to_f32<From>(x);
  } else if constexpr (std::is_same_v<To, Plain<double>>) {
    return to_f64<From>(x);
  } else if constexpr (std::is_same_v<From, Plain<double>>) {
    return float_to_int<T, double>(x);
  } else if constexpr (std::is_same_v<From, Plain<float>> || std::is_same_v<From, F16> ||
                       std::is_same_v<From, BF16>) {
    return float_to_int<T, float>(to_f32<From>(x));
  } else {
    return static_cast<T>(x);  // integer -> integer: modular
  }
}

template <typename To, typename From>
TESSERA_HOST_KERNEL void convert_block(StorageOf<To>* __restrict out,
                                       const StorageOf<From>* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = convert<To, From>(in[i]);
}

template <typename To, typename From>
void cast_kernel(void* dst, const void* src, size_t count, bool streaming) {
  using T = StorageOf<To>;
  using F = StorageOf<From>;
  alignas(64) T out[kBlock];
  for (size_t at = 0; at < count; at += kBlock) {
    const size_t n = std::min(kBlock, count - at);
    convert_block<To, From>(out, static_cast<const F*>(src) + at, n);
    store_block(static_cast<T*>(dst) + at, out, n * sizeof(T), streaming);
  }
}

using CastFn = void (*)(void*, const void*, size_t, bool);

// f32 <-> f16/bf16, the casts mixed precision lives on, go through the block converters (F16C
// where the CPU has it); same results as convert<>.
template <typename To, typename From, void (*kConvert)(To*, const From*, size_t)>
void block_cast_kernel(void* dst, const void* src, size_t count, bool streaming) {
  alignas(64) To out[kBlock];
  for (size_t at = 0; at < count; at += kBlock) {
    const size_t n = std::min(kBlock, count - at);
    kConvert(out, static_cast<const From*>(src) + at, n);
    store_block(static_cast<To*>(dst) + at, out, n * sizeof(To), streaming);
  }
}

template <typename To>
CastFn from_any(tsr_dtype from) {
  switch (from) {
    case TSR_DTYPE_F32: return &cast_kernel<To, Plain<float>>;
    case TSR_DTYPE_F16: return &cast_kernel<To, F16>;
    case TSR_DTYPE_BF16: return &cast_kernel<To, BF16>;
    case TSR_DTYPE_F64: return &cast_kernel<To, Plain<double>>;
    case TSR_DTYPE_I32: return &cast_kernel<To, Plain<int32_t>>;
    case TSR_DTYPE_I64: return &cast_kernel<To, Plain<int64_t>>;
    case TSR_DTYPE_U8: return &cast_kernel<To, Plain<uint8_t>>;
    default: return nullptr;
  }
}

CastFn select_cast(tsr_dtype to, tsr_dtype from) {
  if (to == TSR_DTYPE_F32 && from == TSR_DTYPE_F16) {
    return &block_cast_kernel<float, uint16_t, &widen_f16>;
  }
  if (to == TSR_DTYPE_F32 && from == TSR_DTYPE_BF16) {
    return &block_cast_kernel<float, uint16_t, &widen_bf16>;
  }
  if (to == TSR_DTYPE_F16 && from == TSR_DTYPE_F32) {
    return &block_cast_kernel<uint16_t, float, &narrow_f16>;
  }
  if (to == TSR_DTYPE_BF16 && from == TSR_DTYPE_F32) {
    return &block_cast_kernel<uint16_t, float, &narrow_bf16>;
  }
  switch (to) {
    case TSR_DTYPE_F32: return from_any<Plain<float>>(from);
    case TSR_DTYPE_F16: return from_any<F16>(from);
    case TSR_DTYPE_BF16: return from_any<BF16>(from);
    case TSR_DTYPE_F64: return from_any<Plain<double>>(from);
    case TSR_DTYPE_I32: return from_any<Plain<int32_t>>(from);
    case TSR_DTYPE_I64: return from_any<Plain<int64_t>>(from);
    case TSR_DTYPE_U8: return from_any<Plain<uint8_t>>(from);
    default: return nullptr;
  }
}

}  // namespace

void cast_range(void* dst, tsr_dtype dst_dtype, const void* src, tsr_dtype src_dtype, size_t count,
                bool streaming) {
  if (dst_dtype == src_dtype) {
    store_block(dst, src, count * dtype_size(dst_dtype), streaming);
    return;
  }
  if (CastFn kernel = select_cast(dst_dtype, src_dtype)) kernel(dst, src, count, streaming);
}

namespace api {

tsr_status cast_async(void* dst, tsr_dtype dst_dtype_in, const void* src, tsr_dtype src_dtype_in,
                      size_t count, tsr_stream stream_handle) {
  static constexpr const char* kOp = "cast_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    const int32_t dst_value = enum_bits(dst_dtype_in), src_value = enum_bits(src_dtype_in);
    if (!dtype_valid(dst_value)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: dst_dtype %d is not a tsr_dtype", kOp, dst_value);
    }
    if (!dtype_valid(src_value)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: src_dtype %d is not a tsr_dtype", kOp, src_value);
    }
    const auto dst_dtype = static_cast<tsr_dtype>(dst_value);
    const auto src_dtype = static_cast<tsr_dtype>(src_value);
    if (count == 0) return TSR_OK;
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (src == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: src is NULL", kOp);
    const size_t dst_size = dtype_size(dst_dtype), src_size = dtype_size(src_dtype);
    if (count > SIZE_MAX / std::max(dst_size, src_size)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: count %zu overflows size_t", kOp, count);
    }
    const size_t dst_bytes = count * dst_size, src_bytes = count * src_size;
    // The kernel runs on the addresses resolve() gives (shadow mappings in discrete mode, where
    // it takes device memory only); overlap is judged on the caller's pointers.
    const bool overlap = ranges_overlap(dst, dst_bytes, src, src_bytes);
    const bool same = dst == src;
    void* out;
    void* in;
    if (tsr_status s =
            resolve(backend->memory, kOp, "dst", dst, dst_bytes, backend->config.discrete, &out);
        s != TSR_OK) {
      return s;
    }
    if (tsr_status s =
            resolve(backend->memory, kOp, "src", src, src_bytes, backend->config.discrete, &in);
        s != TSR_OK) {
      return s;
    }
    const bool streaming = dst_bytes >= kStreamingStoreThreshold;
    return stream->enqueue(kOp, /*always_run=*/false, [=](tsr_status, std::string*) {
      if (overlap && !(same && dst_dtype == src_dtype)) {
        // In-place or overlapping: convert from a private copy of the source (bad_alloc here
        // fails the stream with TSR_RESOURCE_EXHAUSTED).
        std::unique_ptr<unsigned char[]> copy(new unsigned char[src_bytes]);
        std::memcpy(copy.get(), in, src_bytes);
        cast_range(out, dst_dtype, copy.get(), src_dtype, count, streaming);
      } else if (!overlap) {
        cast_range(out, dst_dtype, in, src_dtype, count, streaming);
      }
      if (streaming) store_fence();
      return TSR_OK;
    });
  });
}

}  // namespace api
}  // namespace tessera::host
