// Block conversions between f32 and the 16-bit floats, used by the reduce and cast kernels for
// whole L1-sized blocks. Same results as the scalar functions in half.h, bit for bit; they only
// pick faster instructions when the CPU has them (F16C for f16, checked once at run time), so
// the library itself still targets baseline x86-64.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::host {

// All four are thread-safe; `in` and `out` must not overlap.
void widen_f16(float* out, const uint16_t* in, size_t n);
void narrow_f16(uint16_t* out, const float* in, size_t n);
void widen_bf16(float* out, const uint16_t* in, size_t n);
void narrow_bf16(uint16_t* out, const float* in, size_t n);

// "F16C" or "portable": which f16 path this CPU uses (for logs and benchmarks).
const char* half_block_isa();

}  // namespace tessera::host
