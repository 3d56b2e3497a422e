// Host-memory reductions for the algorithms, on the host backend's kernels (tessera_host_kernels),
// so a collective reduces exactly as a HAL reduce_async would. The kernels read typed pointers, so
// a misaligned operand is first copied, block by block, into aligned scratch.
#include "reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "host/half.h"
#include "host/reduce.h"
#include "host/store.h"

namespace tessera::coll {
namespace {

bool aligned(const void* p, size_t element) {
  return reinterpret_cast<uintptr_t>(p) % element == 0;
}

void reduce_aligned(void* dst, const void* a, const void* b, size_t count, hal::DType dtype,
                    hal::ReduceOp op, bool streaming) {
  const void* srcs[2] = {a, b};
  host::reduce_range(dst, srcs, 2, 0, count, hal::to_abi(dtype), hal::to_abi(op), streaming);
}

template <typename T>
void divide_floats(void* data, size_t count, int divisor) {
  T* values = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) values[i] = values[i] / T(divisor);
}

template <typename T>
void divide_ints(void* data, size_t count, int divisor) {
  T* values = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) values[i] = T(values[i] / T(divisor));
}

}  // namespace

size_t dtype_bytes(hal::DType dtype) {
  switch (dtype) {
    case hal::DType::kF32: return 4;
    case hal::DType::kF16: return 2;
    case hal::DType::kBF16: return 2;
    case hal::DType::kF64: return 8;
    case hal::DType::kI32: return 4;
    case hal::DType::kI64: return 8;
    case hal::DType::kU8: return 1;
  }
  return 1;
}

void copy_block(void* dst, const void* src, size_t bytes, bool streaming) {
  host::store_block(dst, src, bytes, streaming);
}

void streaming_fence() {
  host::store_fence();
}

void reduce_pair(void* dst, const void* a, const void* b, size_t count, hal::DType dtype,
                 hal::ReduceOp op, bool streaming) {
  if (count == 0) return;
  if (op == hal::ReduceOp::kAvg) op = hal::ReduceOp::kSum;
  const size_t element = dtype_bytes(dtype);
  if (aligned(dst, element) && aligned(a, element) && aligned(b, element)) {
    reduce_aligned(dst, a, b, count, dtype, op, streaming);
    return;
  }
  // Misaligned: bounce through aligned blocks. a and b are read before dst is written in each
  // block, so in-place (a == dst or b == dst) stays correct.
  constexpr size_t kBlockBytes = 16384;
  alignas(64) static thread_local unsigned char block_a[kBlockBytes];
  alignas(64) static thread_local unsigned char block_b[kBlockBytes];
  const size_t per_block = kBlockBytes / element;
  for (size_t done = 0; done < count; done += per_block) {
    const size_t n = std::min(per_block, count - done);
    std::memcpy(block_a, static_cast<const char*>(a) + done * element, n * element);
    std::memcpy(block_b, static_cast<const char*>(b) + done * element, n * element);
    reduce_aligned(block_a, block_a, block_b, n, dtype, op, false);
    std::memcpy(static_cast<char*>(dst) + done * element, block_a, n * element);
  }
}

void finish_average(void* data, size_t count, hal::DType dtype, int divisor) {
  if (divisor <= 1 || count == 0) return;
  const size_t element = dtype_bytes(dtype);
  if (!aligned(data, element)) {
    constexpr size_t kBlockBytes = 16384;
    alignas(64) static thread_local unsigned char block[kBlockBytes];
    const size_t per_block = kBlockBytes / element;
    for (size_t done = 0; done < count; done += per_block) {
      const size_t n = std::min(per_block, count - done);
      char* at = static_cast<char*>(data) + done * element;
      std::memcpy(block, at, n * element);
      finish_average(block, n, dtype, divisor);
      std::memcpy(at, block, n * element);
    }
    return;
  }
  switch (dtype) {
    case hal::DType::kF32: divide_floats<float>(data, count, divisor); break;
    case hal::DType::kF64: divide_floats<double>(data, count, divisor); break;
    case hal::DType::kI32: divide_ints<int32_t>(data, count, divisor); break;
    case hal::DType::kI64: divide_ints<int64_t>(data, count, divisor); break;
    case hal::DType::kU8: divide_ints<uint8_t>(data, count, divisor); break;
    case hal::DType::kF16: {
      auto* v = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        v[i] = host::f32_to_f16(host::f16_to_f32(v[i]) / float(divisor));
      }
      break;
    }
    case hal::DType::kBF16: {
      auto* v = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        v[i] = host::f32_to_bf16(host::bf16_to_f32(v[i]) / float(divisor));
      }
      break;
    }
  }
}

}  // namespace tessera::coll
