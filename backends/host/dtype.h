// Element sizes and names of tsr_dtype, shared by the reduce, cast and GEMM entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tessera/hal/backend_abi.h"

namespace tessera::host {

// The integer a caller passed for a C enum parameter. C allows any int there, but in C++ reading
// an enum object holding a value outside the enumerators' range is undefined (UBSan's -fsanitize=
// enum flags it), so entry points copy the bits out before validating them.
template <typename Enum>
inline int32_t enum_bits(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized on supported ABIs");
  int32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline bool dtype_valid(int32_t dtype) {
  return dtype >= 0 && dtype < TSR_DTYPE_COUNT;
}

// Bytes per element; 0 for an invalid dtype.
inline size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return 4;
    case TSR_DTYPE_F16: return 2;
    case TSR_DTYPE_BF16: return 2;
    case TSR_DTYPE_F64: return 8;
    case TSR_DTYPE_I32: return 4;
    case TSR_DTYPE_I64: return 8;
    case TSR_DTYPE_U8: return 1;
    default: return 0;
  }
}

inline const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case TSR_DTYPE_F32: return "f32";
    case TSR_DTYPE_F16: return "f16";
    case TSR_DTYPE_BF16: return "bf16";
    case TSR_DTYPE_F64: return "f64";
    case TSR_DTYPE_I32: return "i32";
    case TSR_DTYPE_I64: return "i64";
    case TSR_DTYPE_U8: return "u8";
    default: return "invalid dtype";
  }
}

inline const char* reduce_op_name(int32_t op) {
  switch (op) {
    case TSR_REDUCE_SUM: return "sum";
    case TSR_REDUCE_PROD: return "prod";
    case TSR_REDUCE_MIN: return "min";
    case TSR_REDUCE_MAX: return "max";
    case TSR_REDUCE_AVG: return "avg";
    default: return "invalid op";
  }
}

// True when [a, a+a_bytes) and [b, b+b_bytes) share a byte.
inline bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace tessera::host
