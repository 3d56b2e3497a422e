#include "tessera/hal/dtype.h"

namespace tessera::hal {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kF32},    {"float", DType::kF32},     {"float32", DType::kF32},
      {"f16", DType::kF16},    {"half", DType::kF16},      {"float16", DType::kF16},
      {"bf16", DType::kBF16},  {"bfloat16", DType::kBF16}, {"f64", DType::kF64},
      {"double", DType::kF64}, {"float64", DType::kF64},   {"i32", DType::kI32},
      {"int32", DType::kI32},  {"int", DType::kI32},       {"i64", DType::kI64},
      {"int64", DType::kI64},  {"u8", DType::kU8},         {"uint8", DType::kU8},
  };
  for (const auto& alias : kAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return std::nullopt;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps) {
    if (reduce_op_name(op) == name) return op;
  }
  return std::nullopt;
}

}  // namespace tessera::hal
