// Element types and reduction operators as C++ values, with names for CLIs and errors.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "tessera/hal/backend_abi.h"

namespace tessera::hal {

enum class DType : int32_t {
  kF32 = TSR_DTYPE_F32,
  kF16 = TSR_DTYPE_F16,
  kBF16 = TSR_DTYPE_BF16,
  kF64 = TSR_DTYPE_F64,
  kI32 = TSR_DTYPE_I32,
  kI64 = TSR_DTYPE_I64,
  kU8 = TSR_DTYPE_U8,
};

enum class ReduceOp : int32_t {
  kSum = TSR_REDUCE_SUM,
  kProd = TSR_REDUCE_PROD,
  kMin = TSR_REDUCE_MIN,
  kMax = TSR_REDUCE_MAX,
  kAvg = TSR_REDUCE_AVG,
};

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                                       DType::kI32, DType::kI64, DType::kU8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

// Bytes per element.
size_t dtype_size(DType dtype);
// "f32", "f16", "bf16", "f64", "i32", "i64", "u8" (nccl-tests also says float, half, ...).
std::string_view dtype_name(DType dtype);
// Accepts the names above and the nccl-tests ones (float, half, bfloat16, double, int32, int64,
// uint8); nullopt otherwise.
std::optional<DType> parse_dtype(std::string_view name);
// "sum", "prod", "min", "max", "avg"
std::string_view reduce_op_name(ReduceOp op);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

inline tsr_dtype to_abi(DType d) {
  return static_cast<tsr_dtype>(d);
}
inline tsr_reduce_op to_abi(ReduceOp op) {
  return static_cast<tsr_reduce_op>(op);
}

}  // namespace tessera::hal
