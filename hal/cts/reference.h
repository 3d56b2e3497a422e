// The CTS's own numeric reference: element encodings of every tsr_dtype, round-to-nearest-even
// conversion into f16/bf16/f32/f64 written from the IEEE definitions (independent of any backend
// and of the compiler's float conversions), and the expected results of reductions and casts.
//
// Elements travel as uint64_t "bits": the dtype's raw encoding, zero-extended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/hal/backend_abi.h"

namespace tessera::cts {

inline constexpr tsr_dtype kAllDtypes[] = {TSR_DTYPE_F32, TSR_DTYPE_F16, TSR_DTYPE_BF16,
                                           TSR_DTYPE_F64, TSR_DTYPE_I32, TSR_DTYPE_I64,
                                           TSR_DTYPE_U8};
inline constexpr tsr_reduce_op kAllOps[] = {TSR_REDUCE_SUM, TSR_REDUCE_PROD, TSR_REDUCE_MIN,
                                            TSR_REDUCE_MAX, TSR_REDUCE_AVG};

size_t dtype_size(tsr_dtype dtype);
bool is_float(tsr_dtype dtype);
// "F32", "F16", "Bf16", "F64", "I32", "I64", "U8": the spelling used in test names.
const char* dtype_name(tsr_dtype dtype);
const char* op_name(tsr_reduce_op op);

// A binary floating-point format: `precision` significand bits including the hidden one, largest
// unbiased exponent `emax` (the bias), total width in bits.
struct FloatFormat {
  int precision;
  int emax;
  int width;
};
const FloatFormat& float_format(tsr_dtype dtype);  // precondition: is_float(dtype)

// Rounds (-1)^negative * magnitude * 2^exponent to `format`, nearest-even, with subnormals;
// overflow gives infinity, as IEEE 754 specifies for round-to-nearest.
uint64_t round_to_format(bool negative, uint64_t magnitude, int exponent,
                         const FloatFormat& format);

// Float dtypes: the nearest-even encoding of `value` (a quiet NaN for NaN, +-Inf for +-Inf).
uint64_t encode_double(double value, tsr_dtype dtype);
// Float dtypes: the exact value of an encoding (every f16/bf16/f32 value is a double).
double decode_float(uint64_t bits, tsr_dtype dtype);
// Integer value -> any dtype: floats round to nearest even; integers keep the low bits.
uint64_t encode_int(int64_t value, tsr_dtype dtype);
// Integer dtypes: the value, sign-extended for i32/i64.
int64_t decode_int(uint64_t bits, tsr_dtype dtype);

bool is_nan(uint64_t bits, tsr_dtype dtype);
// Distance in units in the last place between two encodings of a float dtype (+0 and -0 are the
// same point; NaN against anything else is "infinitely" far).
uint64_t ulp_distance(uint64_t a, uint64_t b, tsr_dtype dtype);

uint64_t load_element(const void* base, size_t index, tsr_dtype dtype);
void store_element(void* base, size_t index, uint64_t bits, tsr_dtype dtype);

// "0x3c00 (1)" for float dtypes, "-7" for integers: how values appear in failure messages.
std::string format_element(uint64_t bits, tsr_dtype dtype);

// The result backend_abi.h prescribes for one element of a reduction over `values` (sources in
// order). Floats are computed in float64 and rounded once; the caller chooses inputs for which
// the float64 computation and every partial result of the prescribed accumulation are exact.
// Integers wrap at the dtype's width; AVG accumulates in 64 bits and truncates toward zero.
uint64_t reduce_reference(const uint64_t* values, int count, tsr_dtype dtype, tsr_reduce_op op);

// The result cast_async must give for one element: floats round to nearest even, float->int
// truncates toward zero and saturates, NaN->int is 0. `*any_nan` is set when the result is NaN,
// whose payload the CTS does not prescribe.
uint64_t cast_reference(uint64_t src_bits, tsr_dtype src, tsr_dtype dst, bool* any_nan);

}  // namespace tessera::cts
